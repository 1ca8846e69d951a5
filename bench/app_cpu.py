"""CPU time per request of MyMCP's ASGI application alone: no sockets, no uvicorn.

The application (with the launcher's logging, written to /dev/null) answers `tools/call
list_tools` in both protocol eras (inside a session, and stateless with the `_meta`
envelope and mirrored headers, as the SDK clients send them) and `ping`, in one process,
and the session call again from an application governed as `http_overhead.py`'s
governed case is (a 20-rule policy, the audit on, its background writer running; each
governed round ends by writing its own records, so its CPU time includes them). The
least CPU time per request over several rounds is printed, the cases taking turns round
by round, and the plain call's figure as a ratio of the governed one's. Other load on
the machine barely moves these figures, unlike throughput over HTTP, so they are the
ones to compare two versions of the code with:

    python bench/app_cpu.py
    PYTHONPATH=/path/to/other/checkout python bench/app_cpu.py   # the other version

A case the other version does not serve (the stateless era, governance) is left out.

With `--instructions`, the plain cases are counted instead of timed: each runs alone
under valgrind's callgrind twice, with `--requests` and with three times as many, and
the difference of the two instruction totals per extra request is printed. The count
does not depend on the machine's speed or load (two runs of the same code agree to
within about 200 instructions of some 225,000, from thread and event-loop timing), so
it settles differences of a fraction of a microsecond that no timing can, though not
differences smaller than that spread. It needs valgrind (`apt-get install valgrind`)
and takes a few minutes.
Each request's scope carries a connection watch, as MyMCP's own HTTP protocol gives
every request. With `--protocol` as well, each counted request is sent instead as HTTP
bytes through that protocol (uvicorn's parser, MyMCP's bounds, the response written
back) on one keep-alive in-memory connection, the transport of the protocol's tests:
the server's whole per-request work but the socket calls.

    python bench/app_cpu.py --instructions --requests 1000
    python bench/app_cpu.py --instructions --protocol --requests 1000
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
]
STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
STATELESS_HEADERS = [
    *HEADERS,
    (b"mcp-protocol-version", b"2026-07-28"),
    (b"mcp-method", b"tools/call"),
    (b"mcp-name", b"list_tools"),
]


@functools.cache
def _connection() -> dict[str, Any]:
    """What MyMCP's own HTTP protocol puts in every request's scope: its connection's
    watch (all requests here share one connection), which a stateless-era request is
    registered with while it is answered. A checkout older than the watch has none."""
    try:
        from mymcp.transport._exchange import CONNECTION_WATCH, ConnectionWatch
    except ImportError:
        return {}
    return {CONNECTION_WATCH: ConnectionWatch()}


def _scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        **_connection(),
    }


async def _request(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> list[Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(_scope(headers), receive, send)
    return sent


async def _session_headers(app: Any) -> list[tuple[bytes, bytes]]:
    opened = await _request(
        app,
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}).encode(),
        HEADERS,
    )
    session = dict(opened[0]["headers"])[b"mcp-session-id"]
    return [*HEADERS, (b"mcp-session-id", session), (b"mcp-protocol-version", b"2025-11-25")]


def _body(method: str, params: dict[str, Any] | None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def _cases(
    apps: dict[str, Any], sessions: dict[int, list[tuple[bytes, bytes]]], settle: Callable[[], None]
) -> dict[str, tuple[Any, bytes, list[tuple[bytes, bytes]], Callable[[], None] | None]]:
    """Each case's application, request body, headers and what ends one of its rounds."""
    arguments = {"name": "list_tools", "arguments": {}}
    call = _body("tools/call", arguments)
    stateless = _body("tools/call", {**arguments, "_meta": STATELESS_META})
    plain = apps["plain"]
    cases: dict[str, tuple[Any, bytes, list[tuple[bytes, bytes]], Callable[[], None] | None]]
    cases = {
        "tools/call list_tools": (plain, call, sessions[id(plain)], None),
        "stateless tools/call": (plain, stateless, STATELESS_HEADERS, None),
        "ping": (plain, _body("ping", None), sessions[id(plain)], None),
    }
    if "governed" in apps:
        governed = apps["governed"]
        cases["governed tools/call"] = (governed, call, sessions[id(governed)], settle)
    return cases


async def _measure(
    apps: dict[str, Any], count: int, rounds: int, settle: Callable[[], None]
) -> dict[str, float]:
    """`settle` ends each governed round: it writes the round's audit records, so that
    the round pays for them (the background writer would, at most a second later)."""
    sessions = {id(app): await _session_headers(app) for app in apps.values()}
    cases = _cases(apps, sessions, settle)
    for name, (app, body, headers, _) in list(cases.items()):
        reply = await _request(app, body, headers)
        if reply[0]["status"] != 200:
            # An older checkout measured through PYTHONPATH may not serve every case
            # (the stateless era is newer than the session one): leave it out, saying so.
            print(f"{name:24} not served (HTTP {reply[0]['status']}): left out")
            del cases[name]
    results = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):  # the cases take turns, so a busy moment hits each alike
        for name, (app, body, headers, finish) in cases.items():
            started = time.process_time()
            for _ in range(count):
                await _request(app, body, headers)
            if finish is not None:
                finish()
            results[name] = min(results[name], (time.process_time() - started) / count * 1e6)
    return results


async def _repeat(app: Any, case: str, count: int, protocol: bool) -> None:
    """Answer one case's request `count` times after a warm-up (what callgrind counts),
    handing the application each request itself or, with `protocol`, as bytes on one
    keep-alive connection of MyMCP's own HTTP protocol."""
    sessions = {id(app): await _session_headers(app)}
    _, body, headers, _ = _cases({"plain": app}, sessions, lambda: None)[case]
    answer = _over_protocol(app, body, headers) if protocol else None
    for _ in range(200):
        reply = await _request(app, body, headers) if answer is None else await answer()
    # What startup left is set aside from the collector: a full collection walks every
    # object, so whether one happens to fall in the counted requests would otherwise
    # move the per-request figure by more than the differences it is meant to show.
    gc.collect()
    gc.freeze()
    for _ in range(count):
        reply = await _request(app, body, headers) if answer is None else await answer()
    if reply[0]["status"] != 200:
        raise SystemExit(f"{case}: not served (HTTP {reply[0]['status']})")


def _whole(written: bytearray) -> bool:
    """Whether `written` holds a whole response, by its `content-length`."""
    head, found, rest = bytes(written).partition(b"\r\n\r\n")
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return found == b"\r\n\r\n" and len(rest) >= int(line[15:])
    return False


def _over_protocol(
    app: Any, body: bytes, headers: list[tuple[bytes, bytes]]
) -> Callable[[], Awaitable[list[Any]]]:
    """Send the request as HTTP bytes over the in-memory transport of the protocol's
    tests, and wait for the whole response (its status, as `_request` gives it)."""
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the test harness
    from mymcp.transport import ConnectionLimits
    from tests.transport.test_connections import Server, request

    connection = Server(app, ConnectionLimits()).connect()
    head = "".join(f"{name.decode()}: {value.decode()}\r\n" for name, value in headers[1:])
    data = request("/mcp", headers=head, body=body)

    async def answer() -> list[Any]:
        connection.written.clear()
        connection.send(data)
        written = connection.written
        while len(written) < expected[0] if expected[0] else not _whole(written):
            await asyncio.sleep(0)  # the request's task and its write run
        # Every answer to the same request has the same length: it is then waited for
        # by its length alone, which costs each era the same.
        expected[0] = len(written)
        return [{"status": int(written.split(b" ", 2)[1])}]

    expected = [0]
    return answer


def _count_instructions(case: str, count: int, protocol: bool) -> int:
    """The instructions a whole run answering `case` `count` times takes, by callgrind."""
    with tempfile.TemporaryDirectory() as scratch:
        output = os.path.join(scratch, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={output}"]
        command += [sys.executable, __file__, "--repeat", case, "--requests", str(count)]
        command += ["--protocol"] if protocol else []
        # A fixed hash seed: dict and set layouts, and so the instructions, repeat.
        environ = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, env=environ, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{case}: the counted run failed:\n{done.stdout}{done.stderr}")
        with open(output) as profile:
            for line in profile:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    raise SystemExit(f"{case}: callgrind wrote no total")


def _instructions(count: int, protocol: bool) -> None:
    cases = ("tools/call list_tools", "stateless tools/call", "ping")
    runs = [(case, n) for case in cases for n in (count, 3 * count)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        totals = dict(
            zip(runs, pool.map(lambda run: _count_instructions(*run, protocol), runs), strict=True)
        )
    figures = {}
    for case in cases:
        # Startup and warm-up cost the same in both runs, so the difference is requests.
        figures[case] = (totals[case, 3 * count] - totals[case, count]) / (2 * count)
        print(f"{case:24} {figures[case]:9.0f} instructions per request")
    ratio = figures["stateless tools/call"] / figures["tools/call list_tools"]
    print(f"stateless vs session     {ratio:9.3f}x instructions")


def _configure_launcher_logging() -> None:
    """The launcher's logging, in this checkout or in an older one measured through
    PYTHONPATH (which set it up in `mymcp.cli`)."""
    try:
        from mymcp.logs import configure_logging, log_settings
    except ImportError:
        import mymcp.cli

        mymcp.cli._configure_logging()  # type: ignore[attr-defined]
        return
    configure_logging(log_settings())


def _write_governed_config(home: str) -> dict[str, str] | None:
    """An environment whose host configuration is the governed bench case's, or None
    when the measured checkout predates governance."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        from http_overhead import governed_config
    except ImportError:
        return None
    config = os.path.join(home, "governed", "mymcp")
    os.makedirs(config)
    with open(os.path.join(config, "config.toml"), "w") as handle:
        handle.write(governed_config(8000, Path(home, "audit")))
    return {**os.environ, "XDG_CONFIG_HOME": os.path.join(home, "governed")}


def _governs() -> bool:
    """Whether the measured checkout has governance (an older one, measured through
    PYTHONPATH, refuses the governed configuration's schema)."""
    try:
        import mymcp.governance  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # A governed round ends with one commit of its records, as the server's audit writer
    # commits a second's worth at a time: rounds of a few thousand requests cost what
    # they cost the server.
    parser.add_argument("--requests", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with callgrind instead"
    )
    parser.add_argument(
        "--protocol",
        action="store_true",
        help="with --instructions: send each request through MyMCP's own HTTP protocol",
    )
    parser.add_argument("--repeat", metavar="CASE", help=argparse.SUPPRESS)  # what is counted
    args = parser.parse_args()
    if args.instructions:
        _instructions(min(args.requests, 1000), args.protocol)
        return
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, "xdg"))
        from mymcp.app import create_host_app
        from mymcp.host import build_host

        report = sys.stdout
        with open(os.devnull, "w") as devnull:
            sys.stderr = devnull
            _configure_launcher_logging()
            if args.repeat is not None:
                app = create_host_app(build_host())
                asyncio.run(_repeat(app, args.repeat, args.requests, args.protocol))
                return
            apps = {"plain": create_host_app(build_host())}
            governed_environ = _write_governed_config(home)
            audit = None
            if governed_environ is not None and _governs():
                host = build_host(governed_environ)
                audit = host.governance.audit
                apps["governed"] = create_host_app(host)
                if audit is not None:
                    audit.start()  # what the lifespan does
            settle = audit.commit if audit is not None else (lambda: None)
            try:
                results = asyncio.run(_measure(apps, args.requests, args.rounds, settle))
            finally:
                if audit is not None:
                    audit.close()
    for name, cpu in results.items():
        print(f"{name:24} {cpu:7.1f} us CPU per request", file=report)
    if "governed tools/call" in results:
        ratio = results["tools/call list_tools"] / results["governed tools/call"]
        print(f"governed vs audit-off    {ratio:7.2f}x (plain CPU / governed CPU)", file=report)


if __name__ == "__main__":
    main()
