"""The hostile-wire corpus against the real server: no 5xx, no traceback, still serving.

Lone surrogates (escaped and as raw bytes), deep nesting, huge numbers, odd Unicode in
every field, ids of every type and every method, inside and outside a session, sent as
raw HTTP to a real `mymcp` process.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.server import RunningServer
from tests.transport.test_wire import _messages, _raw

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

pytestmark = pytest.mark.slow

_raw_surrogates = st.sampled_from([b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xff"])


def _session(client: httpx.Client, url: str) -> dict[str, str]:
    opened = client.post(
        url,
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
        headers=HEADERS,
    )
    assert opened.status_code == 200
    return {
        **HEADERS,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    message=_messages,
    depth=st.sampled_from([0, 0, 0, 1, 70, 2000]),
    in_session=st.booleans(),
    raw_bytes=st.none() | _raw_surrogates,
)
def test_the_real_server_answers_every_hostile_message_below_500(
    anonymous_server: RunningServer,
    message: dict[str, Any],
    depth: int,
    in_session: bool,
    raw_bytes: bytes | None,
) -> None:
    body = _raw(message, depth)
    if raw_bytes is not None:  # invalid UTF-8 inside the method name
        body = body.replace(b'"method": "', b'"method": "' + raw_bytes, 1)
    with httpx.Client(timeout=10) as client:
        headers = _session(client, anonymous_server.url) if in_session else HEADERS
        response = client.post(anonymous_server.url, content=body, headers=headers)
        assert response.status_code < 500, (response.status_code, response.text)
        if response.content:
            json.loads(response.content)  # every body is one JSON document
    assert anonymous_server.process.poll() is None
    assert not any("Traceback" in line for line in anonymous_server.output)


def test_the_server_logged_no_traceback_and_still_serves(anonymous_server: RunningServer) -> None:
    body = b'{"jsonrpc":"2.0","id":"\\ud800","method":"initialize","params":{}}'
    with httpx.Client(timeout=10) as client:
        refused = client.post(anonymous_server.url, content=body, headers=HEADERS)
        assert refused.status_code == 400
        assert "mcp-session-id" not in refused.headers
        health = client.get(anonymous_server.url.removesuffix("/mcp") + "/health")
        assert health.json() == {"status": "ok"}
    assert not any("Traceback" in line for line in anonymous_server.output)
