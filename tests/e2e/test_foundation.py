"""The real server, driven by the official MCP SDK client and by raw HTTP."""

from __future__ import annotations

import json
import re
import warnings

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.server import RunningServer, Sandbox, log_and_errors, port_is_bound, run_cli

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def _sdk_session(url: str, mode: str) -> dict[str, object]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        tools, cursor = [], None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        called = await client.call_tool("list_tools", {})
        if mode == "legacy":  # ping exists only in the handshake era
            with warnings.catch_warnings():  # the SDK warns that newer revisions dropped it
                warnings.simplefilter("ignore")
                await client.send_ping()
        return {
            "version": client.protocol_version,
            "server": client.server_info,
            "tools": tools,
            "called": called,
        }


def test_sdk_client_in_auto_mode_adopts_the_stateless_era(anonymous_server: RunningServer) -> None:
    outcome = anyio.run(_sdk_session, anonymous_server.url, "auto")
    assert outcome["version"] == "2026-07-28"
    assert outcome["server"].name == "mymcp"
    names = [tool.name for tool in outcome["tools"]]
    assert names[0] == "list_tools"
    assert {"memory_recall", "memory_list", "memory_inspect"} <= set(names)
    for tool in outcome["tools"]:
        assert re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", tool.name)
        assert tool.description
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
    called = outcome["called"]
    assert called.is_error is False
    assert called.structured_content["tools"] == names
    assert json.loads(called.content[0].text) == called.structured_content


def test_sdk_client_in_legacy_mode(anonymous_server: RunningServer) -> None:
    outcome = anyio.run(_sdk_session, anonymous_server.url, "legacy")
    assert outcome["version"] == "2025-11-25"


def test_raw_http_session_lifecycle(anonymous_server: RunningServer) -> None:
    base = anonymous_server.url.removesuffix("/mcp")
    with httpx.Client() as http:
        assert http.get(f"{base}/health").json() == {"status": "ok"}
        assert http.get(f"{base}/version").json()["version"] == "0.1.0"
        init = http.post(
            anonymous_server.url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25"},
            },
            headers=HEADERS,
        )
        session = init.headers["mcp-session-id"]
        headers = {**HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert http.post(anonymous_server.url, json=ping, headers=headers).json()["result"] == {}
        evil = {**headers, "origin": "http://evil.example"}
        assert http.post(anonymous_server.url, json=ping, headers=evil).status_code == 403
        assert http.delete(anonymous_server.url, headers=headers).status_code == 204
        assert http.post(anonymous_server.url, json=ping, headers=headers).status_code == 404


def test_cli_help_version_and_check_never_serve(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    env = sandbox.environ()
    help_text = run_cli(["--help"], env)
    assert help_text.returncode == 0
    assert "check" in help_text.stdout
    assert run_cli(["--version"], env).stdout.strip() == "mymcp 0.1.0"
    checked = run_cli(["check"], env)
    assert checked.returncode == 0, checked.stderr
    assert "list_tools" in checked.stdout
    assert not port_is_bound(sandbox.port)


def test_invalid_configuration_stops_startup_without_binding(sandbox: Sandbox) -> None:
    sandbox.write_config("schema_version = 99\n" + sandbox.server_table())
    failed = run_cli([], sandbox.environ())
    assert failed.returncode != 0
    log, errors = log_and_errors(failed.stderr)
    assert errors == [
        f"mymcp: error: {sandbox.config_file}:1:1: schema_version: MyMCP configuration "
        "schema_version is not supported: expected an integer from 1 to 8, got 99 "
        "(code=unsupported_schema_version)"
    ]
    assert str(sandbox.root) not in "\n".join(log)
    assert not port_is_bound(sandbox.port)
    checked = run_cli(["check"], sandbox.environ())
    assert checked.returncode != 0
    assert "code=unsupported_schema_version" in checked.stderr
