"""A complete example MyMCP plugin with two read-only tools: `echo` and `word_count`.

To use it, put this directory on the server's `PYTHONPATH` and declare it in a schema-2+
host configuration:

    [[plugins]]
    id = "example-plugin"
    enabled = true
    manifest_path = "/absolute/path/to/examples/example_plugin/manifest.json"
    module = "mymcp_example_plugin"

The host reads and validates `manifest.json` before importing this module, then calls
`mymcp_plugin_v1()` and checks that what it returns matches the manifest. The tools are
published as `example-plugin__echo` and `example-plugin__word_count`.
"""

from __future__ import annotations

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
    structured_result,
)

__all__ = ["mymcp_plugin_v1"]

_MANIFEST = Path(__file__).with_name("manifest.json")
_MAX_TEXT = 4096

_TEXT_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "maxLength": _MAX_TEXT, "description": "The text to use."}
    },
    "required": ["text"],
    "additionalProperties": False,
}


def _text(arguments: dict[str, Any]) -> str | None:
    text = arguments.get("text")
    if set(arguments) != {"text"} or not isinstance(text, str) or len(text) > _MAX_TEXT:
        return None
    return text


def _invalid() -> ToolResult:
    return structured_result(
        {"error": "invalid_arguments", "message": "Pass exactly one string argument, text."},
        is_error=True,
    )


def echo(arguments: dict[str, Any]) -> ToolResult:
    """Return the text unchanged."""
    text = _text(arguments)
    return _invalid() if text is None else structured_result({"text": text})


def word_count(arguments: dict[str, Any]) -> ToolResult:
    """Count whitespace-separated words and characters."""
    text = _text(arguments)
    if text is None:
        return _invalid()
    return structured_result({"words": len(text.split()), "characters": len(text)})


_TOOLS = {
    "echo": (
        {
            "title": "Echo",
            "description": "Returns the given text unchanged. Useful to test a connection.",
            "inputSchema": _TEXT_INPUT,
        },
        echo,
    ),
    "word_count": (
        {
            "title": "Word count",
            "description": "Counts the words (split on whitespace) and characters of a text.",
            "inputSchema": _TEXT_INPUT,
        },
        word_count,
    ),
}


def mymcp_plugin_v1() -> PluginAdapter:
    """The host's entrypoint: this plugin's definition and its activated tools."""
    definition: PluginDefinition = parse_manifest(_MANIFEST.read_bytes())
    tools = []
    for declaration in definition.capabilities:  # keep the manifest's order
        tool, handler = _TOOLS[declaration.local_id]
        tools.append(
            ActivatedTool(
                capability=QualifiedCapabilityId(
                    definition.plugin_id, declaration.kind, declaration.local_id
                ),
                tool=tool,
                handler=handler,
                effects=declaration.effects,
                consent=declaration.consent,
            )
        )
    contribution = PluginContribution(definition.plugin_id, definition.version, tuple(tools))
    return PluginAdapter(definition=definition, contribution=contribution)
