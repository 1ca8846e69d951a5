"""The launchers' logging: one stderr handler for MyMCP's lines and uvicorn's, in one format.

Every line carries a UTC timestamp, the level and the logger:

    2026-12-01T08:25:59.123Z INFO mcp request id=1 method=tools/call tool=memory_recall

or, with `--log-format json`, one JSON object per line with `time`, `level`, `logger` and
`message`. The level and format come from the command line, then `MYMCP_LOG_LEVEL` /
`MYMCP_LOG_FORMAT`, then `[server] log_level` / `log_format`, then `info` / `text`. An
environment variable that names no level or format stops the command with a diagnostic
naming it, like every other invalid setting.

At `info` (the default) MyMCP's loggers and uvicorn's lifecycle lines speak at INFO and
every other library at WARNING, so an HTTP client library never logs the issuer or JWKS
URLs it fetches. An exception becomes its type on the record's own line, because
tracebacks carry install paths and, in messages, request content; `debug` lifts all of
that, for every logger.

Each request writes two lines, and a stream handler spends more on its formatter, its text
layer and one write system call per line than on the record itself. So a line here is one
f-string, and the per-request lines (INFO and below from `mcp` and its children) emitted on
the event loop are collected for at most 20 ms and written together. While this handler
is the only one, those lines skip the record and the logging module's dispatch as well
(`direct_handler`, `StderrLines.write_line`): that halves what logging costs a request.
Every other line is written at once, after any pending ones: warnings, startup, and the
shutdown lines, which uvicorn writes just before it re-raises the signal that stopped it.

The event loop never waits for stderr: a batch is written by a writer thread, so a
client that starts the server and never reads its stderr pipe cannot stop it answering
or stopping once the pipe is full. While stderr takes nothing, at most a megabyte of
lines waits; later ones are dropped, and a `log outcome=lines_dropped count=N` line says
so once stderr takes text again.

A plugin may write to stderr too (a `print`, which `mymcp stdio` sends there, a
library writing to the descriptor itself), and would wait for a full pipe like anyone
else: a handler on the event loop would stop the whole process. So while `mymcp stdio`
serves, `divert_standard_streams` points descriptors 1 and 2 at a pipe of its own, which
a thread empties into the same bounded backlog as the log lines, each line of it a line
of the `output` logger.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import os
import secrets
import selectors
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TextIO

from mymcp.errors import ConfigurationError, Location, shown

__all__ = [
    "LEVEL_VARIABLE",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "FORMAT_VARIABLE",
    "LogSettings",
    "StderrLines",
    "class_name",
    "configure_logging",
    "direct_handler",
    "divert_standard_streams",
    "installed_handler",
    "occupy_if_closed",
    "point_at_devnull",
    "log_settings",
    "new_failure_id",
    "uvicorn_log_config",
]

LEVEL_VARIABLE: Final = "MYMCP_LOG_LEVEL"
FORMAT_VARIABLE: Final = "MYMCP_LOG_FORMAT"
LOG_LEVELS: Final[Mapping[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
LOG_FORMATS: Final = ("text", "json")
# MyMCP's own loggers and uvicorn's lifecycle lines (its "Uvicorn running on" line is the
# ready signal) follow the chosen level; every other library stays at WARNING or above.
_OWN_LOGGERS: Final = ("mymcp", "mcp", "uvicorn.error")
_BATCH_SECONDS: Final = 0.02
# Per-request text held for a stderr that takes none (a client not reading its pipe),
# and how long an ending process waits for the rest to be written.
_MAX_BACKLOG_CHARS: Final = 1 << 20
_CLOSE_SECONDS: Final = 2.0
_MILLISECONDS: Final = tuple(f".{millisecond:03d}Z" for millisecond in range(1000))


@dataclass(frozen=True, slots=True)
class LogSettings:
    level: str = "info"
    format: str = "text"


def _word(value: str | None, choices: tuple[str, ...] | Mapping[str, int]) -> str | None:
    text = (value or "").strip().lower()
    return text if text in choices else None


def _environment_word(
    env: Mapping[str, str], variable: str, choices: tuple[str, ...] | Mapping[str, int]
) -> str | None:
    """The word an environment variable names, None when it is unset or empty. A value
    that names no word is refused: a misspelt level that silently fell back to the
    default would leave the operator reading the wrong amount of log."""
    value = env.get(variable)
    if value is None or not value.strip():
        return None
    word = _word(value, choices)
    if word is None:
        words = ", ".join(choices)
        raise ConfigurationError(
            "invalid_environment",
            location=Location(source=f"${variable}"),
            detail=f"takes one of {words} (any case); found {shown(value)}",
        )
    return word


def log_settings(
    level: str | None = None,
    log_format: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    configured: LogSettings | None = None,
) -> LogSettings:
    """The effective settings: the command line, then the environment, then the
    configuration file's `[server]` keys, then `info` / `text`. An empty environment
    variable counts as unset; one that names no level or format, when it is consulted,
    raises `ConfigurationError("invalid_environment")` naming it."""
    env = os.environ if environ is None else environ
    fallback = configured or LogSettings()
    return LogSettings(
        level=_word(level, LOG_LEVELS)
        or _environment_word(env, LEVEL_VARIABLE, LOG_LEVELS)
        or fallback.level,
        format=(
            _word(log_format, LOG_FORMATS)
            or _environment_word(env, FORMAT_VARIABLE, LOG_FORMATS)
            or fallback.format
        ),
    )


class StderrLines(logging.Handler):
    """Writes each record as one line on stderr, per-request lines batched (see above).

    While `held`, records are kept rather than written, so the lines logged before the
    configuration file says which format to use come out in that format (`settle`).
    """

    def __init__(self, settings: LogSettings = LogSettings(), *, held: bool = False) -> None:
        super().__init__()
        self._second = -1
        self._prefix = ""
        self._json = False
        self._tracebacks = False
        self._pending: list[str] = []
        # Text for the writer thread, which alone may wait for stderr (see `_hand_over`).
        self._backlog: list[str] = []
        self._backlog_chars = 0
        self._dropped = 0
        self._busy = False
        self._writer: threading.Thread | None = None
        self._wake = threading.Condition(self.lock)
        self._held: list[logging.LogRecord] | None = [] if held else None
        self._stream: TextIO | None = None  # where lines go instead of `sys.stderr`
        self._traceback_formatter = logging.Formatter()
        self.apply(settings)

    def apply(self, settings: LogSettings) -> None:
        self._json = settings.format == "json"
        self._tracebacks = settings.level == "debug"

    def settle(self, settings: LogSettings) -> None:
        """Adopt the final settings and write what was held, at the final level."""
        self.apply(settings)
        _set_levels(settings)
        held, self._held = self._held or [], None
        for record in held:
            if logging.getLogger(record.name).isEnabledFor(record.levelno):
                self.handle(record)

    def line(self, record: logging.LogRecord) -> str:
        if not (record.exc_info or record.stack_info):
            return self._line(record.created, record.levelname, record.name, record.getMessage())
        message = record.getMessage()
        traceback = ""
        if not self._tracebacks:
            # Below debug an exception is its type on the record's own line: tracebacks
            # carry install paths and, in messages, request content.
            if record.exc_info:
                error = record.exc_info[0]
                message += f" error_type={error.__name__ if error else 'unknown'}"
        else:
            if record.exc_info:
                traceback = self._traceback_formatter.formatException(record.exc_info)
            if record.stack_info:
                traceback += self._traceback_formatter.formatStack(record.stack_info)
        return self._line(record.created, record.levelname, record.name, message, traceback)

    def _line(
        self, created: float, level: str, logger: str, message: str, traceback: str = ""
    ) -> str:
        """`2026-12-01T08:25:59.123Z INFO mcp message`, or its JSON object. The part of
        the time up to the second is formatted once per second and the milliseconds come
        from a table: this runs twice per request."""
        second = int(created)
        if second != self._second:
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        stamp = self._prefix + _MILLISECONDS[int((created - second) * 1000)]
        if self._json:
            document = {"time": stamp, "level": level, "logger": logger, "message": message}
            if traceback:
                document["traceback"] = traceback
            return json.dumps(document, ensure_ascii=False) + "\n"
        if traceback:
            message = f"{message}\n{traceback}"
        return f"{stamp} {level} {logger} {message}\n"

    def emit(self, record: logging.LogRecord) -> None:
        if self._held is not None:
            self._held.append(record)
            return
        try:
            line = self.line(record)
        except Exception:
            self.handleError(record)
            return
        self._enqueue(line, _batched(record.name, record.levelno))

    def write_line(self, logger: str, level: int, message: str) -> None:
        """Write what `emit` writes for a record of `logger` at `level` with `message`,
        without the record: for the lines of every request, when `direct_handler`
        found that this handler alone takes them."""
        created, name = time.time(), logging.getLevelName(level)
        # Held as `handle` holds it around `emit`: the stamp's cached second and the
        # pending lines are shared with other threads' lines (and their flushes).
        self.acquire()
        try:
            self._enqueue(self._line(created, name, logger, message), _batched(logger, level))
        finally:
            self.release()

    def _enqueue(self, line: str, batched: bool) -> None:
        loop = _running_loop() if batched else None
        if loop is None:
            self._pending.append(line)
            self.flush()
            return
        if not self._pending:
            loop.call_later(_BATCH_SECONDS, self.flush)
        self._pending.append(line)

    def flush(self) -> None:
        with self._wake:
            if not self._pending:
                return
            text = "".join(self._pending)
            self._pending = []
            # Only the main thread of a process that never served (a command, a start
            # that failed) writes itself: the loop must never wait for stderr, nor may a
            # worker thread holding this lock, which the loop's lines need. Once a writer
            # thread exists, every line goes through it, in order, and an ending process
            # waits for it only so long (`close`).
            alone = threading.current_thread() is threading.main_thread()
            if alone and self._writer is None and _running_loop() is None:
                _write_stderr(text, self._stream)
            else:
                self._hand_over(text)

    def pass_through(self, lines: list[str]) -> None:
        """Write lines that are no log records (what a plugin wrote to stdout or stderr)
        in their place among the others, each as a line of the `output` logger in the
        chosen format (so that JSON lines stay JSON), by the writer thread."""
        created = time.time()
        with self._wake:
            if self._pending:
                self._hand_over("".join(self._pending))
                self._pending = []
            self._hand_over("".join(self._line(created, "INFO", "output", line) for line in lines))

    def write_to(self, stream: TextIO | None) -> None:
        """Write lines to `stream` from now on (None: to `sys.stderr`)."""
        with self._wake:
            self._stream = stream

    def _hand_over(self, text: str) -> None:
        """Give `text` to the writer thread (the lock is held). Past a bound, while
        stderr takes nothing, lines are dropped and counted, and the count is written
        once it takes text again."""
        if self._backlog_chars + len(text) > _MAX_BACKLOG_CHARS:
            self._dropped += text.count("\n") or 1  # a plugin's text may end mid-line
            return
        self._backlog.append(text)
        self._backlog_chars += len(text)
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write_backlog, name="mymcp-log", daemon=True
            )
            self._writer.start()
        self._wake.notify_all()

    def _write_backlog(self) -> None:
        while True:
            with self._wake:
                self._busy = False
                self._wake.notify_all()
                self._wake.wait_for(lambda: bool(self._backlog or self._dropped))
                self._busy = True
                text = "".join(self._backlog)
                self._backlog, self._backlog_chars = [], 0
                if self._dropped:
                    note = f"log outcome=lines_dropped count={self._dropped}"
                    text += self._line(time.time(), "WARNING", "mymcp", note)
                    self._dropped = 0
                stream = self._stream
            _write_stderr(text, stream)

    def close(self) -> None:
        """Give the writer thread a moment to write what it holds (the process is ending:
        a stderr that takes nothing must not keep it from ending)."""
        with self._wake:
            self._wake.wait_for(lambda: not (self._busy or self._backlog), _CLOSE_SECONDS)
        super().close()


def _write_stderr(text: str, stream: TextIO | None = None) -> None:
    if stream is None:
        stream = sys.stderr
    if stream is None:  # started with stderr closed: nothing to report to
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # closed or gone meanwhile
        pass


_RELAY_CHUNK: Final = 1 << 16
_RELAY_JOIN_SECONDS: Final = 1.0


@contextmanager
def divert_standard_streams(handler: StderrLines) -> Iterator[None]:
    """While inside, whatever anything writes to descriptors 1 and 2 goes through
    `handler`'s backlog (bounded, never waiting for stderr), and the handler writes to a
    private copy of the real stderr. Afterwards both point where they did before (a
    command's report still goes to its standard output; a closed one is /dev/null)."""
    import fcntl  # POSIX only, as the launchers that divert are

    for text_stream in (sys.stdout, sys.stderr):
        if text_stream is not None:  # None when the descriptor was closed at start
            with contextlib.suppress(OSError, ValueError):
                text_stream.flush()
    occupy_if_closed(1)  # the pipe opened below would take its number otherwise
    # Copies above the standard descriptors, so no redirection below can move them.
    real = fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, 3)
    before = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        stream = open(real, "w", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    except BaseException:
        os.close(real)
        os.close(before)
        raise
    handler.write_to(stream)
    # A pipe for each descriptor, so that a line one stream left unfinished is never
    # completed by what the other writes next.
    readings: list[int] = []
    relay = None
    try:
        for descriptor in (1, 2):
            reading, writing = os.pipe()
            readings.append(reading)
            os.dup2(writing, descriptor)
            os.close(writing)
        thread = threading.Thread(
            target=_relay, args=(tuple(readings), handler), name="mymcp-output", daemon=True
        )
        thread.start()
        relay = thread  # only a started relay closes the read ends, and is waited for
        yield
    finally:
        for text_stream in (sys.stdout, sys.stderr):
            if text_stream is not None:
                with contextlib.suppress(OSError, ValueError):  # closed, or the pipe is gone
                    text_stream.flush()
        # The pipes' writing ends close here (unless a child process still holds one),
        # so the relay reads to the end of what was written and stops.
        os.dup2(before, 1)
        os.dup2(real, 2)
        os.close(before)
        if relay is not None:
            relay.join(_RELAY_JOIN_SECONDS)
        else:  # the relay, which closes them, never started
            for reading in readings:
                os.close(reading)


def occupy_if_closed(descriptor: int) -> None:
    """Point a closed standard `descriptor` at /dev/null. Left closed, the next file or
    socket opened would take its number, and whatever is later pointed at that number
    (the diversion of the standard streams) would take that file's place."""
    try:
        os.fstat(descriptor)
    except OSError:
        point_at_devnull(descriptor)


def point_at_devnull(descriptor: int) -> None:
    """Make `descriptor` /dev/null, so that no file opened later takes its number."""
    null = os.open(os.devnull, os.O_RDWR)
    if null != descriptor:
        os.dup2(null, descriptor)
        os.close(null)


def _relay(readings: tuple[int, ...], handler: StderrLines) -> None:
    """Hand what arrives on the pipes to `handler` line by line, each pipe's lines apart
    from the other's: a writer's buffer is flushed in blocks that end mid-line, and a
    line written between two blocks would otherwise land inside another line. A line
    longer than a chunk is cut there. Ends when every pipe is closed."""
    decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in readings}
    partials = dict.fromkeys(readings, "")
    try:
        with selectors.DefaultSelector() as selector:
            for reading in readings:
                selector.register(reading, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    reading = key.fd
                    chunk = os.read(reading, _RELAY_CHUNK)
                    decoded = decoders[reading].decode(chunk, final=not chunk)
                    *lines, partial = (partials[reading] + decoded).split("\n")
                    if len(partial) >= _RELAY_CHUNK or (partial and not chunk):
                        lines.append(partial)
                        partial = ""
                    partials[reading] = partial
                    if lines:
                        handler.pass_through(lines)
                    if not chunk:
                        selector.unregister(reading)
    except OSError:
        pass
    finally:
        for reading in readings:
            os.close(reading)


def _batched(logger: str, level: int) -> bool:
    """Whether a line waits for the next batch: the per-request lines, below WARNING."""
    return level < logging.WARNING and (logger == "mcp" or logger.startswith("mcp."))


def direct_handler(logger: logging.Logger, level: int) -> StderrLines | None:
    """The handler that alone takes `logger`'s lines at `level`, if it is this module's
    with no filter on the way and holds nothing: a line may then be written with
    `write_line`, without building a record. Any other arrangement (a handler a test or
    an embedding application added, a filter) gets records as usual. Only for loggers
    directly below the root, such as `mcp`."""
    if logger.handlers or logger.filters or not logger.propagate or logger.disabled:
        return None
    root = logger.parent
    if root is None or root.parent is not None or root.filters or len(root.handlers) != 1:
        return None
    handler = root.handlers[0]
    if type(handler) is not StderrLines or handler.filters or level < handler.level:
        return None
    return handler if handler._held is None else None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a worker thread, or no loop at all
        return None


def _set_levels(settings: LogSettings) -> None:
    level = LOG_LEVELS[settings.level]
    logging.getLogger().setLevel(_root_level(level))
    for name in _OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)


# What uvicorn writes at ERROR when a stop's grace period ends with requests still running.
_GRACE_EXCEEDED: Final = "Cancel %s running task(s), timeout graceful shutdown exceeded"


class RoutineStopLevel(logging.Filter):
    """Writes uvicorn's line about requests cancelled at the end of a stop's grace period
    as a warning, not an error. Here that is a routine end (a call still waiting for a
    person's approval, say): each such call is answered that the server is stopping and
    audited as cancelled, and a journal that shows it as a failure misleads."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _GRACE_EXCEEDED and record.levelno == logging.ERROR:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _quiet_routine_stops() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(existing, RoutineStopLevel) for existing in logger.filters):
        logger.addFilter(RoutineStopLevel())


def configure_logging(settings: LogSettings, *, held: bool = False) -> StderrLines:
    """Install the one stderr handler on the root logger (replacing any other).

    With `held`, lines are kept until `StderrLines.settle` gives the final settings.
    """
    # Skip what no line shows: threads, processes and the caller's file and line (whose
    # lookup walks the stack).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    handler = StderrLines(settings, held=held)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    _set_levels(settings)
    _quiet_routine_stops()
    # A warning (a plugin's, a library's) is a log line like any other: in the chosen
    # format, and without the file, source line and text, which may quote anything.
    warnings.showwarning = _log_warning
    return handler


def installed_handler() -> StderrLines | None:
    """The handler `configure_logging` installed, while it is still the root logger's."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, StderrLines):
            return handler
    return None


def new_failure_id() -> str:
    """An opaque id tying one logged failure to the reply its client got: the operator
    finds the line by it, and the client learns nothing else about the failure."""
    return secrets.token_hex(6)


def class_name(cls: type) -> str:
    """A class's name for a log line (an exception's, a warning's). Whoever wrote the
    class named it as they liked, and a name is no more trusted than a message: one that
    is not a plain identifier (a line break in it would forge a log line) is not written."""
    name = cls.__name__
    return name if len(name) <= 64 and name.isascii() and name.isidentifier() else "<unnamed>"


def _log_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    logger = logging.getLogger("py.warnings")
    name = class_name(category)
    if logger.isEnabledFor(logging.DEBUG):
        text = warnings.formatwarning(message, category, filename, lineno, line)
        logger.warning("python_warning category=%s\n%s", name, text.rstrip())
    else:
        logger.warning("python_warning category=%s", name)


def handler_for_uvicorn(log_level: str = "info", log_format: str = "text") -> StderrLines:
    """The handler `uvicorn_log_config` names; uvicorn builds it in each worker process."""
    return StderrLines(LogSettings(log_level, log_format))


def uvicorn_log_config(settings: LogSettings) -> dict[str, Any]:
    """A `logging.config.dictConfig` document for uvicorn's `log_config`, so a process
    uvicorn starts itself (the reloader's worker) logs exactly like the launcher."""
    level = LOG_LEVELS[settings.level]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {
            "stderr": {
                "()": f"{__name__}.handler_for_uvicorn",
                "log_level": settings.level,
                "log_format": settings.format,
            }
        },
        "filters": {"routine_stop": {"()": f"{__name__}.RoutineStopLevel"}},
        "root": {"handlers": ["stderr"], "level": _root_level(level)},
        "loggers": {
            name: {"level": level, "filters": ["routine_stop"] if name == "uvicorn.error" else []}
            for name in _OWN_LOGGERS
        },
    }


def _root_level(level: int) -> int:
    """Other libraries: WARNING, or higher when the chosen level is; everything at debug."""
    return level if level == logging.DEBUG else max(level, logging.WARNING)
