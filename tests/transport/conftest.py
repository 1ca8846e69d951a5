"""An app over a synthetic runtime, driven in-process over real HTTP semantics."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from starlette.testclient import TestClient

from mymcp.app import create_app
from mymcp.auth import ANONYMOUS, AuthFailure, Principal
from mymcp.auth._principal import registered_principal
from mymcp.config import HostConfiguration, McpSettings, ServerSettings
from mymcp.runtime import compose_runtime
from tests.synthetic import contribution, external_bindings, schema, tool

BASE = "http://127.0.0.1:8000"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class NamedBearer:
    """Test authenticator: `Bearer <name>` is principal <name>; no header is anonymous."""

    async def authenticate(self, authorization_values: Sequence[str]) -> Principal | AuthFailure:
        if not authorization_values:
            return ANONYMOUS
        if len(authorization_values) > 1:
            return AuthFailure.MALFORMED
        scheme, _, name = authorization_values[0].partition(" ")
        if scheme.lower() != "bearer" or not name:
            return AuthFailure.REJECTED
        return registered_principal("test", name)

    def challenge_headers(self, failure: Any, *, token_presented: bool) -> dict[str, str]:
        return {}


def _explode(arguments: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("secret path /home/someone/private")


def build_runtime(extra_tools: int = 0):
    tools = [
        tool(
            "alpha",
            "echo",
            input_schema=schema(
                tags={"type": "array", "items": {"type": "string"}},
                count={"type": "integer"},
                text={"type": "string"},
            ),
        ),
        tool("alpha", "explode", _explode),
        *(tool("alpha", f"extra_{i}") for i in range(extra_tools)),
    ]
    alpha = contribution("alpha", *tools)
    return compose_runtime([alpha], external_bindings(alpha), server_version="0.1.0")


@pytest.fixture
def make_client() -> Iterator[Callable[..., TestClient]]:
    clients: list[TestClient] = []

    def make(
        *,
        strict: bool = True,
        session_limit: int = 1024,
        per_principal_limit: int = 64,
        extra_tools: int = 0,
        inactivity: int = 1800,
    ) -> TestClient:
        config = HostConfiguration(
            server=ServerSettings("127.0.0.1", 8000),
            mcp=McpSettings(
                strict,
                inactivity,
                28800,
                max_sessions_per_principal=min(per_principal_limit, session_limit),
                max_sessions=session_limit,
            ),
        )
        app = create_app(
            build_runtime(extra_tools), authenticator=NamedBearer(), configuration=config
        )
        client = TestClient(app, base_url=BASE)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


def rpc(method: str, params: Any = None, request_id: int | str | None = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if request_id is not None:
        message["id"] = request_id
    return message


def initialize(client: TestClient, version: str = "2025-11-25", **headers: str) -> str:
    response = client.post(
        "/mcp",
        json=rpc(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        ),
        headers={**HEADERS, **headers},
    )
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def session_headers(session_id: str, version: str = "2025-11-25", **extra: str) -> dict[str, str]:
    return {**HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": version, **extra}
