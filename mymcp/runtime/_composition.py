"""Composition of plugin contributions into one HostRuntime, refusing every collision."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from mymcp.config import BUNDLED_PLUGIN_ID
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
from mymcp.runtime._schema import (
    ArgumentsValidator,
    OutputValidator,
    SchemaFinding,
    compile_input_schema,
    compile_output_schema,
    is_plain_json,
)

__all__ = [
    "BUNDLED_TOOL_PREFIX",
    "MAX_DESCRIPTION_CHARACTERS",
    "MAX_TITLE_CHARACTERS",
    "bind_tool",
    "bundled_prefix_problem",
    "compose_runtime",
    "default_binding",
    "is_reserved_name",
    "refuse_public_names",
    "unpublished_members",
]

# MCP tool names: 1-128 characters of [A-Za-z0-9_.-].
_PUBLIC_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_PUBLISHED_KEYS = ("title", "description", "inputSchema", "outputSchema", "icons")
# Every client receives every tool's text in each tool list, and a model reads it all in
# its context: a title is a name to show, and a description longer than this is a
# document, not a tool's description.
MAX_TITLE_CHARACTERS: Final = 128
MAX_DESCRIPTION_CHARACTERS: Final = 16_384
_log = logging.getLogger("mymcp.host.composition")


def default_binding(capability: QualifiedCapabilityId) -> str:
    """The public name of an external capability: `<plugin-id>__<tool-local-id>`."""
    return f"{capability.plugin_id}__{capability.local_id}"


def is_reserved_name(name: str) -> bool:
    """Names only the host may publish."""
    return name == LIST_TOOLS_NAME or name.startswith("mymcp_")


# The bundled memory plugin publishes its tools as `memory_recall`, `memory_remember`, ...,
# and operators are told to grant them with a policy rule `memory_*`. Were any other plugin
# free to publish a name with that prefix (plugin id `memory` gives `memory__wipe_disk`, a
# locally bound tool id may be `memory_wipe_all`), that rule would silently grant a third
# party's tool as well; so the prefix belongs to the bundled plugin alone.
BUNDLED_TOOL_PREFIX: Final = "memory_"


def bundled_prefix_problem(name: str, capability: QualifiedCapabilityId) -> str | None:
    """Why `capability` may not be published as `name` because the name begins like the
    bundled memory tools' names, and what to do instead; None when it may."""
    if capability.plugin_id == BUNDLED_PLUGIN_ID or not name.startswith(BUNDLED_TOOL_PREFIX):
        return None
    if name == capability.local_id:  # bound under its own id
        remedy = "give the tool another id in the plugin"
        namespaced = default_binding(capability)
        if not namespaced.startswith(BUNDLED_TOOL_PREFIX):
            remedy += f', or drop binding = "local" to publish it as {namespaced!r}'
    elif name == default_binding(capability):
        remedy = "give the plugin another id"
    else:
        remedy = "bind it under another name"
    return (
        f"begins with {BUNDLED_TOOL_PREFIX!r}, which is kept for the bundled memory tools "
        f"so that a policy rule written as 'memory_*' means only those; {remedy}"
    )


def _annotations(title: str, effects: ToolEffects) -> dict[str, Any]:
    return {
        "title": title,
        "readOnlyHint": effects.read_only,
        "destructiveHint": effects.destructive,
        "idempotentHint": effects.idempotent,
        "openWorldHint": effects.open_world,
    }


def _publish(
    name: str, tool: Mapping[str, Any], effects: ToolEffects, origin: str
) -> dict[str, Any]:
    """The MCP definition under the host's name, with effect annotations and a title.

    Everything a plugin's definition contributes is checked, here or (the schemas) where
    they are compiled, because clients check it too: one malformed tool (an icon list
    that is no list, an output schema that is no object schema) makes an SDK client
    refuse the whole `tools/list`, and so every other tool with it.
    """

    def invalid(problem: str) -> HostRuntimeCompositionError:
        detail = f"tool {name!r} ({origin}): {problem}"
        return HostRuntimeCompositionError.at("invalid_tool_definition", detail=detail)

    description = tool.get("description")
    if not isinstance(description, str) or not description.strip():
        raise invalid("it has no description")
    if len(description) > MAX_DESCRIPTION_CHARACTERS:
        raise invalid(f"its description is longer than {MAX_DESCRIPTION_CHARACTERS} characters")
    schema = tool.get("inputSchema", {"type": "object", "additionalProperties": False})
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise invalid('inputSchema is not an object schema with "type": "object"')
    icons = _icons_problem(tool["icons"]) if "icons" in tool else None
    if icons is not None:
        raise invalid(f"icons: {icons}")
    title = tool.get("title")
    if not isinstance(title, str) or not title.strip():
        title = name.replace("__", ": ").replace("_", " ")
    elif len(title) > MAX_TITLE_CHARACTERS:
        raise invalid(f"its title is longer than {MAX_TITLE_CHARACTERS} characters")
    published: dict[str, Any] = {key: tool[key] for key in _PUBLISHED_KEYS if key in tool}
    published.update(name=name, title=title, description=description, inputSchema=schema)
    if not is_plain_json({key: published[key] for key in _TEXT_KEYS if key in published}):
        raise invalid("the title, description or icons hold a string that is no Unicode text")
    published["annotations"] = _annotations(title, effects)
    return published


def unpublished_members(tool: Mapping[str, Any]) -> tuple[str, ...]:
    """The members of a plugin's tool definition the host leaves out of what it publishes
    (it writes `name` and `annotations` itself), for `mymcp plugin check` to name."""
    return tuple(key for key in tool if key not in _PUBLISHED_KEYS and key != "name")


_ICON_THEMES = ("light", "dark")
# What a definition publishes besides its schemas (those are checked as they compile).
_TEXT_KEYS = ("title", "description", "icons")


def _icons_problem(icons: object) -> str | None:
    """What is wrong with a tool's `icons` (MCP's list of `{src, mimeType?, sizes?,
    theme?}`), or None."""
    if not isinstance(icons, list):
        return "not a list"
    for number, icon in enumerate(icons):
        where = f"icon {number}"
        if not isinstance(icon, Mapping) or not isinstance(icon.get("src"), str):
            return f"{where} is not an object with a string src"
        if not isinstance(icon.get("mimeType", ""), str):
            return f"{where}: mimeType is not a string"
        sizes = icon.get("sizes", [])
        if not isinstance(sizes, list) or not all(isinstance(size, str) for size in sizes):
            return f"{where}: sizes is not a list of strings"
        if "theme" in icon and icon["theme"] not in _ICON_THEMES:
            return f"{where}: theme is neither light nor dark"
    return None


def _validator(name: str, definition: Mapping[str, Any], origin: str) -> ArgumentsValidator:
    """Compile the published input schema once; a schema that cannot be compiled fails
    composition, one that model APIs refuse is served with a warning in the log."""
    validator, findings = compile_input_schema(definition["inputSchema"])
    if validator is None:
        errors = [f"{f.message} ({f.code})" for f in findings if f.severity == "error"]
        raise HostRuntimeCompositionError.at(
            "invalid_input_schema", detail=f"tool {name!r} ({origin}): " + "; ".join(errors)
        )
    for finding in findings:
        _log.warning(
            "tool_schema outcome=%s tool=%s keyword=%s", finding.code, name, finding.keyword
        )
    return validator


def _output_validator(
    name: str, definition: Mapping[str, Any], origin: str
) -> OutputValidator | None:
    if "outputSchema" not in definition:
        return None
    compiled = compile_output_schema(definition["outputSchema"])
    if isinstance(compiled, SchemaFinding):
        detail = f"tool {name!r} ({origin}): {compiled.message} ({compiled.code})"
        raise HostRuntimeCompositionError.at("invalid_output_schema", detail=detail)
    return compiled


def bind_tool(name: str, tool: ActivatedTool) -> BoundTool:
    """A plugin's tool under its public name, as the server publishes and checks it;
    raises HostRuntimeCompositionError for a definition it would refuse (what
    `mymcp plugin check --import` reports too)."""
    origin = str(tool.capability)
    definition = _publish(name, tool.tool, tool.effects, origin)
    return BoundTool(
        name=name,
        origin=tool.capability,
        definition=MappingProxyType(definition),
        handler=tool.handler,
        is_async=tool.is_async,
        effects=tool.effects,
        consent=tool.consent,
        validator=_validator(name, definition, origin),
        output=_output_validator(name, definition, origin),
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
    """Refuse a public name only the host may publish, one beginning like the bundled
    memory tools' names that is not one of theirs, one MCP does not allow as a tool name,
    or one that two capabilities would share."""
    owners: dict[str, QualifiedCapabilityId] = {}
    for capability, name in bound.items():
        if is_reserved_name(name):
            raise HostRuntimeCompositionError.at(
                "reserved_public_name", detail=f"{name!r} ({capability}) is reserved for the host"
            )
        problem = bundled_prefix_problem(name, capability)
        if problem is not None:
            detail = f"{name!r} ({capability}) {problem}"
            raise HostRuntimeCompositionError.at("reserved_public_name", detail=detail)
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
        bind_tool(bound[tool.capability], tool)
        for contribution in contributions
        for tool in contribution.tools
    ]
    names = (LIST_TOOLS_NAME, *(tool.name for tool in plugin_tools))
    host_definition = _publish(
        LIST_TOOLS_NAME, LIST_TOOLS_DEFINITION, LIST_TOOLS_EFFECTS, HOST_ORIGIN
    )
    host_tool = BoundTool(
        name=LIST_TOOLS_NAME,
        origin=HOST_ORIGIN,
        definition=MappingProxyType(host_definition),
        handler=list_tools_handler(server_version, names),
        is_async=True,
        effects=LIST_TOOLS_EFFECTS,
        consent=LIST_TOOLS_CONSENT,
        validator=_validator(LIST_TOOLS_NAME, host_definition, HOST_ORIGIN),
        output=_output_validator(LIST_TOOLS_NAME, host_definition, HOST_ORIGIN),
    )
    return HostRuntime(
        registry=ToolRegistry((host_tool, *plugin_tools)),
        generation=generation or new_generation_id(),
        server_version=server_version,
    )
