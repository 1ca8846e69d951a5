"""Test-only external plugin with the fixture tools of the official MCP conformance suite.

It is written only against the public plugin API (`mymcp.plugin`), like any third-party
plugin, and is never enabled by default: `scripts/conformance` and the tests enable it
through a host configuration in a private sandbox.

The `test_*` tools take no arguments and each returns one kind of MCP content; together
they prove a plugin can return every content type of MCP 2025-11-25: `text`, `image`,
`audio`, `resource_link` and an embedded `resource`. `test_error_handling` returns a
tool-level error (`isError: true`), and `json_schema_2020_12_tool` publishes a JSON Schema
2020-12 input schema that the host must pass through untouched. Names and results follow
the suite's scenarios `tools-call-simple-text`, `tools-call-image`, `tools-call-audio`,
`tools-call-embedded-resource`, `tools-call-mixed-content`, `tools-call-error` and
`json-schema-2020-12`. `test_mirrored_header` annotates one argument with
`x-mcp-header`, so that stateless-era clients mirror it into `Mcp-Param-Region` and the
suite's custom-header scenario can check that the server compares the two.
`test_logging_tool` and `test_streaming_elicitation` are the probes of the suite's
stateless scenario for log notifications and for server requests on a response stream:
MyMCP sends neither, so each honestly returns one plain text result, which is what
the suite checks for.

By default the tools are published as `conformance__<tool>`; `scripts/conformance`
declares the plugin with `binding = "local"` so they keep the names the suite calls.
"""

from __future__ import annotations

import base64
import io
import struct
import wave
import zlib
from pathlib import Path
from typing import Any

from mymcp.plugin import (
    ActivatedTool,
    PluginAdapter,
    PluginContribution,
    PluginDefinition,
    QualifiedCapabilityId,
    ToolResult,
    parse_manifest,
)

__all__ = ["AUDIO_WAV", "IMAGE_PNG", "mymcp_plugin_v1"]

_MANIFEST = Path(__file__).with_name("manifest.json")
_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
# The suite's `json-schema-2020-12` scenario checks that the host publishes this verbatim.
JSON_SCHEMA_2020_12_INPUT: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def _red_pixel_png() -> bytes:
    """A valid 1x1 red PNG (8-bit RGB), built here rather than pasted as an opaque blob."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte 0, then one RGB pixel
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", pixels)
        + _png_chunk(b"IEND", b"")
    )


def _silence_wav() -> bytes:
    """A valid WAV: 10 ms of 8 kHz, 16-bit mono silence."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(b"\x00\x00" * 80)
    return buffer.getvalue()


IMAGE_PNG = _red_pixel_png()
AUDIO_WAV = _silence_wav()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _image_block() -> dict[str, Any]:
    return {"type": "image", "data": _b64(IMAGE_PNG), "mimeType": "image/png"}


def simple_text(arguments: dict[str, Any]) -> ToolResult:
    return {"content": [{"type": "text", "text": "This is a simple text response for testing."}]}


def image_content(arguments: dict[str, Any]) -> ToolResult:
    return {"content": [_image_block()]}


def audio_content(arguments: dict[str, Any]) -> ToolResult:
    return {"content": [{"type": "audio", "data": _b64(AUDIO_WAV), "mimeType": "audio/wav"}]}


def resource_link(arguments: dict[str, Any]) -> ToolResult:
    return {
        "content": [
            {
                "type": "resource_link",
                "uri": "test://linked-resource",
                "name": "linked-resource",
                "title": "Linked resource",
                "description": "A resource the client may fetch on its own.",
                "mimeType": "text/plain",
            }
        ]
    }


def embedded_resource(arguments: dict[str, Any]) -> ToolResult:
    return {
        "content": [
            {
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content.",
                },
            }
        ]
    }


def multiple_content_types(arguments: dict[str, Any]) -> ToolResult:
    return {
        "content": [
            {"type": "text", "text": "Multiple content types test:"},
            _image_block(),
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": '{"test":"data","value":123}',
                },
            },
        ]
    }


def json_schema_tool(arguments: dict[str, Any]) -> ToolResult:
    names = ", ".join(sorted(arguments)) or "none"
    return {"content": [{"type": "text", "text": f"Received arguments: {names}"}]}


MIRRORED_HEADER_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "note": {"type": "string"},
    },
    "required": ["region"],
    "additionalProperties": False,
}


def mirrored_header(arguments: dict[str, Any]) -> ToolResult:
    return {"content": [{"type": "text", "text": f"region: {arguments['region']}"}]}


def logging_probe(arguments: dict[str, Any]) -> ToolResult:
    return {"content": [{"type": "text", "text": "Done. MyMCP sends no log notifications."}]}


def streaming_elicitation_probe(arguments: dict[str, Any]) -> ToolResult:
    text = "Done. MyMCP asks clients nothing while a call runs; every call is one reply."
    return {"content": [{"type": "text", "text": text}]}


def error_handling(arguments: dict[str, Any]) -> ToolResult:
    return {
        "isError": True,
        "content": [
            {"type": "text", "text": "This tool intentionally returns an error for testing"}
        ],
    }


_TOOLS: dict[str, tuple[str, str, Any]] = {
    "json_schema_2020_12_tool": (
        "JSON Schema 2020-12",
        "Tool with JSON Schema 2020-12 features",
        json_schema_tool,
    ),
    "test_simple_text": ("Simple text", "Returns one text block.", simple_text),
    "test_image_content": ("Image content", "Returns a 1x1 red PNG image.", image_content),
    "test_audio_content": ("Audio content", "Returns a short silent WAV clip.", audio_content),
    "test_resource_link": ("Resource link", "Returns a link to a resource.", resource_link),
    "test_embedded_resource": (
        "Embedded resource",
        "Returns an embedded text resource.",
        embedded_resource,
    ),
    "test_multiple_content_types": (
        "Multiple content types",
        "Returns text, an image and an embedded JSON resource in one result.",
        multiple_content_types,
    ),
    "test_error_handling": (
        "Error handling",
        "Always fails with a tool-level error (isError: true).",
        error_handling,
    ),
    "test_mirrored_header": (
        "Mirrored header",
        "Echoes its region, an argument clients mirror into the Mcp-Param-Region header.",
        mirrored_header,
    ),
    "test_logging_tool": (
        "Logging probe",
        "Returns one text block; sends no log notifications (MyMCP sends none).",
        logging_probe,
    ),
    "test_streaming_elicitation": (
        "Streaming elicitation probe",
        "Returns one text block; sends no request to the client while it runs.",
        streaming_elicitation_probe,
    ),
}
_SCHEMAS: dict[str, dict[str, Any]] = {
    "json_schema_2020_12_tool": JSON_SCHEMA_2020_12_INPUT,
    "test_mirrored_header": MIRRORED_HEADER_INPUT,
}


def mymcp_plugin_v1() -> PluginAdapter:
    """The host's entrypoint: the manifest's definition and every declared tool."""
    definition: PluginDefinition = parse_manifest(_MANIFEST.read_bytes())
    tools = []
    for declaration in definition.capabilities:  # keep the manifest's order
        title, description, handler = _TOOLS[declaration.local_id]
        schema = _SCHEMAS.get(declaration.local_id, _NO_ARGUMENTS)
        tools.append(
            ActivatedTool(
                capability=QualifiedCapabilityId(
                    definition.plugin_id, declaration.kind, declaration.local_id
                ),
                tool={"title": title, "description": description, "inputSchema": schema},
                handler=handler,
                effects=declaration.effects,
                consent=declaration.consent,
            )
        )
    contribution = PluginContribution(definition.plugin_id, definition.version, tuple(tools))
    return PluginAdapter(definition=definition, contribution=contribution)
