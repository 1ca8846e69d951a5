"""A minimal MCP client over one keep-alive HTTP/1.1 connection, and a real server to use
it with; shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import http.client
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.server import Sandbox, serve  # noqa: E402

__all__ = ["HEADERS", "PROTOCOL", "McpClient", "mcp_server"]

PROTOCOL = "2025-11-25"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class McpClient:
    """A minimal keep-alive MCP client over one HTTP/1.1 connection."""

    def __init__(self, port: int) -> None:
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self._headers = dict(HEADERS)
        self._next = 0

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next, "method": method}
        if params is not None:
            message["params"] = params
        self._connection.request("POST", "/mcp", json.dumps(message), self._headers)
        response = self._connection.getresponse()
        body = response.read()
        if response.status == 202:
            return {}
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {body[:300]!r}")
        session = response.getheader("mcp-session-id")
        if session:
            self._headers["mcp-session-id"] = session
            self._headers["mcp-protocol-version"] = PROTOCOL
        return _decode(body, response.getheader("content-type") or "")

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a tool; its structured result (a tool error is reported, not raised)."""
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        if "result" not in reply:
            raise SystemExit(f"{name} failed: {reply}")
        structured: dict[str, Any] = reply["result"]["structuredContent"]
        return structured

    def close(self) -> None:
        self._connection.close()


def _decode(body: bytes, content_type: str) -> dict[str, Any]:
    if content_type.startswith("text/event-stream"):
        for line in body.decode().splitlines():
            if line.startswith("data:"):
                decoded: dict[str, Any] = json.loads(line[5:])
                return decoded
        raise SystemExit("empty event stream")
    parsed: dict[str, Any] = json.loads(body)
    return parsed


@contextmanager
def mcp_server(root: Path, extra_env: Mapping[str, str] | None = None) -> Iterator[McpClient]:
    """A real server over ``root`` and an initialised keep-alive client."""
    with tempfile.TemporaryDirectory(prefix="mymcp-bench-") as tmp:
        sandbox = Sandbox(Path(tmp))
        sandbox.home.mkdir(mode=0o700)
        sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
        environment = {"MNEMOSYNE_MEMORY_ROOT": str(root), **(extra_env or {})}
        with serve(sandbox, environment) as server:
            client = McpClient(server.port)
            try:
                client.request(
                    "initialize",
                    {
                        "protocolVersion": PROTOCOL,
                        "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "0"},
                    },
                )
                client.request("notifications/initialized")
                yield client
            finally:
                client.close()
