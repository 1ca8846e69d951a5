"""HTTP overhead of MyMCP's `/mcp` against a bare Starlette JSON echo, in the same run.

MyMCP serves `tools/call` in both protocol eras: the handshake era (2025-11-25, inside a
session opened by `initialize`) and the stateless era (2026-07-28: no session, the
`_meta` envelope and mirrored headers on every request).

Both servers run under uvicorn (one worker, same flags) on free loopback ports.

* sequential: one keep-alive HTTP/1.1 connection sends the requests one after another
  (the standard library's `http.client`).
* concurrent: 8 keep-alive connections each send their share back to back, as a load
  generator such as `wrk -t1 -c8` would. The client is one asyncio loop writing
  pre-encoded requests and reading only the status line, headers and Content-Length
  body, so its own cost stays small and equal for both servers. Each MyMCP connection
  has its own session, like 8 independent clients.

Printed: p50/p95 latency, requests per second, MyMCP's throughput as a ratio of the
echo's in the same mode, and the server process's own CPU time per request (user +
system, from /proc), which other load on the machine disturbs much less than throughput.
MyMCP's cases run in the opposite order every other round.

    python bench/http_overhead.py [--requests 5000] [--rounds 3] [--mode both]
    python bench/http_overhead.py --governance 12 --requests 4000
    python bench/http_overhead.py --eras 20 --requests 4000
    python bench/http_overhead.py --conversations 20 --requests 1000
    python bench/http_overhead.py --profile profile.txt   # needs: pip install py-spy

With `--governance BLOCKS`, only the governed call (a 20-rule policy, the audit on) and
the same call audit-off are compared, both servers running at once, in paired blocks.
With `--eras BLOCKS`, only the stateless call and the session call are compared, on one
server, in paired blocks. With `--conversations BLOCKS`, what a client sends to make one
call is compared instead: in the handshake era `initialize`, `notifications/initialized`,
the call and the DELETE that ends the session; in the stateless era `server/discover` and
the call (`--requests` then counts conversations).

With `--profile`, nothing is compared: MyMCP serves concurrent `tools/call` while
py-spy samples it, the raw samples go to the file, and the share of samples by source
file (where the server's own time goes) is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.server import READY_MARKER, free_port  # noqa: E402

ECHO_APP = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def echo(request):
    body = await request.json()
    return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": body.get("params")})

app = Starlette(routes=[Route("/mcp", echo, methods=["POST"])])
"""

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
CALL = {"name": "list_tools", "arguments": {}}
CALL_MESSAGE = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": CALL}
PING_MESSAGE = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
PROTOCOL = "2025-11-25"
STATELESS = "2026-07-28"
STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
STATELESS_CALL_MESSAGE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {**CALL, "_meta": STATELESS_META},
}
STATELESS_HEADERS = {
    **HEADERS,
    "mcp-protocol-version": STATELESS,
    "mcp-method": "tools/call",
    "mcp-name": "list_tools",
}
INITIALIZE_PARAMS = {
    "protocolVersion": PROTOCOL,
    "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"},
}
CONNECTIONS = 8
# The audit writer commits what is queued at least once a second.
AUDIT_SETTLE_SECONDS = 1.2


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _NotStarted(SystemExit):
    """The server ended, or never said it was ready; carries what it printed."""

    def __init__(self, output: str) -> None:
        super().__init__(f"server did not start:\n{output}")
        self.output = output


@contextmanager
def _server(command: list[str], env: dict[str, str]) -> Iterator[int]:
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ready, printed, started = threading.Event(), [], [False]

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            printed.append(line)
            if READY_MARKER in line:
                started[0] = True
                ready.set()
        ready.set()  # the output ended: the server is gone

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not ready.wait(30) or not started[0] or process.poll() is not None:
            raise _NotStarted("".join(printed[-20:]))
        yield process.pid
    finally:
        process.terminate()
        process.wait(timeout=15)


class Connection:
    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self._http = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = dict(headers)

    def post(self, message: dict[str, Any]) -> http.client.HTTPResponse:
        self._http.request("POST", "/mcp", json.dumps(message), self.headers)
        response = self._http.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"unexpected HTTP {response.status}")
        return response

    def close(self) -> None:
        self._http.close()


def _summary(samples: list[float], count: int, elapsed: float) -> dict[str, float]:
    samples.sort()
    return {
        "p50": statistics.median(samples),
        "p95": samples[int(len(samples) * 0.95) - 1],
        "rps": count / elapsed,
    }


def _measure(connection: Connection, message: dict[str, Any], count: int) -> dict[str, float]:
    for _ in range(min(500, count)):
        connection.post(message)
    samples = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        connection.post(message)
        samples.append((time.perf_counter() - t0) * 1000)
    return _summary(samples, count, time.perf_counter() - started)


def _raw_request(
    port: int, message: dict[str, Any] | None, headers: dict[str, str], method: str = "POST"
) -> bytes:
    body = b"" if message is None else json.dumps(message).encode()
    lines = [f"{method} /mcp HTTP/1.1", f"host: 127.0.0.1:{port}", f"content-length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _drive(stream: Stream, request: bytes, count: int, samples: list[float]) -> None:
    reader, writer = stream
    for _ in range(count):
        t0 = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"unexpected reply {head[:40]!r}")
        index = head.lower().index(b"content-length:") + 15
        length = int(head[index : head.index(b"\r\n", index)])
        await reader.readexactly(length)
        samples.append((time.perf_counter() - t0) * 1000)


async def _concurrent(port: int, requests: list[bytes], count: int) -> dict[str, float]:
    """`count` requests spread over one keep-alive connection per pre-encoded request."""
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in requests]
    share = count // len(requests)
    try:
        pairs = list(zip(streams, requests, strict=True))
        await asyncio.gather(*(_drive(s, r, min(200, share), []) for s, r in pairs))
        samples: list[float] = []
        started = time.perf_counter()
        await asyncio.gather(*(_drive(s, r, share, samples) for s, r in pairs))
        elapsed = time.perf_counter() - started
    finally:
        for _, writer in streams:
            writer.close()
    row = _summary(samples, share * len(requests), elapsed)
    return {**row, "warm": min(200, share) * len(requests)}


def _run_cases(
    server: tuple[int, int],
    mode: str,
    count: int,
    cases: dict[str, tuple[dict[str, Any], list[dict[str, str]]]],
    settle: float = 0.0,
) -> dict[str, dict[str, float]]:
    """Each case is a message and one header set per connection (the first one is used
    for the sequential mode). `server` is the port and the server process id. The server
    CPU time of a case is read `settle` seconds after its last reply: time for work the
    server defers (the audit's background writer) to be counted in the case's figure."""
    port, pid = server
    rows: dict[str, dict[str, float]] = {}
    for name, (message, header_sets) in cases.items():
        if mode in ("sequential", "both"):
            connection = Connection(port, header_sets[0])
            try:
                cpu = _cpu_seconds(pid)
                rows[f"{name} (1 conn)"] = _measure(connection, message, count)
                time.sleep(settle)
                rows[f"{name} (1 conn)"]["cpu_us"] = _cpu_per_request(pid, cpu, count, 500)
            finally:
                connection.close()
        if mode in ("concurrent", "both"):
            requests = [_raw_request(port, message, headers) for headers in header_sets]
            cpu = _cpu_seconds(pid)
            row = asyncio.run(_concurrent(port, requests, count))
            time.sleep(settle)
            row["cpu_us"] = _cpu_per_request(pid, cpu, count, int(row.pop("warm")))
            rows[f"{name} ({len(requests)} conn)"] = row
    return rows


def _cpu_per_request(pid: int, before: float, count: int, warmup: int) -> float:
    """Server CPU microseconds per request over the measured and warm-up requests."""
    return (_cpu_seconds(pid) - before) / (count + warmup) * 1e6


def bench_echo(count: int, mode: str) -> dict[str, dict[str, float]]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "echo_app.py").write_text(ECHO_APP)
        env = {**os.environ, "PYTHONPATH": tmp}
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "echo_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "info",
            "--no-access-log",
        ]
        with _server(command, env) as pid:
            cases = {"starlette echo": (CALL_MESSAGE, [HEADERS] * CONNECTIONS)}
            return _run_cases((port, pid), mode, count, cases)


def _open_session(port: int) -> dict[str, str]:
    connection = Connection(port, HEADERS)
    try:
        init = connection.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": PROTOCOL},
            }
        )
    finally:
        connection.close()
    return {
        **HEADERS,
        "mcp-session-id": init.getheader("mcp-session-id") or "",
        "mcp-protocol-version": PROTOCOL,
    }


def plain_config(port: int, _audit: Path) -> str:
    """Schema 1 on the given port: no policy, no audit."""
    return f'schema_version = 1\n[server]\naddress = "127.0.0.1"\nport = {port}\n'


@contextmanager
def _mymcp(config: Callable[[int, Path], str]) -> Iterator[tuple[int, int]]:
    """A `mymcp` server on a free port in a temporary HOME, configured by
    `config(port, audit directory)`: its port and process id."""
    for attempt in range(3):
        # A free port can be taken by another program before the server binds it.
        port = free_port()
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp, "xdg", "mymcp")
            directory.mkdir(parents=True)
            (directory / "config.toml").write_text(config(port, Path(tmp, "audit")))
            env = {**os.environ, "HOME": tmp, "XDG_CONFIG_HOME": str(Path(tmp, "xdg"))}
            with ExitStack() as stack:
                try:
                    pid = stack.enter_context(_server([sys.executable, "-m", "mymcp.cli"], env))
                except _NotStarted as failure:
                    if "address_in_use" in failure.output and attempt < 2:
                        continue
                    raise
                yield port, pid
                return


def bench_mymcp(count: int, mode: str, flip: bool = False) -> dict[str, dict[str, float]]:
    """`flip` runs the cases in the opposite order: alternate rounds flip, so that no
    case always benefits (or suffers) from the one measured before it."""
    with _mymcp(plain_config) as (port, pid):
        sessions = [_open_session(port) for _ in range(CONNECTIONS)]
        cases = {
            "mymcp tools/call list_tools": (CALL_MESSAGE, sessions),
            "mymcp stateless tools/call list_tools": (
                STATELESS_CALL_MESSAGE,
                [STATELESS_HEADERS] * CONNECTIONS,
            ),
            "mymcp ping": (PING_MESSAGE, sessions),
        }
        if flip:
            cases = dict(reversed(cases.items()))
        return _run_cases((port, pid), mode, count, cases)


def governed_config(port: int, audit: Path) -> str:
    """Schema 8 with the audit on and a 20-rule policy (the bench's anonymous client is
    allowed list_tools by the first rule; the others speak for other principals)."""
    rules = ['[[policy.rules]]\nprincipals = ["anonymous"]\nallow = ["@read_only"]\n']
    rules += [
        f'[[policy.rules]]\nprincipals = ["operator:user{i}", "oauth:user{i}*"]\n'
        f'allow = ["memory_*"]\ndeny = ["@destructive"]\n'
        for i in range(18)
    ]
    rules.append('[[policy.rules]]\nprincipals = ["scope:memory.write"]\nallow = ["@mutating"]\n')
    return (
        f'schema_version = 8\n[server]\naddress = "127.0.0.1"\nport = {port}\n'
        f'[audit]\ndirectory = "{audit}"\n[policy]\ndefault = "deny"\n' + "".join(rules)
    )


def bench_mymcp_governed(count: int, mode: str) -> dict[str, dict[str, float]]:
    """The same call with governance on: policy decided per call, every call audited."""
    with _mymcp(governed_config) as (port, pid):
        sessions = [_open_session(port) for _ in range(CONNECTIONS)]
        cases = {"mymcp governed tools/call list_tools": (CALL_MESSAGE, sessions)}
        # The audit writer commits at least once a second: its cost is the case's.
        return _run_cases((port, pid), mode, count, cases, settle=AUDIT_SETTLE_SECONDS)


Runner = Callable[[int], dict[str, float]]
"""Serves `count` units of a case (requests, or conversations) after a warm-up, and
returns its row: throughput (`rps`, units per second) and the warm-up units (`warm`)."""


def _requests_runner(port: int, requests: list[bytes]) -> Runner:
    """Sends the pre-encoded requests over one keep-alive connection each."""
    return lambda count: asyncio.run(_concurrent(port, requests, count))


def _paired_blocks(
    blocks: int, count: int, cases: dict[str, tuple[int, Runner]], settle: float = 0.0
) -> tuple[list[float], list[float]]:
    """Two cases (each a server process id and a runner) measured in alternating blocks
    of `count` units, the order flipping every block. Returns, per block pair, the second
    case's throughput as a ratio of the first's, and the first's CPU per unit as a ratio
    of the second's (above 1 when the second costs less).

    Pairing blocks that ran seconds apart cancels most of what other load does to either
    figure, which comparing the best rounds of two cases measured one after the other
    does not. `settle` is waited after each block, for work a server defers.
    """
    first, second = cases
    speed: list[float] = []
    cost: list[float] = []
    for block in range(blocks):
        figures: dict[str, tuple[float, float]] = {}
        for name in (first, second) if block % 2 == 0 else (second, first):
            pid, run = cases[name]
            before = _cpu_seconds(pid)
            row = run(count)
            time.sleep(settle)
            figures[name] = (row["rps"], _cpu_per_request(pid, before, count, int(row["warm"])))
        speed.append(figures[second][0] / figures[first][0])
        if figures[second][1] and figures[first][1]:  # a block too short for the clock
            cost.append(figures[first][1] / figures[second][1])
    return speed, cost


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of `values`: the order
    statistics whose ranks the binomial distribution of "how many values lie below the
    median" puts `confidence` between. Block ratios are neither normal nor independent of
    load bursts, so no interval that assumes a distribution would mean much. With fewer
    than six values no such interval reaches 95 %, and the full range is returned."""
    ordered = sorted(values)
    count = len(ordered)
    tail = (1 - confidence) / 2
    # The largest k with P(Binomial(count, 1/2) < k) <= tail: then [x(k), x(count-k+1)],
    # counting from 1, holds the median with at least `confidence`.
    below, k = 0.0, 0
    while k < count // 2:
        below += math.comb(count, k) / 2**count
        if below > tail:
            break
        k += 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[count - k]


def _paired_summary(
    label: str, blocks: int, count: int, speed: list[float], cost: list[float]
) -> str:
    def figure(values: list[float], unit: str) -> str:
        low, high = median_interval(values)
        return (
            f"median {statistics.median(values):.3f}x {unit} (95% CI {low:.3f}-{high:.3f}, "
            f"range {min(values):.2f}-{max(values):.2f})"
        )

    cpu = figure(cost, "cpu/req") if cost else "cpu/req -"
    return (
        f"{label} ({CONNECTIONS} conn, {blocks} paired blocks of {count}): "
        f"{figure(speed, 'req/s')}, {cpu}"
    )


def compare_governance(blocks: int, count: int) -> None:
    """The governed call against the same call audit-off, both servers up at once."""
    with _mymcp(plain_config) as plain, _mymcp(governed_config) as governed:
        cases = {
            name: (
                pid,
                _requests_runner(
                    port,
                    [
                        _raw_request(port, CALL_MESSAGE, _open_session(port))
                        for _ in range(CONNECTIONS)
                    ],
                ),
            )
            for name, (port, pid) in (("audit-off", plain), ("governed", governed))
        }
        # Both alike wait for the audit writer's turn after each block.
        speed, cost = _paired_blocks(blocks, count, cases, settle=AUDIT_SETTLE_SECONDS)
    print(_paired_summary("governed vs audit-off", blocks, count, speed, cost))


def compare_eras(blocks: int, count: int) -> None:
    """The stateless `tools/call` against the same call inside sessions, on one server:
    the same process serves both, so only the protocol era differs."""
    with _mymcp(plain_config) as (port, pid):
        sessions = [
            _raw_request(port, CALL_MESSAGE, _open_session(port)) for _ in range(CONNECTIONS)
        ]
        stateless = [_raw_request(port, STATELESS_CALL_MESSAGE, STATELESS_HEADERS)] * CONNECTIONS
        cases = {
            "session": (pid, _requests_runner(port, sessions)),
            "stateless": (pid, _requests_runner(port, stateless)),
        }
        speed, cost = _paired_blocks(blocks, count, cases)
    print(_paired_summary("stateless vs session", blocks, count, speed, cost))


async def _exchange(stream: Stream, request: bytes, status: bytes) -> bytes:
    """Send one request and read its reply (a body only where Content-Length says so),
    which must have `status`; returns the reply's head."""
    reader, writer = stream
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 " + status):
        raise SystemExit(f"expected {status.decode()}, got {head[:40]!r}")
    at = head.lower().find(b"content-length:")
    if at >= 0:
        await reader.readexactly(int(head[at + 15 : head.index(b"\r\n", at)]))
    return head


_SESSION_MARK = b"<session>"


def _handshake_conversation(port: int) -> Callable[[Stream], Awaitable[None]]:
    """What a handshake-era client does to make one call: `initialize`, the
    `notifications/initialized` notification, the call in the session it opened, and the
    DELETE that ends the session (what a well-behaved client sends when it is done)."""
    initialize = _raw_request(
        port,
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE_PARAMS},
        HEADERS,
    )
    in_session = {
        **HEADERS,
        "mcp-session-id": _SESSION_MARK.decode(),
        "mcp-protocol-version": PROTOCOL,
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    steps = [
        (_raw_request(port, initialized, in_session), b"202"),
        (_raw_request(port, CALL_MESSAGE, in_session), b"200"),
        (_raw_request(port, None, in_session, method="DELETE"), b"204"),
    ]

    async def converse(stream: Stream) -> None:
        head = await _exchange(stream, initialize, b"200")
        at = head.lower().index(b"mcp-session-id:") + 15
        session = head[at : head.index(b"\r\n", at)].strip()
        for request, status in steps:
            await _exchange(stream, request.replace(_SESSION_MARK, session), status)

    return converse


def _stateless_conversation(port: int) -> Callable[[Stream], Awaitable[None]]:
    """What a stateless-era client does to make one call: `server/discover` (what the
    server is and what it offers), then the call."""
    discover = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "server/discover",
        "params": {"_meta": STATELESS_META},
    }
    discover_headers = {**STATELESS_HEADERS, "mcp-method": "server/discover"}
    del discover_headers["mcp-name"]
    steps = [
        _raw_request(port, discover, discover_headers),
        _raw_request(port, STATELESS_CALL_MESSAGE, STATELESS_HEADERS),
    ]

    async def converse(stream: Stream) -> None:
        for request in steps:
            await _exchange(stream, request, b"200")

    return converse


async def _conversations(
    port: int, converse: Callable[[Stream], Awaitable[None]], count: int
) -> dict[str, float]:
    """`count` conversations spread over one keep-alive connection per client."""
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(CONNECTIONS)]
    share = count // CONNECTIONS
    warm = min(50, share)

    async def client(stream: Stream, rounds: int, samples: list[float]) -> None:
        for _ in range(rounds):
            started = time.perf_counter()
            await converse(stream)
            samples.append((time.perf_counter() - started) * 1000)

    try:
        await asyncio.gather(*(client(stream, warm, []) for stream in streams))
        samples: list[float] = []
        started = time.perf_counter()
        await asyncio.gather(*(client(stream, share, samples) for stream in streams))
        elapsed = time.perf_counter() - started
    finally:
        for _, writer in streams:
            writer.close()
    return {**_summary(samples, share * CONNECTIONS, elapsed), "warm": warm * CONNECTIONS}


def _conversations_runner(port: int, converse: Callable[[Stream], Awaitable[None]]) -> Runner:
    return lambda count: asyncio.run(_conversations(port, converse, count))


def compare_conversations(blocks: int, count: int) -> None:
    """A client's whole conversation for one call in each era, on one server: the
    handshake era's four requests against the stateless era's two."""
    with _mymcp(plain_config) as (port, pid):
        cases = {
            "handshake": (pid, _conversations_runner(port, _handshake_conversation(port))),
            "stateless": (pid, _conversations_runner(port, _stateless_conversation(port))),
        }
        speed, cost = _paired_blocks(blocks, count, cases)
    print(
        _paired_summary("stateless vs handshake conversations", blocks, count, speed, cost)
        .replace("req/s", "conversations/s")
        .replace("cpu/req", "cpu/conversation")
    )


def profile_mymcp(count: int, output: Path) -> None:
    """Sample the MyMCP server with py-spy while it serves concurrent tools/call."""
    with _mymcp(plain_config) as (port, pid):
        sessions = [_open_session(port) for _ in range(CONNECTIONS)]
        requests = [_raw_request(port, CALL_MESSAGE, headers) for headers in sessions]
        asyncio.run(_concurrent(port, requests, CONNECTIONS * 200))  # warm up
        command = ["py-spy", "record", "--pid", str(pid), "--format", "raw"]
        command += ["--rate", "500", "--nonblocking", "--output", str(output)]
        sampler = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            asyncio.run(_concurrent(port, requests, count))
        finally:
            sampler.send_signal(2)  # py-spy writes its file on SIGINT
            sampler.wait(timeout=60)
    shares: dict[str, int] = {}
    total = 0
    for line in output.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack:
            continue
        frame = stack.rsplit(";", 1)[-1]
        source = frame[frame.find("(") + 1 : frame.rfind(":")] if "(" in frame else frame
        for marker in ("site-packages/", f"{ROOT}/", "/lib/python3"):
            source = source.split(marker)[-1]
        shares[source] = shares.get(source, 0) + int(samples)
        total += int(samples)
    print(f"{total} samples; share of samples by source file (own time):")
    for source, share in sorted(shares.items(), key=lambda item: -item[1])[:15]:
        print(f"{share / total * 100:6.1f}%  {source}")


_ORDER = [
    "starlette echo",
    "mymcp tools/call list_tools",
    "mymcp stateless tools/call list_tools",
    "mymcp ping",
    "mymcp governed tools/call list_tools",
]


def _ratio(numerator: float, denominator: float) -> str:
    """`numerator / denominator` as `0.00x`; `-` when a run was too short for the CPU
    clock (10 ms ticks) to see any time at all."""
    return f"{numerator / denominator:.2f}x" if denominator else "-"


def _table_position(name: str) -> tuple[int, str]:
    """Where a row goes: the cases in `_ORDER`'s order, then any other case by name."""
    case = name.split(" (")[0]
    return (_ORDER.index(case) if case in _ORDER else len(_ORDER), name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3, help="best round of each case is kept")
    parser.add_argument("--mode", choices=["sequential", "concurrent", "both"], default="both")
    parser.add_argument("--profile", type=Path, metavar="FILE", help="py-spy MyMCP instead")
    parser.add_argument(
        "--eras",
        type=int,
        metavar="BLOCKS",
        help="only compare the stateless call with the session call, in BLOCKS paired blocks",
    )
    parser.add_argument(
        "--governance",
        type=int,
        metavar="BLOCKS",
        help="only compare the governed call with the audit-off one, in BLOCKS paired blocks",
    )
    parser.add_argument(
        "--conversations",
        type=int,
        metavar="BLOCKS",
        help="only compare one call's whole conversation in each era, in BLOCKS paired blocks",
    )
    args = parser.parse_args()
    if args.conversations is not None:
        compare_conversations(args.conversations, args.requests)
        return
    if args.profile is not None:
        profile_mymcp(max(args.requests, 20000), args.profile)
        return
    if args.governance is not None:
        compare_governance(args.governance, args.requests)
        return
    if args.eras is not None:
        compare_eras(args.eras, args.requests)
        return
    rows: dict[str, dict[str, float]] = {}
    cpu: dict[str, list[float]] = {}
    for round_number in range(args.rounds):
        measured = bench_echo(args.requests, args.mode)
        measured.update(bench_mymcp(args.requests, args.mode, flip=round_number % 2 == 1))
        measured.update(bench_mymcp_governed(args.requests, args.mode))
        for name, row in measured.items():
            cpu.setdefault(name, []).append(row["cpu_us"])
            if name not in rows or row["rps"] > rows[name]["rps"]:
                rows[name] = row
    print(
        f"{'case':48} {'p50 ms':>8} {'p95 ms':>8} {'req/s':>8} {'vs echo':>8}"
        f" {'cpu us/req':>11} {'echo/cpu':>9}"
    )
    for name, row in sorted(rows.items(), key=lambda item: _table_position(item[0])):
        connections = name[name.rindex("(") :]
        echo = rows[f"starlette echo {connections}"]["rps"]
        # The least CPU per request any round needed: other load only ever adds to it.
        least = min(cpu[name])
        echo_cpu = min(cpu[f"starlette echo {connections}"])
        figures = f"{row['p50']:8.3f} {row['p95']:8.3f} {row['rps']:8.0f}"
        print(
            f"{name:48} {figures} {row['rps'] / echo:7.2f}x {least:11.0f}"
            f" {_ratio(echo_cpu, least):>9}"
        )
    # Governance's own target compares the governed call with the same call audit-off.
    for connections in sorted({name[name.rindex("(") :] for name in rows}):
        governed = f"mymcp governed tools/call list_tools {connections}"
        plain = f"mymcp tools/call list_tools {connections}"
        if governed in rows and plain in rows:
            speed = rows[governed]["rps"] / rows[plain]["rps"]
            cost = _ratio(min(cpu[plain]), min(cpu[governed]))
            print(f"governed vs audit-off {connections}: {speed:.2f}x req/s, {cost} cpu/req")


if __name__ == "__main__":
    main()
