"""Operator commands: serve, check, plugin check and credential provisioning (D12, D16, D18)."""

from __future__ import annotations

import argparse
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
    from mymcp.runtime.bootstrap import BindingPolicy

__all__ = ["dev_main", "main", "selftest_main", "serve"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

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


def _configure_logging() -> None:
    """INFO to stderr. Thread and process fields are never formatted, so skip collecting
    them: every request writes two log records, and this is the cheap part to save."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.basicConfig(level=logging.INFO)


def _fail(exc: MyMCPError) -> int:
    print(f"mymcp: error: {exc.message} (code={exc.code})", file=sys.stderr)
    return EXIT_FAILURE


def serve(binding: BindingPolicy | None = None) -> int:
    """Build the host and serve it until interrupted; exit 1 before binding on failure."""
    import uvicorn

    from mymcp.app import create_host_app
    from mymcp.runtime.bootstrap import build_host, production_binding

    _configure_logging()
    try:
        host = build_host(binding=binding or production_binding)
    except MyMCPError as exc:
        return _fail(exc)
    app = create_host_app(host)
    server = host.configuration.server
    # The `mcp` logger already records each request; uvicorn's access log would repeat it.
    uvicorn.run(app, host=server.address, port=server.port, log_level="info", access_log=False)
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


def _plugin_check(manifest: Path) -> int:
    from mymcp.plugin import load_manifest

    try:
        definition = load_manifest(manifest.absolute())
    except MyMCPError as exc:
        return _fail(exc)
    tools = ", ".join(c.local_id for c in definition.capabilities)
    print(f"mymcp: manifest OK: {definition.plugin_id} {definition.version}; tools: {tools}")
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
        return _plugin_check(args.manifest)
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
        access_log=False,
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
