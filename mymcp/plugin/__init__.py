"""The public plugin API: everything a plugin author needs, from one module."""

from mymcp.plugin._contribution import (
    ActivatedTool,
    PluginAdapter,
    PluginContribution,
    ToolHandler,
    ToolResult,
    structured_result,
)
from mymcp.plugin._definition import (
    HOST_API_VERSION,
    AuthorityDeclaration,
    CapabilityDeclaration,
    ConfigurationDeclaration,
    Consent,
    FilesystemClass,
    HostApiRange,
    PluginDefinition,
    ToolEffects,
)
from mymcp.plugin._identity import (
    CapabilityKind,
    QualifiedCapabilityId,
    is_capability_local_id,
    is_plugin_id,
)
from mymcp.plugin._manifest import (
    MAX_MANIFEST_BYTES,
    is_semver,
    load_manifest,
    manifest_from_mapping,
    parse_manifest,
)
from mymcp.plugin._parity import plugin_contract_mismatches, validate_plugin_contract

__all__ = [
    "HOST_API_VERSION",
    "MAX_MANIFEST_BYTES",
    "ActivatedTool",
    "AuthorityDeclaration",
    "CapabilityDeclaration",
    "CapabilityKind",
    "ConfigurationDeclaration",
    "Consent",
    "FilesystemClass",
    "HostApiRange",
    "PluginAdapter",
    "PluginContribution",
    "PluginDefinition",
    "QualifiedCapabilityId",
    "ToolEffects",
    "ToolHandler",
    "ToolResult",
    "is_capability_local_id",
    "is_plugin_id",
    "is_semver",
    "load_manifest",
    "manifest_from_mapping",
    "parse_manifest",
    "plugin_contract_mismatches",
    "structured_result",
    "validate_plugin_contract",
]
