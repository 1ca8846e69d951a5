"""Operator-declared external plugins: preflight every manifest, then import and check each.

External plugins are trusted, in-process code: importing a module runs it with the
server's privileges. That is why every enabled manifest is read and validated before any
module is imported, so a broken declaration fails startup without running plugin code.
Failures raise `ExternalPluginLoadError` with a stable code and a fixed message; no path,
module name or exception text is logged or carried in the error.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NoReturn

from mymcp._safefile import SafeFileError, SafeFileReason, read_safe_file
from mymcp.config import PluginDeclaration
from mymcp.errors import ExternalPluginLoadError, ManifestError
from mymcp.plugin import (
    HOST_API_VERSION,
    MAX_MANIFEST_BYTES,
    PluginAdapter,
    PluginDefinition,
    parse_manifest,
    validate_plugin_contract,
)

__all__ = [
    "ENTRYPOINT_NAME",
    "activate_external_plugin",
    "EXTERNAL_PLUGIN_MESSAGES",
    "MAX_EXTERNAL_CAPABILITIES",
    "MAX_EXTERNAL_PLUGINS",
    "load_external_plugins",
]

ENTRYPOINT_NAME: Final = "mymcp_plugin_v1"
MAX_EXTERNAL_PLUGINS: Final = 32
MAX_EXTERNAL_CAPABILITIES: Final = 256

EXTERNAL_PLUGIN_MESSAGES: Final[dict[str, str]] = {
    "external_plugin_limit_exceeded": "MyMCP external plugin limit is exceeded",
    "external_manifest_unsafe_path": "MyMCP external plugin manifest path is unsafe",
    "external_manifest_not_regular": "MyMCP external plugin manifest is not a regular file",
    "external_manifest_unsafe_permissions": (
        "MyMCP external plugin manifest permissions are unsafe"
    ),
    "external_manifest_unreadable": "MyMCP external plugin manifest could not be read",
    "external_manifest_too_large": "MyMCP external plugin manifest exceeds 65536 bytes",
    "external_manifest_source_changed": ("MyMCP external plugin manifest changed while being read"),
    "external_manifest_invalid": "MyMCP external plugin manifest is invalid",
    "external_manifest_identity_mismatch": (
        "MyMCP external plugin manifest id does not match its declaration"
    ),
    "external_manifest_host_api_incompatible": (
        "MyMCP external plugin does not support this host API version"
    ),
    "external_plugin_import_failed": "MyMCP external plugin module could not be imported",
    "external_plugin_entrypoint_invalid": (
        "MyMCP external plugin entrypoint is missing, not callable or failed"
    ),
    "external_plugin_contract_invalid": (
        "MyMCP external plugin entrypoint did not return a PluginAdapter"
    ),
    "external_plugin_composition_invalid": (
        "MyMCP external plugins could not be composed with the host"
    ),
    "external_plugin_schema_invalid": (
        "MyMCP external plugin publishes an input schema that is not valid JSON Schema 2020-12"
    ),
    "external_plugin_name_collision": (
        "MyMCP external plugin bound under local names would publish a tool name that "
        "another tool has or that only the host may use"
    ),
}

_SAFE_FILE_CODES: Final[dict[SafeFileReason, str]] = {
    SafeFileReason.MISSING: "external_manifest_unreadable",
    SafeFileReason.UNSAFE_PATH: "external_manifest_unsafe_path",
    SafeFileReason.NOT_REGULAR: "external_manifest_not_regular",
    SafeFileReason.UNSAFE_PERMISSIONS: "external_manifest_unsafe_permissions",
    SafeFileReason.UNREADABLE: "external_manifest_unreadable",
    SafeFileReason.TOO_LARGE: "external_manifest_too_large",
    SafeFileReason.CHANGED: "external_manifest_source_changed",
}


def _fail(code: str) -> NoReturn:
    raise ExternalPluginLoadError(code, EXTERNAL_PLUGIN_MESSAGES[code]) from None


def _preflight(declaration: PluginDeclaration) -> PluginDefinition:
    """Read and validate one enabled declaration's manifest; imports nothing."""
    if declaration.manifest_path is None or declaration.module is None:
        _fail("external_manifest_invalid")  # schema 1 cannot enable plugins
    try:
        data = read_safe_file(Path(declaration.manifest_path), max_bytes=MAX_MANIFEST_BYTES)
    except SafeFileError as exc:
        _fail(_SAFE_FILE_CODES[exc.reason])
    try:
        definition = parse_manifest(data)
    except ManifestError:
        _fail("external_manifest_invalid")
    if definition.plugin_id != declaration.id:
        _fail("external_manifest_identity_mismatch")
    if not definition.requires.admits(HOST_API_VERSION):
        _fail("external_manifest_host_api_incompatible")
    return definition


def activate_external_plugin(module_name: str, definition: PluginDefinition) -> PluginAdapter:
    """Import one module, call its entrypoint and check parity with its manifest.

    Also used by `mymcp plugin check --import`, so the check imports exactly as the
    server does."""
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit):
        _fail("external_plugin_import_failed")
    entrypoint = getattr(module, ENTRYPOINT_NAME, None)
    if not callable(entrypoint):
        _fail("external_plugin_entrypoint_invalid")
    try:
        adapter = entrypoint()
    except (Exception, SystemExit):
        _fail("external_plugin_entrypoint_invalid")
    if not isinstance(adapter, PluginAdapter):
        if inspect.iscoroutine(adapter):
            adapter.close()  # an async entrypoint: never awaited, so close it quietly
        _fail("external_plugin_contract_invalid")
    try:
        validate_plugin_contract(adapter, definition, HOST_API_VERSION)
    except ManifestError:
        _fail("external_plugin_composition_invalid")
    return adapter


def load_external_plugins(
    declarations: Sequence[PluginDeclaration],
) -> tuple[PluginAdapter, ...]:
    """Load the enabled external plugins, in declaration order.

    First every enabled manifest is preflighted (safe read, strict manifest v1, id equal
    to the declared id, host API supported) and the limits are checked: at most 32 enabled
    plugins and 256 declared capabilities, and distinct module names. Only then is each
    module imported and its zero-argument `mymcp_plugin_v1()` called; the returned
    adapter must match its manifest. Disabled declarations are never touched. Binding and
    collision checks belong to runtime composition.
    """
    enabled = [declaration for declaration in declarations if declaration.enabled]
    if len(enabled) > MAX_EXTERNAL_PLUGINS:
        _fail("external_plugin_limit_exceeded")
    definitions = [_preflight(declaration) for declaration in enabled]
    if sum(len(definition.capabilities) for definition in definitions) > MAX_EXTERNAL_CAPABILITIES:
        _fail("external_plugin_limit_exceeded")
    modules = [declaration.module for declaration in enabled]
    if len(set(modules)) != len(modules):
        _fail("external_plugin_composition_invalid")
    return tuple(
        activate_external_plugin(str(declaration.module), definition)
        for declaration, definition in zip(enabled, definitions, strict=True)
    )
