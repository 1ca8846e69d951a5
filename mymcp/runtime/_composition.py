"""Composition of plugin contributions into one HostRuntime, refusing every collision."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from mymcp.errors import HostRuntimeCompositionError
from mymcp.plugin import ActivatedTool, PluginContribution, QualifiedCapabilityId, ToolEffects
from mymcp.runtime._list_tools import (
    LIST_TOOLS_CONSENT,
    LIST_TOOLS_DEFINITION,
    LIST_TOOLS_EFFECTS,
    LIST_TOOLS_NAME,
    list_tools_handler,
)
from mymcp.runtime._registry import HOST_ORIGIN, BoundTool, ToolRegistry
from mymcp.runtime._runtime import HostRuntime, new_generation_id
from mymcp.runtime._schema import ArgumentsValidator, compile_input_schema

__all__ = ["compose_runtime", "default_binding", "is_reserved_name", "refuse_public_names"]

# MCP tool names: 1-128 characters of [A-Za-z0-9_.-].
_PUBLIC_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_PUBLISHED_KEYS = ("title", "description", "inputSchema", "outputSchema", "icons")
_log = logging.getLogger("mymcp.host.composition")


def default_binding(capability: QualifiedCapabilityId) -> str:
    """The public name of an external capability: `<plugin-id>__<tool-local-id>`."""
    return f"{capability.plugin_id}__{capability.local_id}"


def is_reserved_name(name: str) -> bool:
    """Names only the host may publish."""
    return name == LIST_TOOLS_NAME or name.startswith("mymcp_")


def _annotations(title: str, effects: ToolEffects) -> dict[str, Any]:
    return {
        "title": title,
        "readOnlyHint": effects.read_only,
        "destructiveHint": effects.destructive,
        "idempotentHint": effects.idempotent,
        "openWorldHint": effects.open_world,
    }


def _publish(name: str, tool: Mapping[str, Any], effects: ToolEffects) -> dict[str, Any]:
    """The MCP definition under the host's name, with effect annotations and a title."""
    description = tool.get("description")
    if not isinstance(description, str) or not description.strip():
        raise HostRuntimeCompositionError.at(
            "invalid_tool_definition", detail=f"tool {name!r} has no description"
        )
    schema = tool.get("inputSchema", {"type": "object", "additionalProperties": False})
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise HostRuntimeCompositionError.at(
            "invalid_tool_definition", detail=f"tool {name!r}: inputSchema is not type object"
        )
    title = tool.get("title")
    if not isinstance(title, str) or not title.strip():
        title = name.replace("__", ": ").replace("_", " ")
    published: dict[str, Any] = {key: tool[key] for key in _PUBLISHED_KEYS if key in tool}
    published.update(name=name, title=title, description=description, inputSchema=schema)
    published["annotations"] = _annotations(title, effects)
    return published


def _validator(name: str, definition: Mapping[str, Any]) -> ArgumentsValidator:
    """Compile the published input schema once; a schema that cannot be compiled fails
    composition, one that model APIs refuse is served with a warning in the log."""
    validator, findings = compile_input_schema(definition["inputSchema"])
    if validator is None:
        errors = [finding.message for finding in findings if finding.severity == "error"]
        raise HostRuntimeCompositionError.at(
            "invalid_input_schema", detail=f"tool {name!r}: " + "; ".join(errors)
        )
    for finding in findings:
        _log.warning(
            "tool_schema outcome=%s tool=%s keyword=%s", finding.code, name, finding.keyword
        )
    return validator


def _bind(name: str, tool: ActivatedTool) -> BoundTool:
    definition = _publish(name, tool.tool, tool.effects)
    return BoundTool(
        name=name,
        origin=tool.capability,
        definition=MappingProxyType(definition),
        handler=tool.handler,
        is_async=tool.is_async,
        effects=tool.effects,
        consent=tool.consent,
        validator=_validator(name, definition),
    )


def _collect(
    contributions: Sequence[PluginContribution],
) -> dict[QualifiedCapabilityId, ActivatedTool]:
    seen_plugins: set[str] = set()
    capabilities: dict[QualifiedCapabilityId, ActivatedTool] = {}
    for contribution in contributions:
        if contribution.plugin_id in seen_plugins:
            raise HostRuntimeCompositionError.at(
                "duplicate_plugin", detail=f"plugin {contribution.plugin_id!r} contributes twice"
            )
        seen_plugins.add(contribution.plugin_id)
    for contribution in contributions:
        for tool in contribution.tools:
            if tool.capability.plugin_id != contribution.plugin_id:
                detail = f"plugin {contribution.plugin_id!r} contributes {tool.capability}"
                raise HostRuntimeCompositionError.at("capability_plugin_mismatch", detail=detail)
    for contribution in contributions:
        for tool in contribution.tools:
            if tool.capability in capabilities:
                raise HostRuntimeCompositionError.at(
                    "duplicate_capability", detail=f"{tool.capability} is contributed twice"
                )
            capabilities[tool.capability] = tool
    return capabilities


def _check_bindings(
    capabilities: Mapping[QualifiedCapabilityId, ActivatedTool],
    bindings: Sequence[tuple[QualifiedCapabilityId, str]],
) -> dict[QualifiedCapabilityId, str]:
    bound: dict[QualifiedCapabilityId, str] = {}
    for capability, name in bindings:
        if capability in bound:
            raise HostRuntimeCompositionError.at(
                "duplicate_binding", detail=f"{capability} is bound twice"
            )
        bound[capability] = name
    for capability in bound:
        if capability not in capabilities:
            raise HostRuntimeCompositionError.at(
                "unknown_binding", detail=f"{capability} is bound but not contributed"
            )
    refuse_public_names(bound)
    for capability in capabilities:
        if capability not in bound:
            raise HostRuntimeCompositionError.at(
                "unbound_capability", detail=f"{capability} has no public name"
            )
    return bound


def refuse_public_names(bound: Mapping[QualifiedCapabilityId, str]) -> None:
    """Refuse a public name only the host may publish, one MCP does not allow as a tool
    name, or one that two capabilities would share."""
    owners: dict[str, QualifiedCapabilityId] = {}
    for capability, name in bound.items():
        if is_reserved_name(name):
            raise HostRuntimeCompositionError.at(
                "reserved_public_name", detail=f"{name!r} ({capability}) is reserved for the host"
            )
        if _PUBLIC_NAME.fullmatch(name) is None:
            detail = f"{name!r} ({capability}) is not 1-128 characters of [A-Za-z0-9_.-]"
            raise HostRuntimeCompositionError.at("invalid_public_name", detail=detail)
        if name in owners:
            detail = f"{name!r} is the public name of both {owners[name]} and {capability}"
            raise HostRuntimeCompositionError.at("duplicate_public_name", detail=detail)
        owners[name] = capability


def compose_runtime(
    contributions: Sequence[PluginContribution],
    bindings: Sequence[tuple[QualifiedCapabilityId, str]],
    *,
    server_version: str,
    generation: str | None = None,
) -> HostRuntime:
    """Bind every contributed tool to its public name and register `list_tools` first.

    The registry order is `list_tools`, then each contribution's tools in contribution
    order. Any collision, and any input schema that does not compile under JSON Schema
    2020-12, raises HostRuntimeCompositionError; nothing is overwritten, suffixed or
    aliased.
    """
    capabilities = _collect(contributions)
    bound = _check_bindings(capabilities, bindings)
    plugin_tools = [
        _bind(bound[tool.capability], tool)
        for contribution in contributions
        for tool in contribution.tools
    ]
    names = (LIST_TOOLS_NAME, *(tool.name for tool in plugin_tools))
    host_definition = _publish(LIST_TOOLS_NAME, LIST_TOOLS_DEFINITION, LIST_TOOLS_EFFECTS)
    host_tool = BoundTool(
        name=LIST_TOOLS_NAME,
        origin=HOST_ORIGIN,
        definition=MappingProxyType(host_definition),
        handler=list_tools_handler(server_version, names),
        is_async=True,
        effects=LIST_TOOLS_EFFECTS,
        consent=LIST_TOOLS_CONSENT,
        validator=_validator(LIST_TOOLS_NAME, host_definition),
    )
    return HostRuntime(
        registry=ToolRegistry((host_tool, *plugin_tools)),
        generation=generation or new_generation_id(),
        server_version=server_version,
    )
