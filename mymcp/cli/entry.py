"""The entry points: `mymcp` (each command to its module), and `mymcp-test`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from mymcp.cli.checks import check_command, plugin_command
from mymcp.cli.governance import audit_command, auth_command, console_command, policy_command
from mymcp.cli.parser import SERVING_COMMANDS, build_parser
from mymcp.cli.serving import serve, stdio
from mymcp.cli.terminal import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    end_process,
    refused_log_environment,
    take_closed_stderr,
)
from mymcp.logs import LogSettings, configure_logging, log_settings


def memory_command(args: argparse.Namespace) -> int:
    from mymcp.plugins.mnemosyne._commands import run_memory_command

    return run_memory_command(args)


_COMMANDS: Final[Mapping[str, Callable[[argparse.Namespace], int]]] = {
    "check": check_command,
    "plugin": plugin_command,
    "policy": policy_command,
    "audit": audit_command,
    "console": console_command,
    "memory": memory_command,
    "auth": auth_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp`: the command's exit status, even when a plugin left a
    thread behind that would keep the process from ending."""
    take_closed_stderr()
    try:
        status = _run(argv)
    except KeyboardInterrupt:
        # Ctrl-C before a server serves (a plugin still importing, say) stops the
        # command as it stops any other, with the shell's status and no traceback.
        status = EXIT_INTERRUPTED
    return end_process(status)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace | int:
    """The command line, or the status of `--help` or `--version`, which print and
    leave: output of theirs that cannot be written says so, as any command's does."""
    parsed: list[argparse.Namespace] = []

    def parse(_: object) -> int:
        try:
            parsed.append(build_parser().parse_args(argv))
        except SystemExit as leaving:
            if leaving.code not in (0, None):  # a usage error, already said on stderr
                raise
        return EXIT_OK

    # A server may run with its standard output closed (help, if asked for, then goes
    # to stderr), which the output handling would refuse.
    status = parse(None) if sys.stdout is None else _until_the_reader_leaves(parse, None)
    return parsed[0] if parsed else status


def _run(argv: Sequence[str] | None) -> int:
    args = _parse(argv)
    if isinstance(args, int):
        return args
    refusal = refused_log_environment(args)
    if refusal is not None:
        return refusal
    if args.command in (None, "serve"):
        return serve(args=args)
    if args.command == "stdio":
        return stdio(args)
    if args.command not in SERVING_COMMANDS:
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
    writer ended by SIGPIPE, instead of a traceback. Output that cannot be written at
    all (a full disk, a closed stdout) ends it with one line saying so."""
    if sys.stdout is None:  # started with its standard output closed
        print("mymcp: error: standard output is closed; nothing can be shown", file=sys.stderr)
        return EXIT_FAILURE
    try:
        status = command(args)
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.filename is not None:  # a file the command read or wrote: its own fault
            raise
        _discard_stdout()
        reason = exc.strerror or type(exc).__name__
        print(f"mymcp: error: the output could not be written: {reason}", file=sys.stderr)
        return EXIT_FAILURE
    return status


def _discard_stdout() -> None:
    # The interpreter flushes stdout once more at exit; let that go nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


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
    checkout = Path(__file__).resolve().parents[2]  # mymcp/cli/entry.py in a checkout
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
