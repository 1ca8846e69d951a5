"""Two-phase startup: frozen settings first, then `build_host()` composes everything.

Order: semantic checks, the bundled Mnemosyne adapter and its parity check, the
preflight of external plugins' manifests, their tool names (a clash fails before any
plugin's code runs), the import of external plugins, bindings (Mnemosyne's names and
those of plugins declared `binding = "local"` are their local ids, every other one
`<plugin-id>__<tool-local-id>`), `list_tools` over the whole surface, a new generation,
the policy (its selectors are resolved against the composed tools), authentication, and
last the audit log (the only step that creates files). Any failure raises and leaves no
partial runtime behind.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mymcp import __version__
from mymcp.auth import Authenticator, build_authenticator
from mymcp.config import (
    BUNDLED_PLUGIN_ID,
    AuthenticationSettings,
    HostConfiguration,
    load_host_configuration,
    locate_in_configuration,
    validate_semantics,
)
from mymcp.errors import (
    ExternalPluginLoadError,
    HostRuntimeCompositionError,
    Location,
    MyMCPError,
)
from mymcp.governance import Approvals, Governance, Policy, approval_required_tools, open_audit
from mymcp.plugin import PluginDefinition, QualifiedCapabilityId, validate_plugin_contract
from mymcp.plugins.mnemosyne import (
    Mnemosyne,
    create_mnemosyne,
    load_mnemosyne_settings,
    mnemosyne_manifest,
)
from mymcp.runtime import (
    HostRuntime,
    bundled_prefix_problem,
    compose_runtime,
    default_binding,
    is_reserved_name,
    load_external_plugins,
    refuse_public_names,
)

__all__ = [
    "BindingPolicy",
    "Host",
    "binding_policy",
    "build_host",
    "build_runtime",
    "production_binding",
    "refuse_declared_names",
]

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


def binding_policy(local_plugins: Collection[str] = ()) -> BindingPolicy:
    """The one place names are pinned: Mnemosyne's tools, and those of the plugins in
    `local_plugins`, keep their local ids (`memory_recall`); every other external tool is
    namespaced `<plugin-id>__<tool-local-id>`."""
    pinned = frozenset({BUNDLED_PLUGIN_ID, *local_plugins})

    def binding(capability: QualifiedCapabilityId) -> str:
        if capability.plugin_id in pinned:
            return capability.local_id
        return default_binding(capability)

    return binding


def production_binding(capability: QualifiedCapabilityId) -> str:
    """The binding without locally bound plugins."""
    return binding_policy()(capability)


def refuse_declared_names(
    names: Mapping[QualifiedCapabilityId, str],
    local_plugins: Collection[str],
    keys: Mapping[str, str] | None = None,
) -> None:
    """Refuse, by name of the cause, a declared tool name the start cannot publish: a
    locally bound name that clashes with another tool's name or a reserved one, or an
    external plugin's name that is reserved or not a valid MCP tool name (a plugin id
    `mymcp` namespaces into the host's own prefix, a plugin id `memory` into the bundled
    memory tools' `memory_`; a 64-character plugin id and tool id make 130 characters).
    Declared capabilities count even while a gate keeps them off, so that switching a gate
    on later can never make startup fail. `keys` gives each declared plugin's key path in
    the configuration (`plugins[2]`), for the error to point at the `binding` that caused
    a clash."""
    owners: dict[str, QualifiedCapabilityId] = {}
    for capability, name in names.items():
        owner = owners.setdefault(name, capability)
        plugin, holder = capability.plugin_id, owner.plugin_id
        if plugin not in local_plugins and holder not in local_plugins:
            continue
        if owner != capability:
            refusal = f"is taken: plugin {holder!r} publishes it, and plugin {plugin!r} would too"
        elif is_reserved_name(name):
            refusal = f"is taken: only the host may use it (plugin {plugin!r})"
        else:
            # A locally bound tool id such as `memory_wipe_all`: found here, from the
            # manifest, so that the start stops before any plugin's code runs.
            problem = bundled_prefix_problem(name, capability)
            if problem is None:
                continue
            refusal = f"(plugin {plugin!r}) {problem}"
        key = (keys or {}).get(plugin if plugin in local_plugins else holder)
        raise ExternalPluginLoadError(
            "external_plugin_name_collision",
            location=Location(key=None if key is None else f"{key}.binding"),
            detail=f"the tool name {name!r} {refusal}",
        )
    try:
        refuse_public_names({c: n for c, n in names.items() if c.plugin_id != BUNDLED_PLUGIN_ID})
    except HostRuntimeCompositionError as exc:
        raise plugin_composition_error(exc) from exc


def plugin_composition_error(exc: HostRuntimeCompositionError) -> ExternalPluginLoadError:
    """What composing refused, said as a fault of the external plugins (only they vary);
    `mymcp plugin check --import` says it in the same words."""
    code = (
        "external_plugin_schema_invalid"
        if exc.code in ("invalid_input_schema", "invalid_output_schema")
        else "external_plugin_composition_invalid"
    )
    return ExternalPluginLoadError(code, location=exc.location, detail=f"{exc.code}: {exc.detail}")


def _declared_names(
    definitions: Iterable[PluginDefinition], binding: BindingPolicy
) -> dict[QualifiedCapabilityId, str]:
    """Every capability the plugins declare (gated ones too), with its public name."""
    return {
        capability: binding(capability)
        for definition in definitions
        for capability in (
            QualifiedCapabilityId(definition.plugin_id, d.kind, d.local_id)
            for d in definition.capabilities
        )
    }


def build_runtime(configuration: HostConfiguration, mnemosyne: Mnemosyne) -> HostRuntime:
    """Compose the bundled plugin and every enabled external plugin into one runtime."""
    local = {p.id for p in configuration.plugins if p.enabled and p.binding == "local"}
    binding = binding_policy(local)
    try:
        bundled = mnemosyne.adapter
        validate_plugin_contract(bundled, mnemosyne_manifest())

        def check_names(plugins: Sequence[tuple[str, PluginDefinition]]) -> None:
            # From the manifests alone, before any plugin's code runs: a clash they show
            # is a configuration mistake, and importing would only run code for nothing.
            definitions = (bundled.definition, *(definition for _, definition in plugins))
            keys = {definition.plugin_id: key for key, definition in plugins}
            refuse_declared_names(_declared_names(definitions, binding), local, keys)

        externals = load_external_plugins(
            configuration.plugins, configuration.source, check_names=check_names
        )
        # The adapters match their manifests (checked as each was activated).
        declared = _declared_names((a.definition for a in (bundled, *externals)), binding)
        try:
            contributions = [bundled.contribution, *(a.contribution for a in externals)]
            runtime = compose_runtime(
                contributions,
                [(t.capability, binding(t.capability)) for c in contributions for t in c.tools],
                server_version=__version__,
            )
            active = {tool.capability for c in contributions for tool in c.tools}
            runtime = dataclasses.replace(
                runtime,
                inactive_names=frozenset(n for c, n in declared.items() if c not in active),
            )
        except HostRuntimeCompositionError as exc:
            if externals:
                raise plugin_composition_error(exc) from exc
            raise
    except MyMCPError as exc:
        _log.error("runtime_composition outcome=error code=%s", exc.code)
        # A fault of a [[plugins]] entry gets the configuration's line (and file); a
        # manifest's own fault names the manifest, and keeps its own key.
        where = exc.location
        in_configuration = where.source is None or (
            configuration.source is not None and where.source == str(configuration.source)
        )
        if where.key is not None and where.line is None and in_configuration:
            locate_in_configuration(exc, configuration.source)
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
    with_audit: bool = True,
    authenticates: bool = True,
    configuration: HostConfiguration | None = None,
) -> Host:
    """Read configuration and settings, then compose the runtime, policy, authentication
    and audit. `with_audit=False` leaves the audit directory untouched (for `check`);
    `authenticates=False` composes no adapter (for stdio, whose one caller is the local
    user who started it: no verifier file is read and no issuer is asked for its keys,
    so a laptop offline still serves it); `configuration` is the host configuration when
    the caller has loaded it already (the launcher listens on its address before
    anything is built)."""
    if configuration is None:
        configuration = load_host_configuration(environ, home)
    validate_semantics(configuration)
    mnemosyne = create_mnemosyne(load_mnemosyne_settings(environ, home), environ=environ, home=home)
    runtime = build_runtime(configuration, mnemosyne)
    try:
        policy = Policy(configuration.policy, runtime)
        needs_approval = approval_required_tools(configuration.approval, runtime)
    except MyMCPError as exc:
        _log.error("policy_composition outcome=error code=%s", exc.code)
        locate_in_configuration(exc, configuration.source)
        raise
    if needs_approval:  # before the audit is opened: a failed start leaves nothing open
        _check_console_for_approval(environ, home)
    try:
        settings = configuration.authentication if authenticates else AuthenticationSettings()
        authenticator = build_authenticator(settings, configuration.server)
        authenticator = authenticator.with_scopes_supported(policy.offered_scopes)
    except MyMCPError as exc:
        if exc.location.source is None:  # a verifier file's own fault names that file
            locate_in_configuration(exc, configuration.source)
        raise
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


def _check_console_for_approval(environ: Mapping[str, str] | None, home: Path | None) -> None:
    """Approvals are given in the console, and only someone signed in to it can give one:
    a console state directory that no sign-in could use would leave every call that
    needs approval waiting for a decision nobody can make, so the start stops instead.
    Nothing is created (the first `mymcp console` makes the directory)."""
    from mymcp.console import (
        ConsoleStateError,
        check_console_state_directory,
        console_state_directory,
    )

    try:
        directory = console_state_directory(environ, home)
    except MyMCPError:
        return  # no home directory: `mymcp console` says so when it is run
    try:
        check_console_state_directory(directory)
    except ConsoleStateError as exc:
        _log.error("approval outcome=error code=%s", exc.code)
        reason = exc.diagnostic.message
        raise ConsoleStateError(
            f"{reason}; calls that need approval could never be approved", directory
        ) from None
