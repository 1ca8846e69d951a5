"""CPU time per request of MyMCP's ASGI application alone: no sockets, no uvicorn.

The application (with the launcher's logging, written to /dev/null) answers `tools/call
list_tools` in both protocol eras (inside a session, and stateless with the `_meta`
envelope and mirrored headers, as the SDK clients send them) and `ping`, in one
process; the least CPU time per request over several rounds is printed. Other load
on the machine barely moves this figure, unlike throughput over HTTP, so it is the one
to compare two versions of the code with:

    python bench/app_cpu.py
    PYTHONPATH=/path/to/other/checkout python bench/app_cpu.py   # the other version
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
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
    }


async def _request(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> list[Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(_scope(headers), receive, send)
    return sent


async def _measure(app: Any, count: int, rounds: int) -> dict[str, float]:
    opened = await _request(
        app,
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}).encode(),
        HEADERS,
    )
    session = dict(opened[0]["headers"])[b"mcp-session-id"]
    headers = [*HEADERS, (b"mcp-session-id", session), (b"mcp-protocol-version", b"2025-11-25")]
    call = {"name": "list_tools", "arguments": {}}
    cases = {
        "tools/call list_tools": (call, headers),
        "stateless tools/call": ({**call, "_meta": STATELESS_META}, STATELESS_HEADERS),
        "ping": (None, headers),
    }
    bodies = {}
    for name, (params, case_headers) in cases.items():
        method = "ping" if name == "ping" else "tools/call"
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            message["params"] = params
        bodies[name] = json.dumps(message).encode()
        reply = await _request(app, bodies[name], case_headers)
        if reply[0]["status"] != 200:
            raise SystemExit(f"{name}: HTTP {reply[0]['status']}")
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):  # the cases take turns, so a busy moment hits each alike
        for name, (_, case_headers) in cases.items():
            body = bodies[name]
            started = time.process_time()
            for _ in range(count):
                await _request(app, body, case_headers)
            best[name] = min(best[name], (time.process_time() - started) / count * 1e6)
    return best


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, "xdg"))
        from mymcp.app import create_host_app
        from mymcp.runtime.bootstrap import build_host

        report = sys.stdout
        with open(os.devnull, "w") as devnull:
            sys.stderr = devnull
            _configure_launcher_logging()
            app = create_host_app(build_host())
            results = asyncio.run(_measure(app, args.requests, args.rounds))
    for name, cpu in results.items():
        print(f"{name:24} {cpu:7.1f} us CPU per request", file=report)


if __name__ == "__main__":
    main()
