"""The trusted in-process adapter of the bundled Mnemosyne plugin.

It pairs the definition parsed from the packaged inert manifest with the gate-selected
memory tools. Each tool's handler is a narrow synchronous bridge: raw arguments go to
the memory service, its outcome comes back as a structured MCP result. The service
owns validation, storage, error mapping and logging.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from mymcp.errors import ManifestError
from mymcp.plugin import (
    ActivatedTool,
    PluginAdapter,
    PluginContribution,
    PluginDefinition,
    QualifiedCapabilityId,
    ToolHandler,
    parse_manifest,
    structured_result,
)
from mymcp.plugins.mnemosyne._settings import (
    MnemosyneSettings,
    index_snapshot_directory,
    memory_root,
)
from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    MemoryService,
    MutationService,
    ToolOutcome,
    tool_definition,
)

__all__ = [
    "MNEMOSYNE_PINNED_BINDINGS",
    "MNEMOSYNE_PLUGIN_ID",
    "create_mnemosyne_adapter",
    "mnemosyne_manifest",
    "pinned_public_name",
    "process_cursor_codec",
    "selected_capabilities",
]

_log = logging.getLogger("mymcp.mnemosyne.adapter")

MNEMOSYNE_PLUGIN_ID: Final = "mnemosyne"
_PACKAGE: Final = "mymcp.plugins.mnemosyne"
_MANIFEST_RESOURCE: Final = "manifest.json"

# Registry order, the gate (a MnemosyneSettings field, None = always on) and the name of
# the operation that serves each capability: ungated reads are `MemoryService` methods,
# gated mutations are `MutationService` methods.
_CAPABILITIES: Final[tuple[tuple[str, str | None, str], ...]] = (
    ("memory_recall", None, "recall"),
    ("memory_list", None, "list"),
    ("memory_inspect", None, "inspect"),
    ("memory_archive", "archive_restore", "archive"),
    ("memory_restore", "archive_restore", "restore"),
    ("memory_remember", "remember", "remember"),
    ("memory_revise", "revise", "revise"),
    ("memory_forget", "forget", "forget"),
)

MNEMOSYNE_PINNED_BINDINGS: Final[Mapping[str, str]] = MappingProxyType(
    {local_id: local_id for local_id, _, _ in _CAPABILITIES}
)
"""Capability local id -> public tool name. Mnemosyne's names are pinned to their ids."""

_codec_lock = threading.Lock()
_codec: CursorCodec | None = None


def process_cursor_codec() -> CursorCodec:
    """The one list-cursor codec of this process, created on first use.

    Its key and instance id live only in memory, so a restart makes old cursors stale.
    """
    global _codec
    with _codec_lock:
        if _codec is None:
            _codec = CursorCodec.generate()
        return _codec


def pinned_public_name(capability: QualifiedCapabilityId) -> str:
    """The public name bound to a Mnemosyne capability (its local id)."""
    if capability.plugin_id != MNEMOSYNE_PLUGIN_ID:
        raise ValueError("not a Mnemosyne capability")
    return MNEMOSYNE_PINNED_BINDINGS[capability.local_id]


def mnemosyne_manifest() -> PluginDefinition:
    """Parse the packaged inert manifest with the public manifest parser.

    Raises `ManifestError` when the resource cannot be read or is invalid.
    """
    try:
        data = resources.files(_PACKAGE).joinpath(_MANIFEST_RESOURCE).read_bytes()
    except OSError:
        raise ManifestError(
            "manifest_resource_invalid", "MyMCP plugin manifest resource is invalid"
        ) from None
    return parse_manifest(data)


def selected_capabilities(settings: MnemosyneSettings) -> tuple[str, ...]:
    """The local ids the gates select, in registry order (reads first, then mutations)."""
    return tuple(
        local_id
        for local_id, gate, _ in _CAPABILITIES
        if gate is None or getattr(settings, gate) is True
    )


def _bridge(operation: Callable[[Mapping[str, Any]], ToolOutcome]) -> ToolHandler:
    def handle(arguments: dict[str, Any]) -> dict[str, Any]:
        outcome = operation(arguments)
        return structured_result(outcome.payload, is_error=outcome.is_error)

    return handle


def create_mnemosyne_adapter(
    settings: MnemosyneSettings,
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> PluginAdapter:
    """Build the adapter for one process from its startup settings.

    One memory service is created here and shared by every handler; it resolves the
    memory root lazily on each call (from ``environ``/``home``, default the process
    environment), bounds discovery by ``settings.candidate_limit``, keeps its index
    snapshot in the user's cache directory and signs list cursors with the process
    codec. The mutation service writes through that same
    service's index, so reads see writes at once. A mutation tool is contributed only
    when its gate is on and the mutation service provides the operation.
    """
    if not isinstance(settings, MnemosyneSettings):
        raise TypeError("settings must be MnemosyneSettings")
    definition = mnemosyne_manifest()
    service = MemoryService(
        lambda: memory_root(environ, home),
        settings.candidate_limit,
        process_cursor_codec(),
        snapshot_directory=lambda: index_snapshot_directory(environ, home),
    )
    mutations = MutationService(service, settings.candidate_limit)
    operations = {
        local_id: (service if gate is None else mutations, operation)
        for local_id, gate, operation in _CAPABILITIES
    }
    tools: list[ActivatedTool] = []
    for local_id in selected_capabilities(settings):
        provider, name = operations[local_id]
        operation = getattr(provider, name, None)
        if not callable(operation):
            _log.warning("mnemosyne_adapter outcome=capability_unavailable capability=%s", local_id)
            continue
        declaration = definition.capability("tool", local_id)
        if declaration is None:  # the packaged manifest declares all eight
            raise ManifestError(
                "undeclared_capability", "MyMCP plugin contribution is not declared"
            )
        tools.append(
            ActivatedTool(
                capability=QualifiedCapabilityId(MNEMOSYNE_PLUGIN_ID, "tool", local_id),
                tool=tool_definition(local_id),
                handler=_bridge(operation),
                effects=declaration.effects,
                consent=declaration.consent,
            )
        )
    contribution = PluginContribution(definition.plugin_id, definition.version, tuple(tools))
    return PluginAdapter(definition, contribution)
