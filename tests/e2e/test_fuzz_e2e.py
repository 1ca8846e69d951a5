"""Arbitrary requests against the real server: never a 500, never a session, still serving."""

from __future__ import annotations

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.server import RunningServer
from tests.transport.test_fuzz import bodies, header_lists

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(["POST", "POST", "GET", "DELETE", "PATCH"]),
    body=bodies,
    headers=header_lists,
    base=st.booleans(),
)
def test_real_server_survives_arbitrary_requests(
    anonymous_server: RunningServer, method: str, body: bytes, headers, base: bool
) -> None:
    # The HTTP client refuses to put a lying Content-Length or a value with surrounding
    # whitespace on the wire (h11 forbids it), so those stay in the in-process fuzz only.
    sent = (list(HEADERS.items()) if base else []) + [
        (name, value)
        for name, value in headers
        if name != "content-length" and value == value.strip()
    ]
    with httpx.Client(timeout=10) as client:
        response = client.request(method, anonymous_server.url, content=body, headers=sent)
        assert response.status_code < 500
        assert "mcp-session-id" not in response.headers
        health = client.get(anonymous_server.url.removesuffix("/mcp") + "/health")
        assert health.json() == {"status": "ok"}
    assert anonymous_server.process.poll() is None
    assert not any("Traceback" in line for line in anonymous_server.output)
