"""What the console's routes cost `/mcp`: the same app with and without them, in one run.

Both apps come from `create_app` over the same synthetic runtime; from one of them the
console mount is removed again (and the script checks that `/console/` is then gone
while `/mcp` still answers). Requests go straight into the ASGI app (no sockets, no
client), in alternating blocks, so that what differs is only the routing. Printed: the
median and the least CPU microseconds per `ping` request over all blocks.

    python bench/console_overhead.py [--blocks 20] [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mymcp.app import create_app  # noqa: E402
from mymcp.config import HostConfiguration, McpSettings, ServerSettings  # noqa: E402
from mymcp.transport import HostApplication  # noqa: E402
from tests.transport.conftest import NamedBearer, build_runtime  # noqa: E402

HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()


def _apps() -> dict[str, HostApplication]:
    configuration = HostConfiguration(
        server=ServerSettings("127.0.0.1", 8000), mcp=McpSettings(False, 1800, 28800)
    )
    apps = {
        name: create_app(build_runtime(), authenticator=NamedBearer(), configuration=configuration)
        for name in ("with console", "without console")
    }
    # The root app keeps its mounted sub-applications as (prefix, app) pairs; the check
    # below fails loudly, rather than measuring the same app twice, if that ever changes.
    plain = apps["without console"]
    mounts = getattr(plain, "_mounts", None)
    if not mounts or [prefix for prefix, _ in mounts] != ["/console"]:
        raise SystemExit(f"cannot remove the console mount: the root app has {mounts!r}")
    plain._mounts = ()  # type: ignore[attr-defined]
    return apps


async def _status(app: HostApplication, method: str, path: str) -> int:
    """The HTTP status `app` answers `method path` with."""
    messages = await _request(app, method, path, b"", HEADERS)
    return int(messages[0]["status"])


async def _post(app: HostApplication, body: bytes, headers: list[tuple[bytes, bytes]]) -> list[Any]:
    return await _request(app, "POST", "/mcp", body, headers)


async def _request(
    app: HostApplication,
    method: str,
    path: str,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
) -> list[Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }
    await app(scope, receive, send)
    return sent


async def _run(blocks: int, requests: int) -> dict[str, list[float]]:
    apps = _apps()
    consoles = {name: await _status(app, "GET", "/console/approvals") for name, app in apps.items()}
    if consoles != {"with console": 403, "without console": 404}:  # 403: not signed in
        raise SystemExit(f"the two apps do not differ by their console: {consoles}")
    headers = {}
    for name, app in apps.items():
        started = await _post(app, json.dumps(INITIALIZE).encode(), HEADERS)
        session = dict(started[0]["headers"])[b"mcp-session-id"]
        headers[name] = [*HEADERS, (b"mcp-session-id", session)]
    timings: dict[str, list[float]] = {name: [] for name in apps}
    order = list(apps)
    for block in range(blocks):
        for name in order if block % 2 else reversed(order):
            started_at = time.process_time()
            for _ in range(requests):
                await _post(apps[name], PING, headers[name])
            timings[name].append((time.process_time() - started_at) / requests * 1e6)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # the request log is the same for both apps
    timings = asyncio.run(_run(args.blocks, args.requests))
    print(f"{'app':18} {'median CPU us':>14} {'least CPU us':>13}")
    for name, samples in timings.items():
        print(f"{name:18} {statistics.median(samples):14.2f} {min(samples):13.2f}")


if __name__ == "__main__":
    main()
