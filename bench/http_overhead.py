"""HTTP overhead of MyMCP's `/mcp` against a bare Starlette JSON echo, in the same run.

Both servers run under uvicorn (one worker, same flags) on free loopback ports. One
keep-alive HTTP/1.1 connection per case sends the same number of sequential requests;
the client is the standard library's `http.client`, so client cost stays small and equal
for both. Printed: p50/p95 latency, requests per second, and MyMCP's throughput as a
ratio of the echo's.

    python bench/http_overhead.py [--requests 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def _server(command: list[str], env: dict[str, str]) -> Iterator[None]:
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if READY_MARKER in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not ready.wait(30) or process.poll() is not None:
            raise SystemExit("server did not start")
        yield
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


def _measure(connection: Connection, message: dict[str, Any], count: int) -> dict[str, float]:
    for _ in range(min(500, count)):
        connection.post(message)
    samples = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        connection.post(message)
        samples.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    samples.sort()
    return {
        "p50": statistics.median(samples),
        "p95": samples[int(len(samples) * 0.95) - 1],
        "rps": count / elapsed,
    }


def bench_echo(count: int) -> dict[str, float]:
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
        with _server(command, env):
            connection = Connection(port, HEADERS)
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": CALL}
            try:
                return _measure(connection, message, count)
            finally:
                connection.close()


def bench_mymcp(count: int) -> dict[str, dict[str, float]]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "xdg", "mymcp")
        config.mkdir(parents=True)
        (config / "config.toml").write_text(
            f'schema_version = 1\n[server]\naddress = "127.0.0.1"\nport = {port}\n'
        )
        env = {**os.environ, "HOME": tmp, "XDG_CONFIG_HOME": str(Path(tmp, "xdg"))}
        with _server([sys.executable, "-m", "mymcp.cli"], env):
            connection = Connection(port, HEADERS)
            try:
                init = connection.post(
                    {
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "initialize",
                        "params": {"protocolVersion": "2025-11-25"},
                    }
                )
                connection.headers.update(
                    {
                        "mcp-session-id": init.getheader("mcp-session-id") or "",
                        "mcp-protocol-version": "2025-11-25",
                    }
                )
                return {
                    "tools/call list_tools": _measure(
                        connection,
                        {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "tools/call",
                            "params": CALL,
                        },
                        count,
                    ),
                    "ping": _measure(
                        connection, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, count
                    ),
                }
            finally:
                connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3, help="best round of each case is kept")
    args = parser.parse_args()
    rows: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        measured = {"starlette echo": bench_echo(args.requests)}
        measured.update({f"mymcp {k}": v for k, v in bench_mymcp(args.requests).items()})
        for name, row in measured.items():
            if name not in rows or row["rps"] > rows[name]["rps"]:
                rows[name] = row
    echo = rows["starlette echo"]["rps"]
    print(f"{'case':28} {'p50 ms':>8} {'p95 ms':>8} {'req/s':>8} {'vs echo':>8}")
    for name, row in rows.items():
        figures = f"{row['p50']:8.3f} {row['p95']:8.3f} {row['rps']:8.0f}"
        print(f"{name:28} {figures} {row['rps'] / echo:7.2f}x")


if __name__ == "__main__":
    main()
