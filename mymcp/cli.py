"""Operator commands: serve (HTTP or stdio), check, plugin check, credentials, policy,
audit and console."""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final

from mymcp import __version__
from mymcp._escaping import escape_invisible
from mymcp.errors import ConfigurationError, MyMCPError
from mymcp.logs import (
    LOG_FORMATS,
    LOG_LEVELS,
    LogSettings,
    StderrLines,
    configure_logging,
    log_settings,
    uvicorn_log_config,
)

if TYPE_CHECKING:
    from mymcp.config import AuthenticationSettings, HostConfiguration, ServerSettings
    from mymcp.plugin import PluginDefinition
    from mymcp.plugins.mnemosyne import MnemosyneSettings
    from mymcp.transport import ConnectionLimits

__all__ = ["dev_main", "main", "selftest_main", "serve", "stdio"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer its reader left
# How long a stopping process waits for plugin handlers still running on worker threads.
_HANDLER_GRACE_SECONDS = 2.0

_DESCRIPTION = (
    "MyMCP: a local-first MCP host. Without a command it serves "
    "http://<address>:<port>/mcp from the host configuration "
    "($XDG_CONFIG_HOME/mymcp/config.toml, defaults 127.0.0.1:8000)."
)


def _logging_options(*, top_level: bool) -> argparse.ArgumentParser:
    """`--log-level` and `--log-format`, accepted before or after the command."""
    options = argparse.ArgumentParser(add_help=False)
    default = None if top_level else argparse.SUPPRESS
    options.add_argument(
        "--log-level",
        choices=tuple(LOG_LEVELS),
        default=default,
        help="log level (default: MYMCP_LOG_LEVEL, then [server] log_level, then info)",
    )
    options.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default,
        help="log line format (default: MYMCP_LOG_FORMAT, then [server] log_format, then text)",
    )
    return options


def _command(
    commands: Any, name: str, summary: str, description: str | None = None, **options: Any
) -> argparse.ArgumentParser:
    """A subcommand listed with `summary`, whose own --help opens with `description` (by
    default the summary as a sentence)."""
    if description is None:
        description = summary[0].upper() + summary[1:] + "."
    return commands.add_parser(name, help=summary, description=description, **options)  # type: ignore[no-any-return]


def _positive(text: str) -> int:
    """A count on the command line: a whole number from 1 (argparse says what is wrong)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1, not {text[:40]!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mymcp", description=_DESCRIPTION, parents=[_logging_options(top_level=True)]
    )
    parser.add_argument("--version", action="version", version=f"mymcp {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    logging_options = _logging_options(top_level=False)
    _command(
        commands,
        "serve",
        "serve MCP on the configured loopback address (default)",
        "Serve MCP over HTTP at http://<address>:<port>/mcp, with [server] address and port "
        "from the host configuration (default 127.0.0.1:8000), until interrupted. The "
        "configuration, plugins and credentials are checked first; a fault ends the start "
        "with exit 1 before anything binds. `mymcp` without a command does the same.",
        parents=[logging_options],
    )
    _command(
        commands,
        "stdio",
        "serve MCP on stdin/stdout, for clients that start their servers (principal local)",
        "Serve the same tools, policy, approvals and audit over MCP's stdio transport: "
        "one JSON-RPC message per line on stdin and stdout, logs on stderr. The caller "
        "is the principal `local`. The process ends when stdin closes. With [approval] "
        "it also serves the console at the configured address, where approvals are "
        "decided.",
        parents=[logging_options],
    )
    _command(
        commands,
        "check",
        "validate configuration, plugins, credentials, Mnemosyne settings and the "
        "memory root; never serves",
        "Compose everything the server would (host configuration, plugins and their "
        "manifests, credentials, policy, Mnemosyne settings, the memory root and its "
        "files) without serving and without creating any file, and print what was found. "
        "A fault is printed with its file, key, line and cause, and exits 1.",
        parents=[logging_options],
    )
    plugin = _command(commands, "plugin", "plugin tools").add_subparsers(
        dest="plugin_command", metavar="SUBCOMMAND", required=True
    )
    plugin_check = _command(
        plugin,
        "check",
        "validate one plugin manifest file",
        "Check a plugin manifest exactly as the server does before it imports anything; "
        "with --import, also import the plugin and compare it with its manifest. A tool "
        "id reserved for the host (list_tools, mymcp_*) or taken by a Mnemosyne tool fails "
        'the check when the plugin\'s [[plugins]] entry declares binding = "local", as it '
        "fails the start (external_plugin_name_collision), and is a warning when the host "
        "configuration has no entry for the plugin.",
    )
    plugin_check.add_argument(
        "manifest", type=Path, metavar="MANIFEST", help="the plugin's manifest.json"
    )
    plugin_check.add_argument(
        "--import",
        dest="module",
        metavar="MODULE",
        help="also import MODULE as the server would, call its mymcp_plugin_v1() with the "
        "values of its [[plugins]] entry, report every mismatch with the manifest and lint "
        "its tool schemas",
    )
    auth = _command(commands, "auth", "operator credentials").add_subparsers(
        dest="auth_command", metavar="SUBCOMMAND", required=True
    )
    token = _command(
        auth,
        "token",
        "operator bearer tokens",
        "Create, list and revoke the bearer tokens of the operator-bearer-v1 adapter. The "
        "verifier file keeps only digests; the server reads it when it starts.",
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    create = _command(token, "create", "create a token, print it once, store its digest")
    create.add_argument("--subject", required=True, help="who the token authenticates")
    listing = _command(token, "list", "list credential ids and subjects (never secrets)")
    revoke = _command(token, "revoke", "remove one credential by id")
    revoke.add_argument(
        "credential_id", metavar="ID", help="the credential id, as `mymcp auth token list` shows"
    )
    for sub in (create, listing, revoke):
        sub.add_argument(
            "--verifier-file",
            type=Path,
            metavar="FILE",
            help="verifier file to use (default: authentication.operator_bearer.verifier_path)",
        )
    _governance_parsers(commands)
    _console_parser(commands)
    _memory_parser(commands)
    return parser


_SCOPE_HELP = "self, relationship, preference, practice, project, knowledge or agent"
_IDENTIFIER_HELP = "an id of a-z, 0-9, '-' and '_'"


def _memory_parser(commands: Any) -> None:
    """`mymcp memory …`; scope names are checked when the command runs, so building the
    parser never imports the memory package."""
    memory = _command(
        commands,
        "memory",
        "see, search, check, export and import memory (Mnemosyne)",
        "Read the memory root the server uses ($MNEMOSYNE_MEMORY_ROOT or "
        "~/.mnemosyne/memory) from the terminal. Paths are shown: they are yours.",
    ).add_subparsers(dest="memory_command", metavar="SUBCOMMAND", required=True)
    listing = _command(memory, "list", "list the memories of a scope, without content")
    listing.add_argument("scope", metavar="SCOPE", help=_SCOPE_HELP)
    listing.add_argument(
        "--namespace", metavar="N", help=f"only this namespace ({_IDENTIFIER_HELP})"
    )
    narrowing = listing.add_mutually_exclusive_group()
    narrowing.add_argument(
        "--collection", metavar="C", help=f"only this collection ({_IDENTIFIER_HELP})"
    )
    narrowing.add_argument(
        "--no-collection", action="store_true", help="only memories outside any collection"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = _command(
        memory,
        "show",
        "print one memory: a reference (JSON), a file path, or a path under the root",
    )
    show.add_argument(
        "target",
        metavar="REFERENCE-or-PATH",
        help="a reference exactly as a tool returned it, a record file, or a path as "
        "`memory list` prints it",
    )
    search = _command(memory, "search", "recall: the memories that best match a query")
    search.add_argument("scope", metavar="SCOPE", help=_SCOPE_HELP)
    search.add_argument("query", metavar="QUERY", help="words to look for")
    search.add_argument(
        "--namespace", metavar="N", help=f"only this namespace ({_IDENTIFIER_HELP})"
    )
    search.add_argument("--tags", nargs="+", default=[], metavar="TAG", help="tags to favour")
    search.add_argument("--json", action="store_true", help="print the tool's JSON answer")
    stats = _command(memory, "stats", "records per scope and namespace, archived, bytes")
    stats.add_argument("--json", action="store_true", help="print JSON")
    _command(
        memory,
        "check",
        "name every file the server skips, and why (exit 1 when any)",
        "Check the memory root itself (absolute, a directory or creatable, not writable by "
        "others), then walk it and name every file the server passes over and why: not "
        "JSON, not a record, in the wrong place, a symlink, too large, unsafe permissions, "
        "a duplicate legacy id; and every scope over the candidate limit. Exit 1 when "
        "anything is wrong. Nothing is changed.",
    )
    export = _command(memory, "export", "write a scope's records as JSON lines to stdout")
    export.add_argument("scope", metavar="SCOPE", help=_SCOPE_HELP)
    importing = _command(
        memory,
        "import",
        "remember the records of a JSON-lines file (a dry run unless --apply)",
        "Remember each record of FILE (as `memory export` writes them) with the checks of "
        "memory_remember. Without --apply nothing is written and each line says what would "
        "happen. Archived records are left out; an identical memory is kept as it is.",
    )
    importing.add_argument("file", type=Path, metavar="FILE", help="a JSON-lines file")
    importing.add_argument(
        "--apply", action="store_true", help="write the new memories (never overwrites)"
    )


def _console_parser(commands: Any) -> None:
    console = _command(
        commands,
        "console",
        "sign in to the web console (approvals, memory, audit) with a one-time link",
        "Print a one-time sign-in link for the MyMCP console, served by the running "
        "server at http://<address>:<port>/console/, and open it in your browser. The "
        "link works once, within 5 minutes; the console session it opens lasts 8 hours. "
        "Only a person at this terminal can sign in: MCP credentials never open the "
        "console. The link's token is stored only as a SHA-256 digest, in "
        "$XDG_STATE_HOME/mymcp/console (~/.local/state/mymcp/console), which the "
        "server must share.",
    )
    console.add_argument(
        "--no-browser", action="store_true", help="only print the link; do not open a browser"
    )
    console.add_argument(
        "--sign-out-all",
        action="store_true",
        help="end every console session and void unused sign-in links, instead of signing in",
    )


def _governance_parsers(commands: Any) -> None:
    policy = _command(commands, "policy", "tool policy").add_subparsers(
        dest="policy_command", metavar="SUBCOMMAND", required=True
    )
    explain = _command(
        policy,
        "explain",
        "show which tools a principal may call and which rule decided each",
        "Evaluate [policy] for one principal against the configured tools.",
    )
    explain.add_argument(
        "--principal",
        required=True,
        metavar="PRINCIPAL",
        help="anonymous, local, operator:<subject> or oauth:<sub>",
    )
    explain.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help="an OAuth scope the principal's token carries (repeatable; oauth:* only)",
    )
    explain.add_argument("--json", action="store_true", help="print JSON")
    audit = _command(commands, "audit", "security audit log").add_subparsers(
        dest="audit_command", metavar="SUBCOMMAND", required=True
    )
    verify = _command(
        audit,
        "verify",
        "check the hash chain of the audit log (exit 1 naming the first bad record)",
        "Recompute the hash chain of every audit record, segment after segment, and "
        "print the number of records and the head hash; a record that was changed, "
        "removed or reordered is named, with exit 1.",
    )
    show = _command(audit, "show", "print audit records readably")
    show.add_argument(
        "--since",
        metavar="WHEN",
        help="only records at or after WHEN: RFC 3339 time, a date, or 30m / 2h / 7d ago",
    )
    show.add_argument("--tool", metavar="NAME", help="only calls of this public tool name")
    show.add_argument("--principal", metavar="P", help="only this principal (e.g. operator:alice)")
    show.add_argument("--event", metavar="EVENT", help="only this event (tool_call, ...)")
    show.add_argument(
        "--limit", type=_positive, metavar="N", help="only the last N matching records"
    )
    show.add_argument("--json", action="store_true", help="print one JSON record per line")
    for sub in (verify, show):
        sub.add_argument(
            "--directory",
            type=Path,
            help="audit directory (default: [audit] directory, or ~/.local/state/mymcp/audit)",
        )


def _begin_logging(args: argparse.Namespace) -> StderrLines:
    """Logging from the first line on, held until the configuration says its format."""
    return configure_logging(log_settings(args.log_level, args.log_format), held=True)


def _settle_logging(
    handler: StderrLines, args: argparse.Namespace, server: ServerSettings | None = None
) -> None:
    configured = None if server is None else LogSettings(server.log_level, server.log_format)
    handler.settle(log_settings(args.log_level, args.log_format, configured=configured))


def _refused_log_environment(args: argparse.Namespace) -> int | None:
    """Exit 1 with the diagnostic when a log variable the command would read names no
    level or format (checked first: every later line depends on it), else None."""
    try:
        log_settings(args.log_level, args.log_format)
    except ConfigurationError as exc:
        return _fail(exc)
    return None


def _fail(exc: MyMCPError) -> int:
    """Print the whole diagnostic: this is the operator's own terminal."""
    print(f"mymcp: error: {exc}", file=sys.stderr)
    return EXIT_FAILURE


def _leave_on_sigterm(signum: int, frame: object) -> None:
    # uvicorn shuts down gracefully on SIGTERM (what systemd and launchd send), then
    # raises it again for the handler it found: the default one would end the process
    # before its exit handlers (the memory index snapshot) run. Leave as an interrupt does.
    raise SystemExit(EXIT_OK)


def serve(
    limits: ConnectionLimits | None = None,
    args: argparse.Namespace | None = None,
) -> int:
    """Build the host and serve it until interrupted or terminated (exit 0 either way);
    exit 1 before binding on failure."""
    import signal

    import uvicorn

    signal.signal(signal.SIGTERM, _leave_on_sigterm)

    from mymcp.app import create_host_app
    from mymcp.runtime.bootstrap import build_host
    from mymcp.transport import DEFAULT_CONNECTION_LIMITS

    args = args or _parser().parse_args([])
    logs = _begin_logging(args)
    try:
        host = build_host()
    except MyMCPError as exc:
        _settle_logging(logs, args)
        return _fail(exc)
    server = host.configuration.server
    _settle_logging(logs, args, server)
    app = create_host_app(host)
    # Logging is configured above, so uvicorn must not install its own; the `mcp` logger
    # already records each request, so its access log would only repeat it.
    try:
        uvicorn.run(
            app,
            host=server.address,
            port=server.port,
            log_config=None,
            access_log=False,
            **(limits or DEFAULT_CONNECTION_LIMITS).uvicorn_options(),
        )
    except SystemExit as leaving:  # SIGTERM, once uvicorn has stopped serving
        if leaving.code != EXIT_OK:
            raise
    return _ending(EXIT_OK)


def _ending(status: int) -> int:
    """`status`, once nothing keeps the process from ending normally.

    A plugin's synchronous handler that a cancelled call left running cannot be stopped
    (it is a thread), and the interpreter would wait for it at exit for good. Such
    threads get a moment to return; then the exit handlers run (the memory index
    snapshot, the log) and the process ends without them.
    """
    current = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not current and not t.daemon]
    deadline = time.monotonic() + _HANDLER_GRACE_SECONDS
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = sum(thread.is_alive() for thread in others)
    if not running:
        return status
    logging.getLogger("mymcp").warning("exit outcome=handlers_left_running count=%d", running)
    atexit._run_exitfuncs()
    os._exit(status)


def stdio(args: argparse.Namespace) -> int:
    """Build the host and serve it over stdin/stdout until stdin ends."""
    import anyio

    from mymcp.app import serve_stdio
    from mymcp.runtime.bootstrap import build_host

    streams = _message_streams()
    if streams is None:
        if sys.stderr is not None:  # with no stderr, a print would go to the client's stdout
            print("mymcp: error: stdio needs an open standard input and output", file=sys.stderr)
        return EXIT_FAILURE
    requests, replies = streams
    logs = _begin_logging(args)
    # `requests` stays open: on a signal its reader thread may still be blocked in a read,
    # and closing a file under a read waits for that read to end.
    with replies:
        try:
            host = build_host()
        except MyMCPError as exc:
            _settle_logging(logs, args)
            return _fail(exc)
        _settle_logging(logs, args, host.configuration.server)
        anyio.run(serve_stdio, host, requests, replies)
    return _ending(EXIT_OK)


def _message_streams() -> tuple[BinaryIO, BinaryIO] | None:
    """Private copies of stdin and stdout for the protocol's messages, or None when either
    is closed.

    The standard descriptors then point elsewhere, stdin at /dev/null and stdout at
    stderr, so nothing else in the process (a plugin printing, reading input or importing
    something that does, a library's warning) can read from or write into the message
    streams; and the interpreter's own stdin is never the file a reader thread is
    blocked in when the process ends.
    """
    try:
        for descriptor in (0, 1, 2):
            os.fstat(descriptor)
    except OSError:
        return None
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return requests, replies


def _check(args: argparse.Namespace) -> int:
    """Compose everything the server would, without serving or creating files, and say
    what was found; the first fault ends the check with its diagnostic and exit 1."""
    from mymcp.governance import audit_directory, check_audit_directory
    from mymcp.runtime.bootstrap import build_host

    logs = _begin_logging(args)
    try:
        host = build_host(with_audit=False)
        configuration = host.configuration
        directory = audit_directory(configuration) if configuration.audit.enabled else None
        # The checks the start makes, read-only: a directory the server would refuse
        # fails the check too.
        exists = directory is not None and check_audit_directory(directory)
    except MyMCPError as exc:
        _settle_logging(logs, args)
        return _fail(exc)
    _settle_logging(logs, args, configuration.server)
    source = configuration.source or "none (built-in defaults)"
    print(f"configuration: {source} (schema {configuration.schema_version})")
    enabled = [plugin for plugin in configuration.plugins if plugin.enabled]
    print("plugins: " + (", ".join(f"{p.id} (module {p.module})" for p in enabled) or "none"))
    print(f"tools: {', '.join(host.runtime.registry.names)}")
    print(f"authentication: {_authentication_summary(configuration.authentication)}")
    policy = configuration.policy
    if policy is None:
        print("policy: none (every principal may call every tool)")
    else:
        print(f"policy: default {policy.default}, {len(policy.rules)} rule(s)")
    if directory is None:
        print("audit: off")
    else:
        state = "exists" if exists else "created at first start"
        print(f"audit: on, {directory} ({state})")
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
        return _fail(exc)
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
    from mymcp.config import load_host_configuration
    from mymcp.runtime import preflight_manifest

    try:
        definition = preflight_manifest(manifest.absolute())
    except MyMCPError as exc:
        return _fail(exc)
    tools = ", ".join(c.local_id for c in definition.capabilities)
    print(f"mymcp: manifest OK: {definition.plugin_id} {definition.version}; tools: {tools}")
    if module is not None:
        return _check_plugin_module(module, definition)
    refusals = _naming_refusals(definition)
    if not refusals:
        return EXIT_OK  # the names bind either way: the entry does not matter
    try:
        binding = _declared_binding(definition, load_host_configuration())
    except ConfigurationError:
        binding = None
        print(
            "mymcp: note: the host configuration does not load (`mymcp check` says why), "
            "so the tool names were judged as if the plugin had no [[plugins]] entry",
            file=sys.stderr,
        )
    return EXIT_OK if _tool_names_bind(refusals, binding) else EXIT_FAILURE


def _declared_binding(definition: PluginDefinition, configuration: HostConfiguration) -> str | None:
    """The binding of the plugin's [[plugins]] entry; None when it has none."""
    for declaration in configuration.plugins:
        if declaration.id == definition.plugin_id:
            return declaration.binding
    return None


def _tool_names_bind(refusals: Mapping[str, MyMCPError], binding: str | None) -> bool:
    """Whether the plugin's tools can be published under `binding` (None: the plugin has
    no [[plugins]] entry, so the default, namespaced), given what the start refuses under
    each binding. A refusal under that binding fails the check with the start's own
    line; without an entry, what local binding would refuse is a warning."""
    if binding is None and "local" in refusals:
        print(
            f'mymcp: warning: declared with binding = "local", it would not start: '
            f"{refusals['local']}",
            file=sys.stderr,
        )
    refusal = refusals.get(binding or "namespaced")
    if refusal is not None:
        _fail(refusal)
        return False
    return True


def _naming_refusals(definition: PluginDefinition) -> dict[str, MyMCPError]:
    """What the start refuses the plugin's tool names for, by binding: the start's own
    checks (a name reserved for the host, outside MCP's alphabet or too long, or taken by
    a Mnemosyne tool), over Mnemosyne's tools and the plugin's. (A clash with another
    locally bound plugin needs that plugin's manifest too: `mymcp check` reads them all.)"""
    from mymcp.plugin import QualifiedCapabilityId
    from mymcp.plugins.mnemosyne import mnemosyne_manifest
    from mymcp.runtime.bootstrap import binding_policy, refuse_declared_names

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
    check_plugin_configuration({}, definition, "plugins[?]", configuration.source)
    return {}, "none"


def _check_plugin_module(module: str, definition: PluginDefinition) -> int:
    """Errors (the server would refuse the plugin) fail the check, portability problems
    warn. Every mismatch is printed, not only the first. A host configuration that does
    not load fails the check: the server would not start with it either."""
    from mymcp.config import load_host_configuration
    from mymcp.runtime import import_external_plugin, lint_input_schema, mismatch_diagnostics

    try:
        configuration = load_host_configuration()
    except ConfigurationError as exc:
        _fail(exc)
        print(
            "mymcp: note: --import gives the plugin the values of its [[plugins]] entry, "
            "so the host configuration must load; the module was not imported",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    binding = _declared_binding(definition, configuration)
    if not _tool_names_bind(_naming_refusals(definition), binding):
        return EXIT_FAILURE
    try:
        values, origin = _declared_configuration(definition, configuration)
        adapter = import_external_plugin(module, definition, values)
    except MyMCPError as exc:
        return _fail(exc)
    errors = 0
    for mismatch in mismatch_diagnostics(module, adapter, definition):
        errors += 1
        print(f"mymcp: error: {mismatch.render()}", file=sys.stderr)
    for tool in adapter.contribution.tools:
        for finding in lint_input_schema(tool.tool.get("inputSchema")):
            errors += finding.severity == "error"
            print(
                f"mymcp: {finding.severity}: tool {tool.capability.local_id}: "
                f"{finding.message} (code={finding.code})",
                file=sys.stderr,
            )
    if errors:
        return EXIT_FAILURE
    print(
        f"mymcp: module OK: {module}; it matches its manifest (configuration: {origin}) and "
        "every tool schema compiles under JSON Schema 2020-12"
    )
    return EXIT_OK


def _verifier_path(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit.absolute()
    from mymcp.config import load_host_configuration

    return load_host_configuration().authentication.operator_bearer_verifier_path


def _token(args: argparse.Namespace) -> int:
    from mymcp.auth import create_token, list_credentials, revoke_token

    try:
        path = _verifier_path(args.verifier_file)
        if path is None:
            print(
                "mymcp: error: no verifier file: set authentication.operator_bearer."
                "verifier_path in the host configuration or pass --verifier-file",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if args.action == "create":
            token, credential_id = create_token(path, args.subject)
            print(f"credential id: {credential_id}", file=sys.stderr)
            print("The token is shown once; restart the server to use it.", file=sys.stderr)
            print(token)
        elif args.action == "list":
            for credential_id, subject in list_credentials(path):
                print(f"{credential_id}\t{subject}")
        elif not revoke_token(path, args.credential_id):
            print("mymcp: error: no credential with that id", file=sys.stderr)
            return EXIT_FAILURE
        else:
            print("revoked; restart the server for it to take effect", file=sys.stderr)
    except MyMCPError as exc:
        return _fail(exc)
    return EXIT_OK


_PRINCIPAL_NAME = re.compile(r"anonymous|local|(operator|oauth):.+")


def _policy_explain(args: argparse.Namespace) -> int:
    from mymcp.auth import is_scope_token, is_valid_subject
    from mymcp.config import load_host_configuration, locate_in_configuration, validate_semantics
    from mymcp.governance import Policy
    from mymcp.plugins.mnemosyne import create_mnemosyne, load_mnemosyne_settings
    from mymcp.runtime.bootstrap import build_runtime

    name: str = args.principal
    kind, _, subject = name.partition(":")
    # Only principals a caller can be: a subject is checked as authentication checks it,
    # and a `*` would be a rule's pattern, not a principal.
    valid = _PRINCIPAL_NAME.fullmatch(name) and "*" not in name
    if not valid or (subject and not is_valid_subject(subject)):
        print(
            "mymcp: error: --principal must be anonymous, local, operator:<subject> or "
            f"oauth:<sub>, a subject being visible text of at most 256 characters "
            f"(got {name[:300]!r})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.scope and kind != "oauth":
        print("mymcp: error: --scope applies only to oauth:<sub> principals", file=sys.stderr)
        return EXIT_USAGE
    for scope in args.scope:
        if not is_scope_token(scope):
            shown = scope[:140]
            print(f"mymcp: error: --scope {shown!r} is no OAuth scope token", file=sys.stderr)
            return EXIT_USAGE
    try:
        configuration = load_host_configuration()
        validate_semantics(configuration)
        runtime = build_runtime(configuration, create_mnemosyne(load_mnemosyne_settings()))
    except MyMCPError as exc:
        return _fail(exc)
    try:
        policy = Policy(configuration.policy, runtime)
    except MyMCPError as exc:
        locate_in_configuration(exc, configuration.source)
        return _fail(exc)
    view = policy.view(name, frozenset(args.scope))
    rows = [
        {
            "name": tool,
            "allowed": decision.allowed,
            "via": decision.via,
            "rule": decision.rule,
            "selector": decision.selector,
        }
        for tool, decision in view.decisions.items()
    ]
    order = {tool.name: index for index, tool in enumerate(runtime.registry)}
    rows.sort(key=lambda row: (not row["allowed"], order[str(row["name"])]))
    settings = configuration.policy
    if args.json:
        document = {
            "principal": name,
            "scopes": sorted(args.scope),
            "policy": None if settings is None else {"default": settings.default},
            "tools": rows,
        }
        print(json.dumps(document, indent=2))
        return EXIT_OK
    scopes = " ".join(sorted(args.scope)) or "(none)"
    summary = "none (every tool allowed)"
    if settings is not None:
        summary = f"default {settings.default}, {len(settings.rules)} rule(s)"
    print(f"principal: {name}   scopes: {scopes}")
    print(f"policy: {summary}")
    for allowed, heading in ((True, "may call"), (False, "may not call")):
        chosen = [row for row in rows if row["allowed"] is allowed]
        print(f"\n{heading}:" + ("" if chosen else " (nothing)"))
        width = max((len(str(row["name"])) for row in chosen), default=0)
        for row in chosen:
            print(f"  {str(row['name']).ljust(width)}  {_reason(row)}")
    return EXIT_OK


def _reason(row: dict[str, Any]) -> str:
    via = row["via"]
    if via == "host":
        return "always allowed"
    if via == "unrestricted":
        return "no [policy]"
    if via == "default":
        return f"policy default ({'allow' if row['allowed'] else 'deny'})"
    return f"policy.rules[{row['rule']}] {via} {row['selector']!r}"


def _audit_path(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit.absolute()
    from mymcp.config import load_host_configuration
    from mymcp.governance import audit_directory

    return audit_directory(load_host_configuration())


_RELATIVE = re.compile(r"([1-9][0-9]{0,5})([mhd])")


def _parse_since(text: str, now: datetime) -> datetime | None:
    relative = _RELATIVE.fullmatch(text)
    if relative is not None:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[relative.group(2)]
        return now - timedelta(**{unit: int(relative.group(1))})
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _audit(args: argparse.Namespace) -> int:
    from mymcp.governance import read_records, verify_audit

    try:
        directory = _audit_path(args.directory)
    except MyMCPError as exc:
        return _fail(exc)
    if not directory.is_dir():
        print(f"mymcp: error: no audit directory at {directory}", file=sys.stderr)
        return EXIT_FAILURE
    if args.audit_command == "verify":
        result = verify_audit(directory)
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        if not result.ok:
            print(f"mymcp: audit chain broken: {result.problem}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"ok records={result.records} segments={result.segments} head={result.head_hash}")
        return EXIT_OK
    since = None
    if args.since is not None:
        since = _parse_since(args.since, datetime.now(UTC))
        if since is None:
            print(
                "mymcp: error: --since takes an RFC 3339 time, a date (2026-12-01) "
                "or an age such as 30m, 2h, 7d",
                file=sys.stderr,
            )
            return EXIT_USAGE
    records = [
        record
        for record in read_records(directory)
        if (args.tool is None or record.get("tool") == args.tool)
        and (args.principal is None or record.get("principal") == args.principal)
        and (args.event is None or record.get("event") == args.event)
        and (since is None or _record_time(record) >= since)
    ]
    if args.limit is not None:
        records = records[-args.limit :] if args.limit > 0 else []
    for record in records:
        print(json.dumps(record, sort_keys=True) if args.json else _readable(record))
    return EXIT_OK


def _record_time(record: dict[str, Any]) -> datetime:
    try:
        return datetime.fromisoformat(str(record.get("time", "")).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


_SHOWN_ELSEWHERE = frozenset(
    {"seq", "time", "event", "principal", "tool", "decision", "outcome", "duration_ms"}
    | {"prev", "hash", "session", "args_digest", "call"}
)


def _readable(record: dict[str, Any]) -> str:
    parts = [str(record.get("time", "?")), f"#{record.get('seq')}", str(record.get("event"))]
    for key in ("principal", "tool"):
        if record.get(key) is not None:
            parts.append(str(record[key]))
    if "decision" in record:
        decision = str(record["decision"])
        if "outcome" in record:
            decision += f" -> {record['outcome']} ({record.get('duration_ms')} ms)"
        parts.append(decision)
    extra = {key: value for key, value in record.items() if key not in _SHOWN_ELSEWHERE}
    parts.extend(f"{key}={value}" for key, value in sorted(extra.items()))
    # A principal comes from a token's subject and a record from a file on disk: neither
    # may send the terminal a control sequence.
    return escape_invisible("  ".join(parts))


def _console(args: argparse.Namespace) -> int:
    import time
    import webbrowser

    import httpx

    from mymcp.config import load_host_configuration
    from mymcp.console import SIGN_IN_TTL_SECONDS, console_state_directory, issue_sign_in
    from mymcp.console import sign_out_all as end_console_sessions

    try:
        directory = console_state_directory()
        if args.sign_out_all:
            end_console_sessions(directory)
            print(
                "Signed out every console session; unused sign-in links no longer work.",
                file=sys.stderr,
            )
            return EXIT_OK
        server = load_host_configuration().server
        token = issue_sign_in(directory, now=time.time())
    except MyMCPError as exc:
        return _fail(exc)
    host = f"[{server.address}]" if ":" in server.address else server.address
    origin = f"http://{host}:{server.port}"
    url = f"{origin}/console/sign-in?token={token}"
    minutes = SIGN_IN_TTL_SECONDS // 60
    print(
        f"Sign in to the MyMCP console with this link (once, within {minutes} minutes):",
        file=sys.stderr,
    )
    print(url, flush=True)
    try:
        httpx.get(f"{origin}/health", timeout=2.0, trust_env=False)  # loopback, no proxy
    except httpx.HTTPError:
        print(f"note: no server answers at {origin} yet; start it with `mymcp`.", file=sys.stderr)
    if not args.no_browser:
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
        if not opened:
            print("No browser could be opened: copy the link into one.", file=sys.stderr)
    return EXIT_OK


def _plugin(args: argparse.Namespace) -> int:
    return _plugin_check(args.manifest, args.module)


def _memory(args: argparse.Namespace) -> int:
    from mymcp.plugins.mnemosyne._commands import run_memory_command

    return run_memory_command(args)


_COMMANDS: Final[Mapping[str, Callable[[argparse.Namespace], int]]] = {
    "check": _check,
    "plugin": _plugin,
    "policy": _policy_explain,
    "audit": _audit,
    "console": _console,
    "memory": _memory,
    "auth": _token,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp`."""
    args = _parser().parse_args(argv)
    refusal = _refused_log_environment(args)
    if refusal is not None:
        return refusal
    if args.command in (None, "serve"):
        return serve(args=args)
    if args.command == "stdio":
        return stdio(args)
    if args.command != "check":
        # Every line comes out in the one format from the first on, before any file is
        # read; these short commands log only warnings and errors (a broken configuration,
        # a skipped memory file) unless the command line or the environment asks for more.
        configure_logging(
            log_settings(args.log_level, args.log_format, configured=LogSettings("warning"))
        )
    return _until_the_reader_leaves(_COMMANDS[args.command], args)


def _until_the_reader_leaves(command: Callable[[argparse.Namespace], int], args: Any) -> int:
    """Run a command whose output may be piped into a reader that stops early
    (`mymcp memory list project | head -1`): then it stops quietly, with the status of a
    writer ended by SIGPIPE, instead of a traceback."""
    try:
        status = command(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The interpreter flushes stdout once more at exit; let that go nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return status


def dev_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp-dev`: validate, then serve with uvicorn's reloader."""
    parser = argparse.ArgumentParser(
        prog="mymcp-dev",
        description="Serve MyMCP with auto-reload (development only).",
        parents=[_logging_options(top_level=True)],
    )
    parser.add_argument("--version", action="version", version=f"mymcp {__version__}")
    args = parser.parse_args(argv)
    refusal = _refused_log_environment(args)
    if refusal is not None:
        return refusal
    import uvicorn

    from mymcp.config import load_host_configuration, validate_semantics
    from mymcp.transport import DEFAULT_CONNECTION_LIMITS

    logs = _begin_logging(args)
    try:
        configuration = load_host_configuration()
        validate_semantics(configuration)
    except MyMCPError as exc:
        _settle_logging(logs, args)
        return _fail(exc)
    server = configuration.server
    _settle_logging(logs, args, server)
    configured = LogSettings(server.log_level, server.log_format)
    # Watch the package itself, not whatever directory the command was started from.
    package = str(Path(__file__).resolve().parent)
    uvicorn.run(
        "mymcp.app:create_production_app",
        factory=True,
        reload=True,
        reload_dirs=[package],
        host=server.address,
        port=server.port,
        # The reload worker is a fresh process that never runs this launcher's setup, so
        # uvicorn applies the same handler there from this document.
        log_config=uvicorn_log_config(
            log_settings(args.log_level, args.log_format, configured=configured)
        ),
        access_log=False,
        **DEFAULT_CONNECTION_LIMITS.uvicorn_options(),
    )
    return EXIT_OK


def selftest_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp-test`: run the test suite of the source checkout this package
    is installed from (editable installs), from whatever directory it is started in.

    Arguments go to pytest; without any, the whole suite runs.
    """
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("mymcp-test needs the test extra: pip install 'mymcp[test]'", file=sys.stderr)
        return EXIT_FAILURE
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "tests").is_dir() or not (checkout / "pyproject.toml").is_file():
        print(
            f"mymcp-test: no test suite next to the installed package ({checkout}); it runs "
            "the tests of a source checkout installed with pip install -e '.[test]'",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    args = list(argv if argv is not None else sys.argv[1:])
    return subprocess.call(
        [sys.executable, "-m", "pytest", *args], cwd=checkout, env=os.environ.copy()
    )


if __name__ == "__main__":
    raise SystemExit(main())
