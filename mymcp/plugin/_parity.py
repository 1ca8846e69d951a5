"""Parity between what a plugin's manifest declares and what its code hands the host."""

from __future__ import annotations

from mymcp.plugin._contribution import PluginAdapter
from mymcp.plugin._definition import HOST_API_VERSION, PluginDefinition
from mymcp.plugin._manifest_rules import manifest_error

__all__ = ["validate_plugin_contract"]


def validate_plugin_contract(
    adapter: PluginAdapter,
    manifest_definition: PluginDefinition,
    host_api: int = HOST_API_VERSION,
) -> None:
    """Check a plugin adapter against the definition parsed from its manifest.

    In order: the adapter's definition equals the manifest's
    (`definition_manifest_mismatch`); `host_api` is inside the declared range
    (`host_api_incompatible`); the contribution names the same plugin and version
    (`contribution_plugin_mismatch`, `contribution_version_mismatch`); every selected tool is
    declared (`undeclared_capability`) and selected once (`duplicate_selected_capability`),
    with the declared effects and consent (`capability_metadata_mismatch`), in declaration
    order (`capability_order_mismatch`). Raises `ManifestError`.
    """
    if not isinstance(adapter, PluginAdapter):
        raise TypeError("adapter must be a PluginAdapter")
    if not isinstance(manifest_definition, PluginDefinition):
        raise TypeError("manifest_definition must be a PluginDefinition")
    definition = adapter.definition
    if definition != manifest_definition:
        raise manifest_error("definition_manifest_mismatch")
    if not definition.requires.admits(host_api):
        raise manifest_error("host_api_incompatible")
    contribution = adapter.contribution
    if contribution.plugin_id != definition.plugin_id:
        raise manifest_error("contribution_plugin_mismatch")
    if contribution.version != definition.version:
        raise manifest_error("contribution_version_mismatch")
    positions = {
        (declaration.kind, declaration.local_id): index
        for index, declaration in enumerate(definition.capabilities)
    }
    selected: set[int] = set()
    previous = -1
    for tool in contribution.tools:
        capability = tool.capability
        if capability.plugin_id != definition.plugin_id:
            raise manifest_error("contribution_plugin_mismatch")
        index = positions.get((capability.kind, capability.local_id))
        if index is None:
            raise manifest_error("undeclared_capability")
        if index in selected:
            raise manifest_error("duplicate_selected_capability")
        declaration = definition.capabilities[index]
        if tool.effects != declaration.effects or tool.consent != declaration.consent:
            raise manifest_error("capability_metadata_mismatch")
        if index < previous:
            raise manifest_error("capability_order_mismatch")
        selected.add(index)
        previous = index
