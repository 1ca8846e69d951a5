"""The conformance fixture plugin: every MCP content type through the public plugin API.

The first test drives the real `mymcp` server (production bindings, `conformance__<tool>`)
with the official SDK client, which parses each content block into its typed model. The
second checks the test-only entry point used by `scripts/conformance`: the same host, with
only the fixture's tools bound to the exact names the conformance suite calls.
"""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from starlette.testclient import TestClient

from mymcp.app import create_app
from mymcp.auth import build_authenticator
from mymcp.config import (
    AuthenticationSettings,
    HostConfiguration,
    PluginDeclaration,
    ServerSettings,
)
from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from mymcp.runtime.bootstrap import build_runtime
from tests.conformance_fixture.serve import conformance_binding
from tests.e2e.server import RunningServer, make_sandbox, serve

FIXTURE_DIR = Path(__file__).resolve().parent
MANIFEST = FIXTURE_DIR / "manifest.json"
MODULE = "mymcp_conformance_fixture"
SUITE_TOOLS = (
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_resource_link",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_error_handling",
    "json_schema_2020_12_tool",
)


def _fixture_config(port: int) -> str:
    return (
        "schema_version = 2\n"
        f'[server]\naddress = "127.0.0.1"\nport = {port}\n'
        f'[[plugins]]\nid = "conformance"\nenabled = true\nmanifest_path = "{MANIFEST}"\n'
        f'module = "{MODULE}"\n'
    )


@pytest.fixture
def fixture_server(tmp_path: Path) -> Iterator[RunningServer]:
    sandbox = make_sandbox(tmp_path)
    sandbox.write_config(_fixture_config(sandbox.port))
    with serve(sandbox, {"PYTHONPATH": str(FIXTURE_DIR)}) as server:
        yield server


async def _call_all(url: str) -> dict[str, Any]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        listed = await client.list_tools()
        results: dict[str, Any] = {"tools": {tool.name: tool for tool in listed.tools}}
        for name in SUITE_TOOLS:
            if name.startswith("test_"):
                results[name] = await client.call_tool(f"conformance__{name}", {})
        return results


def _only(result: CallToolResult, kind: type[Any]) -> Any:
    assert not result.is_error
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, kind)
    return block


def test_every_content_type_through_the_real_server(fixture_server: RunningServer) -> None:
    outcome = anyio.run(_call_all, fixture_server.url)
    tools = outcome["tools"]
    # Production bindings: `<plugin-id>__<tool-local-id>`, never the bare local ids.
    assert {f"conformance__{name}" for name in SUITE_TOOLS} <= set(tools)
    assert not set(SUITE_TOOLS) & set(tools)
    assert tools["conformance__json_schema_2020_12_tool"].input_schema["$defs"]["address"] == {
        "$anchor": "addressDef",
        "type": "object",
        "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
    }

    text = _only(outcome["test_simple_text"], TextContent)
    assert text.text == "This is a simple text response for testing."

    image = _only(outcome["test_image_content"], ImageContent)
    assert image.mime_type == "image/png"
    assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")

    audio = _only(outcome["test_audio_content"], AudioContent)
    assert audio.mime_type == "audio/wav"
    with wave.open(io.BytesIO(base64.b64decode(audio.data))) as clip:
        assert (clip.getnchannels(), clip.getframerate(), clip.getnframes()) == (1, 8000, 80)

    link = _only(outcome["test_resource_link"], ResourceLink)
    assert (str(link.uri), link.name, link.mime_type) == (
        "test://linked-resource",
        "linked-resource",
        "text/plain",
    )

    embedded = _only(outcome["test_embedded_resource"], EmbeddedResource)
    assert isinstance(embedded.resource, TextResourceContents)
    assert str(embedded.resource.uri) == "test://embedded-resource"
    assert embedded.resource.text == "This is an embedded resource content."

    mixed = outcome["test_multiple_content_types"]
    assert not mixed.is_error
    assert [type(block) for block in mixed.content] == [
        TextContent,
        ImageContent,
        EmbeddedResource,
    ]
    assert mixed.content[2].resource.mime_type == "application/json"

    failed = outcome["test_error_handling"]
    assert failed.is_error is True
    assert isinstance(failed.content[0], TextContent)
    assert failed.content[0].text


HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _rpc(client: TestClient, headers: dict[str, str], method: str, **params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = client.post("/mcp", json=body, headers=headers)
    assert reply.status_code == 200
    return reply.json()["result"]


def test_conformance_entry_point_pins_only_the_fixture_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURE_DIR))
    (tmp_path / "home").mkdir()
    server = ServerSettings("127.0.0.1", 8000)
    configuration = HostConfiguration(
        schema_version=2,
        server=server,
        plugins=(PluginDeclaration("conformance", True, MANIFEST, MODULE),),
    )
    runtime = build_runtime(
        configuration,
        create_mnemosyne(MnemosyneSettings(), environ={}, home=tmp_path / "home"),
        binding=conformance_binding,
    )
    app = create_app(
        runtime,
        authenticator=build_authenticator(AuthenticationSettings(), server),
        configuration=configuration,
    )
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        init = client.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
            },
            headers=HEADERS,
        )
        headers = {
            **HEADERS,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        names = [tool["name"] for tool in _rpc(client, headers, "tools/list")["tools"]]
        # The suite's exact names for the fixture; everything else keeps its production name.
        assert names[0] == "list_tools"
        assert "memory_recall" in names
        assert names[-len(SUITE_TOOLS) :] == list(SUITE_TOOLS)
        result = _rpc(client, headers, "tools/call", name="test_image_content")
        assert result["content"][0]["type"] == "image"
        unknown = client.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "conformance__test_image_content"},
            },
            headers=headers,
        )
        assert unknown.json()["error"]["code"] == -32602
