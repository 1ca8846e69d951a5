"""Two-phase startup: frozen settings first, then `build_host()` composes everything.

Order: semantic checks, preflight and import of external plugins, the bundled Mnemosyne
adapter and its parity check, bindings (Mnemosyne pinned first, then
`<plugin-id>__<tool-local-id>`), `list_tools` over the whole surface, a new generation,
the policy (its selectors are resolved against the composed tools), authentication, and
last the audit log (the only step that creates files). Any failure raises and leaves no
partial runtime behind.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mymcp import __version__
from mymcp.auth import Authenticator, build_authenticator
from mymcp.config import (
    BUNDLED_PLUGIN_ID,
    HostConfiguration,
    load_host_configuration,
    validate_semantics,
)
from mymcp.errors import (
    ExternalPluginLoadError,
    HostRuntimeCompositionError,
    Location,
    MyMCPError,
)
from mymcp.governance import Approvals, Governance, Policy, approval_required_tools, open_audit
from mymcp.plugin import QualifiedCapabilityId, validate_plugin_contract
from mymcp.plugins.mnemosyne import (
    Mnemosyne,
    create_mnemosyne,
    load_mnemosyne_settings,
    mnemosyne_manifest,
)
from mymcp.runtime._composition import compose_runtime, default_binding
from mymcp.runtime._external import load_external_plugins
from mymcp.runtime._runtime import HostRuntime

__all__ = ["BindingPolicy", "Host", "build_host", "build_runtime", "production_binding"]

_log = logging.getLogger("mymcp.host.bootstrap")


@dataclass(frozen=True, slots=True)
class Host:
    """Everything `create_app` needs, built once per process; `mnemosyne` is the bundled
    plugin, whose memory index a server builds in the background when it starts (None
    for a runtime composed without it)."""

    configuration: HostConfiguration
    runtime: HostRuntime
    authenticator: Authenticator
    governance: Governance
    mnemosyne: Mnemosyne | None = None


BindingPolicy = Callable[[QualifiedCapabilityId], str]
"""Chooses the public name of each capability; composition still refuses every collision."""


def production_binding(capability: QualifiedCapabilityId) -> str:
    """The one place Mnemosyne's names are pinned: its tools keep their local ids
    (`memory_recall`), external tools are namespaced (`<plugin-id>__<tool>`)."""
    if capability.plugin_id == BUNDLED_PLUGIN_ID:
        return capability.local_id
    return default_binding(capability)


def build_runtime(
    configuration: HostConfiguration,
    mnemosyne: Mnemosyne,
    *,
    binding: BindingPolicy = production_binding,
) -> HostRuntime:
    """Compose the bundled plugin and every enabled external plugin into one runtime."""
    try:
        externals = load_external_plugins(configuration.plugins, configuration.source)
        bundled = mnemosyne.adapter
        validate_plugin_contract(bundled, mnemosyne_manifest())
        try:
            contributions = [bundled.contribution, *(a.contribution for a in externals)]
            runtime = compose_runtime(
                contributions,
                [(t.capability, binding(t.capability)) for c in contributions for t in c.tools],
                server_version=__version__,
            )
            active = {tool.capability for c in contributions for tool in c.tools}
            declared = (
                QualifiedCapabilityId(adapter.definition.plugin_id, d.kind, d.local_id)
                for adapter in (bundled, *externals)
                for d in adapter.definition.capabilities
            )
            runtime = dataclasses.replace(
                runtime,
                inactive_names=frozenset(binding(c) for c in declared if c not in active),
            )
        except HostRuntimeCompositionError as exc:
            if externals:
                code = (
                    "external_plugin_schema_invalid"
                    if exc.code == "invalid_input_schema"
                    else "external_plugin_composition_invalid"
                )
                raise ExternalPluginLoadError(
                    code, location=exc.location, detail=f"{exc.code}: {exc.detail}"
                ) from exc
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
    with_audit: bool = True,
) -> Host:
    """Read configuration and settings, then compose the runtime, policy, authentication
    and audit. `with_audit=False` leaves the audit directory untouched (for `check`)."""
    configuration = load_host_configuration(environ, home)
    validate_semantics(configuration)
    mnemosyne = create_mnemosyne(load_mnemosyne_settings(environ, home), environ=environ, home=home)
    runtime = build_runtime(configuration, mnemosyne, binding=binding)
    try:
        policy = Policy(configuration.policy, runtime)
        needs_approval = approval_required_tools(configuration.approval, runtime)
    except MyMCPError as exc:
        _log.error("policy_composition outcome=error code=%s", exc.code)
        if configuration.source is not None:
            exc.locate(Location(source=str(configuration.source)))
        raise
    authenticator = build_authenticator(
        configuration.authentication, configuration.server
    ).with_scopes_supported(policy.step_up_scopes)
    try:
        audit = open_audit(configuration, environ, home) if with_audit else None
    except MyMCPError as exc:
        _log.error("audit outcome=error code=%s", exc.code)
        raise
    approvals = None
    if needs_approval:
        approvals = Approvals(needs_approval, configuration.approval.ttl_seconds, audit=audit)
    governance = Governance(policy, audit, approvals)
    return Host(configuration, runtime, authenticator, governance, mnemosyne)
