"""Two-phase startup: frozen settings first, then `build_host()` composes everything.

Order: semantic checks, preflight and import of external plugins, the
bundled Mnemosyne adapter and its parity check, bindings (Mnemosyne pinned first, then
`<plugin-id>__<tool-local-id>`), `list_tools` over the whole surface, a new generation,
and finally authentication. Any failure raises and leaves no partial runtime behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mymcp import __version__
from mymcp.auth import Authenticator, build_authenticator
from mymcp.config import HostConfiguration, load_host_configuration, validate_semantics
from mymcp.errors import ExternalPluginLoadError, HostRuntimeCompositionError, MyMCPError
from mymcp.plugin import QualifiedCapabilityId, validate_plugin_contract
from mymcp.plugins.mnemosyne import (
    MNEMOSYNE_PLUGIN_ID,
    MnemosyneSettings,
    create_mnemosyne_adapter,
    load_mnemosyne_settings,
    mnemosyne_manifest,
)
from mymcp.runtime._composition import compose_runtime, default_binding
from mymcp.runtime._external import EXTERNAL_PLUGIN_MESSAGES, load_external_plugins
from mymcp.runtime._runtime import HostRuntime

__all__ = ["BindingPolicy", "Host", "build_host", "build_runtime", "production_binding"]

_log = logging.getLogger("mymcp.host.bootstrap")


@dataclass(frozen=True, slots=True)
class Host:
    """Everything `create_app` needs, built once per process."""

    configuration: HostConfiguration
    runtime: HostRuntime
    authenticator: Authenticator


BindingPolicy = Callable[[QualifiedCapabilityId], str]
"""Chooses the public name of each capability; composition still refuses every collision."""


def production_binding(capability: QualifiedCapabilityId) -> str:
    """Mnemosyne's names are pinned to their local ids; externals are namespaced."""
    if capability.plugin_id == MNEMOSYNE_PLUGIN_ID:
        return capability.local_id
    return default_binding(capability)


def build_runtime(
    configuration: HostConfiguration,
    mnemosyne: MnemosyneSettings,
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    binding: BindingPolicy = production_binding,
) -> HostRuntime:
    """Compose the bundled plugin and every enabled external plugin into one runtime."""
    try:
        externals = load_external_plugins(configuration.plugins)
        bundled = create_mnemosyne_adapter(mnemosyne, environ=environ, home=home)
        validate_plugin_contract(bundled, mnemosyne_manifest())
        try:
            contributions = [bundled.contribution, *(a.contribution for a in externals)]
            runtime = compose_runtime(
                contributions,
                [(t.capability, binding(t.capability)) for c in contributions for t in c.tools],
                server_version=__version__,
            )
        except HostRuntimeCompositionError as exc:
            if externals:
                code = (
                    "external_plugin_schema_invalid"
                    if exc.code == "invalid_input_schema"
                    else "external_plugin_composition_invalid"
                )
                raise ExternalPluginLoadError(code, EXTERNAL_PLUGIN_MESSAGES[code]) from exc
            raise
    except MyMCPError as exc:
        _log.error("runtime_composition outcome=error code=%s", exc.code)
        raise
    _log.info(
        "runtime_composition outcome=loaded bundled=1 external=%d capabilities=%d",
        len(externals),
        len(runtime.registry) - 1,
    )
    return runtime


def build_host(
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    *,
    binding: BindingPolicy = production_binding,
) -> Host:
    """Read configuration and settings, then compose the runtime and authentication."""
    configuration = load_host_configuration(environ, home)
    validate_semantics(configuration)
    mnemosyne = load_mnemosyne_settings(environ, home)
    runtime = build_runtime(configuration, mnemosyne, environ=environ, home=home, binding=binding)
    authenticator = build_authenticator(configuration.authentication, configuration.server)
    return Host(configuration, runtime, authenticator)
