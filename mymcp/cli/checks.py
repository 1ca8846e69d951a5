"""`mymcp check` (everything a start would compose, without serving) and `mymcp plugin
check` (one plugin's manifest, tool names and module, as the start judges them)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mymcp._escaping import escape_invisible
from mymcp.cli.terminal import (
    EXIT_FAILURE,
    EXIT_OK,
    begin_logging,
    fail,
    load_configuration,
)
from mymcp.errors import (
    ConfigurationError,
    ExternalPluginLoadError,
    HostRuntimeCompositionError,
    Location,
    MyMCPError,
    shown,
)
from mymcp.logs import divert_standard_streams, installed_handler

if TYPE_CHECKING:
    from mymcp.config import AuthenticationSettings, HostConfiguration
    from mymcp.plugin import PluginDefinition
    from mymcp.plugins.mnemosyne import MnemosyneSettings


def check_command(args: argparse.Namespace) -> int:
    """Compose everything the server would, without serving or creating files, and say
    what was found; the first fault ends the check with its diagnostic and exit 1."""
    from mymcp.governance import audit_directory, check_audit_directory
    from mymcp.host import build_host

    logs = begin_logging(args)
    configuration = load_configuration(logs, args)
    if configuration is None:
        return EXIT_FAILURE
    try:
        # What a plugin prints while it is imported is a log line, not part of the report.
        with divert_standard_streams(logs):
            host = build_host(with_audit=False, configuration=configuration)
        directory = audit_directory(configuration) if configuration.audit.enabled else None
        # The checks the start makes, read-only: a directory the server would refuse
        # fails the check too.
        exists = directory is not None and check_audit_directory(directory)
    except MyMCPError as exc:
        return fail(exc)
    source = configuration.source or "none (built-in defaults)"
    print(f"configuration: {source} (schema {configuration.schema_version})")
    enabled = [plugin for plugin in configuration.plugins if plugin.enabled]
    print("plugins: " + (", ".join(f"{p.id} (module {p.module})" for p in enabled) or "none"))
    disabled = [plugin.id for plugin in configuration.plugins if not plugin.enabled]
    if disabled:
        print(f"plugins disabled: {', '.join(disabled)}")
    print(f"tools: {', '.join(host.runtime.registry.names)}")
    print(f"authentication: {_authentication_summary(configuration.authentication)}")
    _warn_of_unknown_adapter_types(configuration)
    _warn_of_no_way_in(configuration)
    _warn_of_spaced_subjects(configuration)
    policy = configuration.policy
    if policy is None:
        print("policy: none (every principal may call every tool)")
    else:
        print(f"policy: default {policy.default}, {len(policy.rules)} rule(s)")
    approvals = host.governance.approvals
    if approvals is None:
        print("approval: none (no call waits for a person)")
    else:
        names = [name for name in host.runtime.registry.names if name in approvals.required]
        ttl = configuration.approval.ttl_seconds
        print(f"approval: {', '.join(names)} (in the console; an approval expires after {ttl} s)")
    if directory is None:
        print("audit: off")
    else:
        state = "exists" if exists else "created at first start"
        print(f"audit: on, {directory} ({state})")
        _warn_of_misplaced_segments(configuration, directory if exists else None)
    return _check_memory(host.mnemosyne.settings if host.mnemosyne else None)


def _check_memory(settings: MnemosyneSettings | None) -> int:
    """The memory root and its files, in summary: `mymcp memory check` has the detail."""
    from mymcp.plugins.mnemosyne._memory_check import check_memory

    if settings is None:
        print("mymcp: check OK")
        return EXIT_OK
    try:
        lines, findings = check_memory(settings)
    except MyMCPError as exc:
        return fail(exc)
    for line in lines:
        print(line)
    failed = False
    for finding in findings:
        failed |= finding.severity == "error"
        print(f"mymcp: {finding.severity}: {finding.render()}", file=sys.stderr)
    if failed:
        return EXIT_FAILURE
    print("mymcp: check OK")
    return EXIT_OK


def _warn_at(configuration: HostConfiguration, key: str, text: str) -> None:
    """A warning about one key of the host configuration, naming its file when it has one."""
    where = f"{configuration.source}: " if configuration.source else ""
    print(f"mymcp: warning: {where}{key}: {text}", file=sys.stderr)


def _warn_of_unknown_adapter_types(configuration: HostConfiguration) -> None:
    """A disabled adapter is never composed, so the start accepts any type for it; a type
    MyMCP has never had is still most likely a typo that fails the start once the adapter
    is enabled, and the check is where to hear of it."""
    from mymcp.config import OAUTH_JWT_ADAPTER_TYPE, OPERATOR_BEARER_ADAPTER_TYPE

    known = (OPERATOR_BEARER_ADAPTER_TYPE, OAUTH_JWT_ADAPTER_TYPE)
    for index, adapter in enumerate(configuration.authentication.adapters):
        if not adapter.enabled and adapter.type not in known:
            _warn_at(
                configuration,
                f"authentication.adapters[{index}].type",
                f"{adapter.type!r} is no adapter type (the types are {' and '.join(known)}); "
                "the adapter is disabled, and enabling it would fail the start",
            )


def _warn_of_misplaced_segments(configuration: HostConfiguration, directory: Path | None) -> None:
    """A segment that is no regular file is tampering, which `audit verify` reports; the
    start goes on (the writer passes it by), so the check only warns."""
    from mymcp.governance import misplaced_segments

    if directory is None:
        return
    try:
        names = misplaced_segments(directory)
    except OSError:  # the directory went away meanwhile: the start will say so
        return
    for name in names:
        text = (
            f"{directory / name} is no regular file, which the writer never makes: "
            "`mymcp audit verify` reports it, and once the log would continue into it "
            "(no regular segment after it), calls of tools that change anything are "
            "refused (audit_unavailable)"
        )
        if configuration.audit.directory is not None:
            _warn_at(configuration, "audit.directory", text)
        else:  # the default directory: no key in the file names it
            print(f"mymcp: warning: {text}", file=sys.stderr)


def _warn_of_no_way_in(configuration: HostConfiguration) -> None:
    """Anonymous access off and no adapter enabled: a valid configuration (stdio serves
    its own caller regardless), but every HTTP request would be refused."""
    settings = configuration.authentication
    if not settings.anonymous_enabled and not any(a.enabled for a in settings.adapters):
        _warn_at(
            configuration,
            "authentication.anonymous_enabled",
            "anonymous access is off and no adapter is enabled, so every MCP request "
            "over HTTP (/mcp) is refused (401); enable an adapter, or allow anonymous "
            "access (mymcp stdio is unaffected)",
        )


def _warn_of_spaced_subjects(configuration: HostConfiguration) -> None:
    """A subject may begin or end with a space, so a selector naming one is valid; but
    `operator: alice` is far more often a typo for `operator:alice`, and matches nobody
    the operator meant. The start accepts it; the check says so."""
    rules = configuration.policy.rules if configuration.policy is not None else ()
    for rule in rules:
        for index, selector in enumerate(rule.principals):
            value = selector.value
            if selector.kind in ("operator", "oauth") and value and value != value.strip():
                _warn_at(
                    configuration,
                    f"policy.rules[{rule.index}].principals[{index}]",
                    f"{selector.text!r} names a subject that begins or ends with a space; "
                    "subjects are matched exactly as written",
                )


def _authentication_summary(settings: AuthenticationSettings) -> str:
    anonymous = "anonymous allowed" if settings.anonymous_enabled else "anonymous refused"
    enabled = [adapter for adapter in settings.adapters if adapter.enabled]
    if not enabled:
        return f"{anonymous}; no adapter enabled"
    return f"{anonymous}; adapter {enabled[0].id} ({enabled[0].type})"


def _plugin_check(manifest: Path, module: str | None) -> int:
    """Check a manifest exactly as the server's preflight does, then its tool names under
    the binding its [[plugins]] entry declares; with a module, import it as the server
    would and report every parity mismatch and schema finding."""
    from mymcp.config import BUNDLED_PLUGIN_ID, load_host_configuration
    from mymcp.runtime import preflight_manifest

    try:
        definition = preflight_manifest(manifest.absolute())
    except MyMCPError as exc:
        return fail(exc)
    if definition.plugin_id == BUNDLED_PLUGIN_ID:
        # No [[plugins]] entry may name it, so such a plugin could never be started.
        where = Location(source=str(manifest.absolute()), key="id")
        detail = f"'{BUNDLED_PLUGIN_ID}' is the bundled plugin; choose another id"
        message = "MyMCP plugin manifest uses the bundled plugin's id"
        refusal = ConfigurationError(
            "bundled_plugin_conflict", message, location=where, detail=detail
        )
        return fail(refusal)
    tools = ", ".join(c.local_id for c in definition.capabilities)
    print(f"mymcp: manifest OK: {definition.plugin_id} {definition.version}; tools: {tools}")
    if module is not None:
        return _check_plugin_module(module, definition, manifest.absolute())
    refusals = _naming_refusals(definition)
    if not refusals:
        return EXIT_OK  # the names bind either way: the entry does not matter
    try:
        configuration = load_host_configuration()
    except ConfigurationError:
        configuration = None
        print(
            "mymcp: note: the host configuration does not load (`mymcp check` says why), "
            "so the tool names were judged as if the plugin had no [[plugins]] entry",
            file=sys.stderr,
        )
    return EXIT_OK if _tool_names_bind(refusals, definition, configuration) else EXIT_FAILURE


def _tool_names_bind(
    refusals: Mapping[str, MyMCPError],
    definition: PluginDefinition,
    configuration: HostConfiguration | None,
) -> bool:
    """Whether the plugin's tools can be published under the binding of its [[plugins]]
    entry in `configuration` (without one, the default, namespaced), given what the start
    refuses under each binding. A refusal under that binding fails the check with the
    start's own line; without an entry, what local binding would refuse is a warning."""
    from mymcp.config import locate_in_configuration

    binding = key = None
    enabled = True
    for index, declaration in enumerate(configuration.plugins if configuration else ()):
        if declaration.id == definition.plugin_id:
            binding, key = declaration.binding, f"plugins[{index}]"
            enabled = declaration.enabled
            break
    if binding is None and "local" in refusals:
        print(
            f'mymcp: warning: declared with binding = "local", it would not start: '
            f"{refusals['local']}",
            file=sys.stderr,
        )
    refusal = refusals.get(binding or "namespaced")
    if refusal is None:
        return True
    if configuration is not None and refusal.code == "external_plugin_name_collision":
        # The start names the entry whose binding made the clash: so does the check.
        refusal.locate(Location(key=f"{key}.binding"))
        locate_in_configuration(refusal, configuration.source)
    if not enabled:
        # A start passes a disabled entry over; turned on, it would fail so.
        print(
            f"mymcp: warning: {key} is disabled; enabled, it would not start: "
            f"{escape_invisible(str(refusal))}",
            file=sys.stderr,
        )
        return True
    fail(refusal)
    return False


def _warn_of_another_entry(
    configuration: HostConfiguration, plugin_id: str, module: str, manifest: Path
) -> None:
    """The check imports the module and reads the manifest it is given; the server, those
    its [[plugins]] entry names. When they differ, the check's verdict is not the start's."""
    for index, declaration in enumerate(configuration.plugins):
        if declaration.id != plugin_id:
            continue
        if declaration.module is not None and declaration.module != module:
            _warn_at(
                configuration,
                f"plugins[{index}].module",
                f"the server imports {shown(declaration.module)}, not {shown(module)}: "
                "this check is of a module the server does not load",
            )
        declared = declaration.manifest_path
        if declared is not None and os.path.abspath(declared) != os.path.abspath(manifest):
            _warn_at(
                configuration,
                f"plugins[{index}].manifest_path",
                f"the server reads {declared}, not {os.path.abspath(manifest)}: this check "
                "is of a manifest the server does not read",
            )


def _naming_refusals(definition: PluginDefinition) -> dict[str, MyMCPError]:
    """What the start refuses the plugin's tool names for, by binding: the start's own
    checks (a name reserved for the host, outside MCP's alphabet or too long, or taken by
    a Mnemosyne tool), over Mnemosyne's tools and the plugin's. (A clash with another
    locally bound plugin needs that plugin's manifest too: `mymcp check` reads them all.)"""
    from mymcp.host import binding_policy, refuse_declared_names
    from mymcp.plugin import QualifiedCapabilityId
    from mymcp.plugins.mnemosyne import mnemosyne_manifest

    capabilities = [
        QualifiedCapabilityId(plugin.plugin_id, d.kind, d.local_id)
        for plugin in (mnemosyne_manifest(), definition)
        for d in plugin.capabilities
    ]
    refusals: dict[str, MyMCPError] = {}
    for binding, local in (("namespaced", set()), ("local", {definition.plugin_id})):
        bind = binding_policy(local)
        names = {capability: bind(capability) for capability in capabilities}
        try:
            refuse_declared_names(names, local)
        except MyMCPError as exc:
            refusals[binding] = exc
    return refusals


def _declared_configuration(
    definition: PluginDefinition, configuration: HostConfiguration
) -> tuple[Mapping[str, Any], str]:
    """The values the host configuration gives this plugin, checked as the server checks
    them, and where they come from (for the summary line)."""
    from mymcp.runtime import check_plugin_configuration

    for index, declaration in enumerate(configuration.plugins):
        if declaration.id == definition.plugin_id:
            where = f"plugins[{index}]"
            values = declaration.configuration
            check_plugin_configuration(values, definition, where, configuration.source)
            return values, f"{where}.configuration" if values else "none"
    problem = definition.configuration.violation({}, definition.secret_references)
    if problem is not None:
        key, detail = problem
        raise ExternalPluginLoadError(
            "external_plugin_configuration_invalid",
            detail=(
                f"no [[plugins]] entry has id {definition.plugin_id!r}, so the plugin would "
                f"get no configuration, and {key}: {detail}"
            ),
        )
    return {}, "none"


def _check_plugin_module(module: str, definition: PluginDefinition, manifest: Path) -> int:
    """Errors (the server would refuse the plugin) fail the check, portability problems
    warn. Every mismatch is printed, not only the first. A host configuration that does
    not load fails the check: the server would not start with it either."""
    from mymcp.config import load_host_configuration
    from mymcp.host import binding_policy, plugin_composition_error
    from mymcp.runtime import (
        bind_tool,
        import_external_plugin,
        lint_input_schema,
        mismatch_diagnostics,
        preflight_manifest,
        unpublished_members,
    )

    try:
        configuration = load_host_configuration()
    except ConfigurationError as exc:
        fail(exc)
        print(
            "mymcp: note: --import gives the plugin the values of its [[plugins]] entry, "
            "so the host configuration must load; the module was not imported",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    try:
        # An entry naming this manifest under another id: the start refuses it so.
        for declaration in configuration.plugins:
            if declaration.manifest_path == manifest and declaration.id != definition.plugin_id:
                preflight_manifest(manifest, declaration.id)
    except MyMCPError as exc:
        return fail(exc)
    _warn_of_another_entry(configuration, definition.plugin_id, module, manifest)
    if not _tool_names_bind(_naming_refusals(definition), definition, configuration):
        return EXIT_FAILURE
    try:
        values, origin = _declared_configuration(definition, configuration)
        # What the plugin prints while it is imported is a log line, not part of the
        # report on standard output.
        logs = installed_handler()
        with divert_standard_streams(logs) if logs is not None else nullcontext():
            adapter = import_external_plugin(module, definition, values)
    except MyMCPError as exc:
        return fail(exc)
    errors = 0
    for mismatch in mismatch_diagnostics(module, adapter, definition):
        errors += 1
        print(f"mymcp: error: {mismatch.render()}", file=sys.stderr)
    # Each tool as the start binds it: its definition published and its schemas compiled
    # by the same code, so the check refuses exactly what the start refuses.
    plugin_id = definition.plugin_id
    local = any(p.id == plugin_id and p.binding == "local" for p in configuration.plugins)
    bind = binding_policy({plugin_id} if local else ())
    for tool in adapter.contribution.tools:
        try:
            bound = bind_tool(bind(tool.capability), tool)
        except HostRuntimeCompositionError as exc:
            errors += 1
            fail(plugin_composition_error(exc))
            continue
        for finding in lint_input_schema(bound.input_schema):
            print(
                f"mymcp: {finding.severity}: tool {tool.capability.local_id}: "
                f"{finding.message} (code={finding.code})",
                file=sys.stderr,
            )
        for member in unpublished_members(tool.tool):
            # Dropped without a word at the start; an author should know it goes nowhere.
            why = (
                "the host writes each tool's annotations from its declared effects"
                if member == "annotations"
                else "the host publishes only title, description, inputSchema, "
                "outputSchema and icons"
            )
            print(
                f"mymcp: warning: tool {tool.capability.local_id}: {member!r} is left out "
                f"of the published definition: {why} (code=tool_member_unpublished)",
                file=sys.stderr,
            )
    if errors:
        return EXIT_FAILURE
    print(
        f"mymcp: module OK: {module}; it matches its manifest (configuration: {origin}) and "
        "every tool definition is accepted, its schemas compiling under JSON Schema 2020-12"
    )
    return EXIT_OK


def plugin_command(args: argparse.Namespace) -> int:
    return _plugin_check(args.manifest, args.module)
