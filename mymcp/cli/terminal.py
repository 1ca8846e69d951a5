"""What the operator's terminal gets from every command: exit statuses, the one
diagnostic line of a failure, and logging that is in its final format from the first
line on."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from mymcp._escaping import escape_invisible
from mymcp.errors import ConfigurationError, MyMCPError
from mymcp.logs import (
    LogSettings,
    StderrLines,
    configure_logging,
    log_settings,
    point_at_devnull,
)

if TYPE_CHECKING:
    from mymcp.config import HostConfiguration, ServerSettings


EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer its reader left


def begin_logging(args: argparse.Namespace) -> StderrLines:
    """Logging from the first line on, held until the configuration says its format."""
    return configure_logging(log_settings(args.log_level, args.log_format), held=True)


def settle_logging(
    handler: StderrLines, args: argparse.Namespace, server: ServerSettings | None = None
) -> None:
    configured = None if server is None else LogSettings(server.log_level, server.log_format)
    handler.settle(log_settings(args.log_level, args.log_format, configured=configured))


def load_configuration(handler: StderrLines, args: argparse.Namespace) -> HostConfiguration | None:
    """The host configuration, its log settings applied from here on (to what a start
    that fails later logs too); None once its fault is said, in the format the command
    line and environment ask for."""
    from mymcp.config import load_host_configuration

    try:
        configuration = load_host_configuration()
    except MyMCPError as exc:
        settle_logging(handler, args)
        fail(exc)
        return None
    settle_logging(handler, args, configuration.server)
    return configuration


def refused_log_environment(args: argparse.Namespace) -> int | None:
    """Exit 1 with the diagnostic when a log variable the command would read names no
    level or format (checked first: every later line depends on it), else None."""
    try:
        log_settings(args.log_level, args.log_format)
    except ConfigurationError as exc:
        return fail(exc)
    return None


def fail(exc: MyMCPError) -> int:
    """Print the whole diagnostic: this is the operator's own terminal. On one line, as
    it is read: a detail quoting a plugin's exception, or a path, may hold a line break
    or a terminal control, which would otherwise forge a line of its own."""
    print(f"mymcp: error: {escape_invisible(str(exc))}", file=sys.stderr)
    return EXIT_FAILURE


def take_closed_stderr() -> None:
    """Point a closed (or read-only) descriptor 2 at /dev/null, before anything else
    opens a file.

    A client may start `mymcp stdio` with stderr closed: it is served, and its logs go
    nowhere. Left closed, the next file opened would get descriptor 2 and receive what
    is meant for stderr, and Python prints meant for a missing stderr on stdout, which
    carries the client's replies. A stderr opened for reading only fails every write,
    a plugin's print included.
    """
    if os.name != "posix":
        return
    import fcntl  # POSIX only

    try:
        if fcntl.fcntl(2, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
            return
        closed = False
    except OSError:
        closed = True
    point_at_devnull(2)
    if closed or sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115


def end_process(status: int, grace_seconds: float = 0.0) -> int:
    """`status`, once nothing keeps the process from ending normally.

    A thread that is no daemon keeps the interpreter from exiting until it returns: a
    plugin's handler that a cancelled call left running, or a thread a plugin started
    when it was imported and never stops (a poller, say), which would leave even
    `mymcp check` or a failed start hanging for good. Such threads get `grace_seconds`
    to return; then the exit handlers run (the memory index snapshot, the log) and the
    process ends without them.
    """
    current = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not current and not t.daemon]
    deadline = time.monotonic() + grace_seconds
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = sum(thread.is_alive() for thread in others)
    if not running:
        return status
    logging.getLogger("mymcp").warning("exit outcome=threads_left_running count=%d", running)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: nothing to keep
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(status)
