"""A valid manifest to mutate, and small builders for adapters."""

from __future__ import annotations

import copy
import json
from typing import Any

from mymcp.plugin import (
    ActivatedTool,
    PluginAdapter,
    PluginContribution,
    PluginDefinition,
    QualifiedCapabilityId,
    manifest_from_mapping,
    structured_result,
)

_CAPABILITY = {
    "kind": "tool",
    "id": "first",
    "version": "1.0.0",
    "read_only": True,
    "destructive": False,
    "idempotent": True,
    "open_world": False,
    "consent": "none",
}

_MANIFEST: dict[str, Any] = {
    "manifest_version": 1,
    "id": "sample-plugin",
    "title": "Sample",
    "description": "A sample plugin for tests.",
    "version": "1.2.3",
    "requires": {"host_api": {"min": 1, "max": 1}},
    "capabilities": [
        _CAPABILITY,
        {**_CAPABILITY, "id": "second", "read_only": False, "consent": "per_call"},
        {**_CAPABILITY, "id": "third", "read_only": False, "destructive": True},
    ],
    "configuration": {
        "schema_version": 1,
        "schema": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    "secret_references": [],
    "data_schema_version": 1,
    "authority": {"filesystem": [], "network": False},
}


def manifest(**overrides: Any) -> dict[str, Any]:
    """A fresh valid manifest document with top-level `overrides` applied."""
    document = copy.deepcopy(_MANIFEST)
    document.update(copy.deepcopy(overrides))
    return document


def encode(document: object) -> bytes:
    return json.dumps(document).encode()


def definition(**overrides: Any) -> PluginDefinition:
    return manifest_from_mapping(manifest(**overrides))


def handler(arguments: dict[str, Any]) -> dict[str, Any]:
    return structured_result({"ok": True, "arguments": arguments})


def activated(definition: PluginDefinition, local_id: str, **changes: Any) -> ActivatedTool:
    """An activated tool that matches `local_id`'s declaration unless `changes` say otherwise."""
    declaration = definition.capability("tool", local_id)
    fields: dict[str, Any] = {
        "capability": QualifiedCapabilityId(definition.plugin_id, "tool", local_id),
        "tool": {"description": local_id, "inputSchema": {"type": "object"}},
        "handler": handler,
        "effects": declaration.effects if declaration else None,
        "consent": declaration.consent if declaration else None,
    }
    fields.update(changes)
    return ActivatedTool(**fields)


def adapter_for(
    definition: PluginDefinition,
    *tools: ActivatedTool,
    plugin_id: str | None = None,
    version: str | None = None,
) -> PluginAdapter:
    contribution = PluginContribution(
        plugin_id or definition.plugin_id, version or definition.version, tools
    )
    return PluginAdapter(definition, contribution)
