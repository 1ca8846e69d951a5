"""Operator commands: serve, check, plugin check and credential provisioning."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mymcp import __version__
from mymcp.errors import MyMCPError

if TYPE_CHECKING:
    from mymcp.plugin import PluginDefinition
    from mymcp.runtime.bootstrap import BindingPolicy
    from mymcp.transport import ConnectionLimits

__all__ = ["LOG_LEVEL_VARIABLE", "dev_main", "main", "selftest_main", "serve"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

LOG_LEVEL_VARIABLE = "MYMCP_LOG_LEVEL"
"""`MYMCP_LOG_LEVEL=debug` turns on debug logging, including full tracebacks."""
# Loggers that speak at INFO by default: MyMCP's own and uvicorn's lifecycle lines (its
# "Uvicorn running on" line is the ready signal). Everything else stays at WARNING, so
# an HTTP client library never logs the issuer or JWKS URLs it fetches.
_INFO_LOGGERS = ("mymcp", "mcp", "uvicorn.error")
_LOG_BATCH_SECONDS = 0.02

_DESCRIPTION = (
    "MyMCP: a local-first MCP host. Without a command it serves "
    "http://<address>:<port>/mcp from the host configuration "
    "($XDG_CONFIG_HOME/mymcp/config.toml, defaults 127.0.0.1:8000)."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mymcp", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"mymcp {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("serve", help="serve MCP on the configured loopback address (default)")
    commands.add_parser(
        "check",
        help="validate configuration, plugins, credentials and Mnemosyne settings; never serves",
    )
    plugin = commands.add_parser("plugin", help="plugin tools").add_subparsers(
        dest="plugin_command", metavar="SUBCOMMAND", required=True
    )
    plugin_check = plugin.add_parser("check", help="validate one plugin manifest file")
    plugin_check.add_argument("manifest", type=Path, metavar="MANIFEST")
    plugin_check.add_argument(
        "--import",
        dest="module",
        metavar="MODULE",
        help="also import MODULE, call its mymcp_plugin_v1() and lint its tool schemas",
    )
    auth = commands.add_parser("auth", help="operator credentials").add_subparsers(
        dest="auth_command", metavar="SUBCOMMAND", required=True
    )
    token = auth.add_parser("token", help="operator bearer tokens").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    create = token.add_parser("create", help="create a token, print it once, store its digest")
    create.add_argument("--subject", required=True, help="who the token authenticates")
    token.add_parser("list", help="list credential ids and subjects (never secrets)")
    revoke = token.add_parser("revoke", help="remove one credential by id")
    revoke.add_argument("credential_id", metavar="ID")
    for sub in (create, revoke, token.choices["list"]):
        sub.add_argument(
            "--verifier-file",
            type=Path,
            help="verifier file to use (default: authentication.operator_bearer.verifier_path)",
        )
    return parser


class _OneLineExceptions(logging.Filter):
    """Turns a record's traceback into its exception type on the same line.

    Tracebacks carry install paths and, in exception messages, request content; the log
    is content-free unless the operator asks for debug output.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            error_type = record.exc_info[0].__name__ if record.exc_info[0] else "unknown"
            record.msg = f"{record.getMessage()} error_type={error_type}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        record.stack_info = None
        return True


class _StderrLines(logging.Handler):
    """`LEVEL:logger:message` lines on stderr (the `logging.BASIC_FORMAT` layout).

    Every request writes two records, and a stream handler spends more on its formatter,
    its text layer and one write system call per line than on the record itself. Here a
    line is one f-string, and the per-request lines (INFO and below from `mcp` and its
    children) emitted on the event loop are collected for at most 20 ms and written
    together: under load that is one write for hundreds of lines. Every other line is
    written at once, after any pending ones: warnings, startup, and the shutdown lines,
    which uvicorn writes just before it re-raises SIGTERM and the process ends without
    running exit handlers.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
        self._pending: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.exc_info or record.stack_info:
                line = self.format(record) + "\n"  # debug output: the full traceback
            else:
                line = f"{record.levelname}:{record.name}:{record.getMessage()}\n"
        except Exception:
            self.handleError(record)
            return
        batched = record.levelno < logging.WARNING and (
            record.name == "mcp" or record.name.startswith("mcp.")
        )
        loop = _running_loop() if batched else None
        if loop is None:
            self._pending.append(line)
            self.flush()
            return
        if not self._pending:
            loop.call_later(_LOG_BATCH_SECONDS, self.flush)
        self._pending.append(line)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if not self._pending:
                return
            text = "".join(self._pending)
            self._pending = []
            try:
                sys.stderr.write(text)
                sys.stderr.flush()
            except (OSError, ValueError):  # stderr closed or gone: nothing to report to
                pass


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a worker thread, or no loop at all
        return None


def _configure_logging() -> None:
    """One stderr handler: MyMCP and uvicorn's lifecycle at INFO, other libraries at
    WARNING, exceptions on one line; `MYMCP_LOG_LEVEL=debug` lifts all of that."""
    debug = os.environ.get(LOG_LEVEL_VARIABLE, "").strip().lower() == "debug"
    # Skip what no line shows: threads, processes and the caller's file and line (whose
    # lookup walks the stack).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    handler = _StderrLines()
    if not debug:
        handler.addFilter(_OneLineExceptions())
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])
    for name in _INFO_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.INFO)


def _fail(exc: MyMCPError) -> int:
    print(f"mymcp: error: {exc.message} (code={exc.code})", file=sys.stderr)
    return EXIT_FAILURE


def serve(binding: BindingPolicy | None = None, limits: ConnectionLimits | None = None) -> int:
    """Build the host and serve it until interrupted; exit 1 before binding on failure."""
    import uvicorn

    from mymcp.app import create_host_app
    from mymcp.runtime.bootstrap import build_host, production_binding
    from mymcp.transport import DEFAULT_CONNECTION_LIMITS

    _configure_logging()
    try:
        host = build_host(binding=binding or production_binding)
    except MyMCPError as exc:
        return _fail(exc)
    app = create_host_app(host)
    server = host.configuration.server
    # Logging is configured above, so uvicorn must not install its own; the `mcp` logger
    # already records each request, so its access log would only repeat it.
    uvicorn.run(
        app,
        host=server.address,
        port=server.port,
        log_config=None,
        access_log=False,
        **(limits or DEFAULT_CONNECTION_LIMITS).uvicorn_options(),
    )
    return EXIT_OK


def _check() -> int:
    from mymcp.runtime.bootstrap import build_host

    _configure_logging()
    try:
        host = build_host()
    except MyMCPError as exc:
        return _fail(exc)
    names = ", ".join(host.runtime.registry.names)
    print(f"mymcp: configuration OK; tools: {names}")
    return EXIT_OK


def _plugin_check(manifest: Path, module: str | None) -> int:
    from mymcp.plugin import load_manifest

    try:
        definition = load_manifest(manifest.absolute())
    except MyMCPError as exc:
        return _fail(exc)
    tools = ", ".join(c.local_id for c in definition.capabilities)
    print(f"mymcp: manifest OK: {definition.plugin_id} {definition.version}; tools: {tools}")
    if module is None:
        return EXIT_OK
    return _lint_plugin_module(module, definition)


def _lint_plugin_module(module: str, definition: PluginDefinition) -> int:
    """Import the plugin as the server would and lint every tool's input schema: errors
    (the server would refuse the plugin) fail the check, portability problems warn."""
    from mymcp.runtime import activate_external_plugin, lint_input_schema

    try:
        adapter = activate_external_plugin(module, definition)
    except MyMCPError as exc:
        return _fail(exc)
    errors = 0
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
    print(f"mymcp: module OK: {module}; every tool schema compiles under JSON Schema 2020-12")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp`."""
    args = _parser().parse_args(argv)
    if args.command in (None, "serve"):
        return serve()
    if args.command == "check":
        return _check()
    if args.command == "plugin":
        return _plugin_check(args.manifest, args.module)
    return _token(args)


def dev_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp-dev`: validate, then serve with uvicorn's reloader."""
    parser = argparse.ArgumentParser(
        prog="mymcp-dev", description="Serve MyMCP with auto-reload (development only)."
    )
    parser.add_argument("--version", action="version", version=f"mymcp {__version__}")
    parser.parse_args(argv)
    import uvicorn

    from mymcp.config import load_host_configuration, validate_semantics
    from mymcp.transport import DEFAULT_CONNECTION_LIMITS

    _configure_logging()
    try:
        configuration = load_host_configuration()
        validate_semantics(configuration)
    except MyMCPError as exc:
        return _fail(exc)
    server = configuration.server
    # Watch the package itself, not whatever directory the command was started from.
    package = str(Path(__file__).resolve().parent)
    uvicorn.run(
        "mymcp.app:create_production_app",
        factory=True,
        reload=True,
        reload_dirs=[package],
        host=server.address,
        port=server.port,
        # uvicorn's own logging setup: the reload worker is a fresh process that never
        # runs this launcher's, and would otherwise log nothing at all.
        access_log=False,
        **DEFAULT_CONNECTION_LIMITS.uvicorn_options(),
    )
    return EXIT_OK


def selftest_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp-test`: run the test suite in a subprocess."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("mymcp-test needs the test extra: pip install 'mymcp[test]'", file=sys.stderr)
        return EXIT_FAILURE
    args = list(argv if argv is not None else sys.argv[1:])
    return subprocess.call([sys.executable, "-m", "pytest", "tests", *args], env=os.environ.copy())


if __name__ == "__main__":
    raise SystemExit(main())
