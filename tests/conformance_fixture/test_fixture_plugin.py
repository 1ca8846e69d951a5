"""The conformance fixture plugin: every MCP content type through the public plugin API.

The first test drives the real `mymcp` server (namespaced bindings, `conformance__<tool>`)
with the official SDK client, which parses each content block into its typed model. The
others check what `scripts/conformance` relies on: the plugin declared with
`binding = "local"` publishes its tools under the exact names the suite calls, on both
protocol eras, while everything else keeps its usual name.
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
    "test_mirrored_header",
    "test_logging_tool",
    "test_streaming_elicitation",
)


def _fixture_config(port: int, binding: str | None = None) -> str:
    schema = 2 if binding is None else 8
    extra = "" if binding is None else f'binding = "{binding}"\n[audit]\nenabled = false\n'
    return (
        f"schema_version = {schema}\n"
        f'[server]\naddress = "127.0.0.1"\nport = {port}\n'
        f'[[plugins]]\nid = "conformance"\nenabled = true\nmanifest_path = "{MANIFEST}"\n'
        f'module = "{MODULE}"\n{extra}'
    )


@pytest.fixture
def fixture_server(tmp_path: Path) -> Iterator[RunningServer]:
    sandbox = make_sandbox(tmp_path)
    sandbox.write_config(_fixture_config(sandbox.port))
    with serve(sandbox, {"PYTHONPATH": str(FIXTURE_DIR)}) as server:
        yield server


async def _call_all(
    url: str, prefix: str = "conformance__", mode: str = "legacy"
) -> dict[str, Any]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        listed = await client.list_tools()
        results: dict[str, Any] = {
            "tools": {tool.name: tool for tool in listed.tools},
            "version": client.protocol_version,
        }
        for name in SUITE_TOOLS:
            if name.startswith("test_"):
                arguments = {"region": "eu-west"} if name == "test_mirrored_header" else {}
                results[name] = await client.call_tool(f"{prefix}{name}", arguments)
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

    # The suite's probes: a plain result, with nothing sent before it.
    for probe in ("test_logging_tool", "test_streaming_elicitation"):
        assert _only(outcome[probe], TextContent).text.startswith("Done. MyMCP ")


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "revision"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_local_binding_serves_the_suite_names_on_both_eras(
    tmp_path: Path, mode: str, revision: str
) -> None:
    sandbox = make_sandbox(tmp_path)
    sandbox.write_config(_fixture_config(sandbox.port, "local"))
    with serve(sandbox, {"PYTHONPATH": str(FIXTURE_DIR)}) as server:
        outcome = anyio.run(_call_all, server.url, "", mode)
    assert outcome["version"] == revision
    names = list(outcome["tools"])
    # The suite's exact names for the fixture; everything else keeps its production name.
    assert names[0] == "list_tools"
    assert "memory_recall" in names
    assert names[-len(SUITE_TOOLS) :] == list(SUITE_TOOLS)
    assert not any(name.startswith("conformance__") for name in names)
    image = _only(outcome["test_image_content"], ImageContent)
    assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")
    assert outcome["test_error_handling"].is_error is True
    # In the stateless era the SDK mirrors `region` into Mcp-Param-Region; the server
    # compares the two before it runs the tool.
    assert _only(outcome["test_mirrored_header"], TextContent).text == "region: eu-west"
