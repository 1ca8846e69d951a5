"""Client-side helpers for the authentication end-to-end tests: SDK and raw HTTP."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

__all__ = [
    "MCP_HEADERS",
    "PROTOCOL",
    "SdkOutcome",
    "open_session",
    "request_json",
    "sdk_session",
    "send",
    "session_headers",
]

PROTOCOL = "2025-11-25"
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "mymcp-e2e", "version": "0"},
    },
}


@dataclass
class SdkOutcome:
    protocol_version: str | None
    tool_names: list[str]
    called: Any


SDK_MODES = (("auto", "2026-07-28"), ("legacy", "2025-11-25"))
"""Each SDK connect mode and the protocol revision it settles on with MyMCP: the default
(auto) adopts the stateless era, legacy performs the handshake."""


async def sdk_session(
    url: str,
    token: str,
    *,
    call: str = "list_tools",
    arguments: dict[str, Any] | None = None,
    mode: str = "auto",
) -> SdkOutcome:
    """Connect the official SDK client with a bearer token, list and call."""
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0)
        ) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        names: list[str] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [tool.name for tool in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        called = await client.call_tool(call, arguments or {})
        return SdkOutcome(client.protocol_version, names, called)


def send(
    http: httpx.Client,
    method: str,
    url: str,
    *,
    authorization: Sequence[str] = (),
    session: str | None = None,
    body: dict[str, Any] | None = None,
) -> httpx.Response:
    """One raw request; `authorization` lists every `Authorization` header value to send."""
    headers: list[tuple[str, str]] = list(MCP_HEADERS.items())
    headers += [("authorization", value) for value in authorization]
    if session is not None:
        headers += [("mcp-session-id", session), ("mcp-protocol-version", PROTOCOL)]
    if method == "POST":
        payload = body if body is not None else INITIALIZE
        return http.request(method, url, headers=headers, json=payload)
    return http.request(method, url, headers=headers)


def open_session(http: httpx.Client, url: str, token: str) -> str:
    """Initialize with a valid token and return the new session id."""
    response = send(http, "POST", url, authorization=[f"Bearer {token}"])
    assert response.status_code == 200, response.text
    assert response.json()["result"]["protocolVersion"] == PROTOCOL
    session = response.headers.get("mcp-session-id")
    assert isinstance(session, str)
    assert session
    return session


def request_json(method: str, request_id: int = 2, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def session_headers(session: str) -> dict[str, str]:
    return {**MCP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
