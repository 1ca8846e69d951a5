"""Parity between what a plugin's manifest declares and what its code hands the host."""

from __future__ import annotations

import dataclasses

from mymcp.errors import Diagnostic, ManifestError
from mymcp.plugin._contribution import PluginAdapter
from mymcp.plugin._definition import HOST_API_VERSION, CapabilityDeclaration, PluginDefinition

__all__ = ["plugin_contract_mismatches", "validate_plugin_contract"]


def _mismatch(code: str, detail: str) -> Diagnostic:
    return Diagnostic(code, ManifestError.messages()[code], detail=detail)


def _flags(declaration: CapabilityDeclaration | object) -> dict[str, str]:
    effects = getattr(declaration, "effects", None)
    flags = {
        name: str(getattr(effects, name)).lower()
        for name in ("read_only", "destructive", "idempotent", "open_world")
    }
    flags["consent"] = str(getattr(declaration, "consent", "?"))
    return flags


def _definition_differences(adapter: PluginDefinition, manifest: PluginDefinition) -> str:
    fields = [
        field.name
        for field in dataclasses.fields(PluginDefinition)
        if getattr(adapter, field.name) != getattr(manifest, field.name)
    ]
    return "the adapter's definition differs from the manifest in: " + ", ".join(fields)


def plugin_contract_mismatches(
    adapter: PluginAdapter,
    manifest_definition: PluginDefinition,
    host_api: int = HOST_API_VERSION,
) -> tuple[Diagnostic, ...]:
    """Every way `adapter` breaks parity with the definition parsed from its manifest.

    The checks, in order: the adapter's definition equals the manifest's
    (`definition_manifest_mismatch`); `host_api` is inside the declared range
    (`host_api_incompatible`); the contribution names the same plugin and version
    (`contribution_plugin_mismatch`, `contribution_version_mismatch`); every selected tool
    is declared (`undeclared_capability`) and selected once
    (`duplicate_selected_capability`), with the declared effects and consent
    (`capability_metadata_mismatch`), in declaration order (`capability_order_mismatch`).
    Each finding's detail names the tool and the values that differ.
    """
    if not isinstance(adapter, PluginAdapter):
        raise TypeError("adapter must be a PluginAdapter")
    if not isinstance(manifest_definition, PluginDefinition):
        raise TypeError("manifest_definition must be a PluginDefinition")
    found: list[Diagnostic] = []
    definition = adapter.definition
    if definition != manifest_definition:
        detail = _definition_differences(definition, manifest_definition)
        found.append(_mismatch("definition_manifest_mismatch", detail))
    if not definition.requires.admits(host_api):
        bounds = definition.requires
        detail = (
            f"requires.host_api is {bounds.minimum} to {bounds.maximum}; "
            f"this host implements {host_api}"
        )
        found.append(_mismatch("host_api_incompatible", detail))
    contribution = adapter.contribution
    if contribution.plugin_id != definition.plugin_id:
        detail = (
            f"the contribution names plugin {contribution.plugin_id!r}, "
            f"the manifest {definition.plugin_id!r}"
        )
        found.append(_mismatch("contribution_plugin_mismatch", detail))
    if contribution.version != definition.version:
        detail = (
            f"the contribution has version {contribution.version!r}, "
            f"the manifest {definition.version!r}"
        )
        found.append(_mismatch("contribution_version_mismatch", detail))
    positions = {
        (declaration.kind, declaration.local_id): index
        for index, declaration in enumerate(definition.capabilities)
    }
    selected: set[int] = set()
    previous: tuple[int, str] | None = None
    for tool in contribution.tools:
        capability = tool.capability
        name = capability.local_id
        if capability.plugin_id != definition.plugin_id:
            detail = f"tool {name!r} names plugin {capability.plugin_id!r}"
            found.append(_mismatch("contribution_plugin_mismatch", detail))
            continue
        index = positions.get((capability.kind, name))
        if index is None:
            detail = f"tool {name!r} is not declared in the manifest's capabilities"
            found.append(_mismatch("undeclared_capability", detail))
            continue
        if index in selected:
            found.append(
                _mismatch("duplicate_selected_capability", f"tool {name!r} is activated twice")
            )
            continue
        declaration = definition.capabilities[index]
        declared, given = _flags(declaration), _flags(tool)
        differing = [key for key in declared if declared[key] != given[key]]
        if differing:
            detail = f"tool {name!r}: " + ", ".join(
                f"{key} is {declared[key]} in the manifest, {given[key]} in the adapter"
                for key in differing
            )
            found.append(_mismatch("capability_metadata_mismatch", detail))
        if previous is not None and index < previous[0]:
            detail = (
                f"tool {name!r} comes after {previous[1]!r}, but the manifest declares it before"
            )
            found.append(_mismatch("capability_order_mismatch", detail))
        selected.add(index)
        previous = (index, name)
    return tuple(found)


def validate_plugin_contract(
    adapter: PluginAdapter,
    manifest_definition: PluginDefinition,
    host_api: int = HOST_API_VERSION,
) -> None:
    """Check a plugin adapter against the definition parsed from its manifest; raise
    `ManifestError` for the first mismatch `plugin_contract_mismatches` finds."""
    mismatches = plugin_contract_mismatches(adapter, manifest_definition, host_api)
    if mismatches:
        first = mismatches[0]
        raise ManifestError(first.code, detail=first.detail)
