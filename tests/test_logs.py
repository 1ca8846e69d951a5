"""The launchers' log lines: one format with a UTC timestamp, level and logger; the
settings' order of precedence; lines held until the configuration names the format."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import logging.config
import time
import warnings
from collections.abc import Iterator
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.errors import ConfigurationError
from mymcp.logs import (
    LOG_FORMATS,
    LOG_LEVELS,
    LogSettings,
    StderrLines,
    configure_logging,
    direct_handler,
    log_settings,
    uvicorn_log_config,
)

WORDS = st.sampled_from([None, "", "loud", *LOG_LEVELS])
FORMATS = st.sampled_from([None, "", "xml", *LOG_FORMATS])


@given(WORDS, WORDS, st.sampled_from(list(LOG_LEVELS)))
def test_the_command_line_wins_then_the_environment_then_the_file(
    flag: str | None, variable: str | None, configured: str
) -> None:
    environ = {} if variable is None else {"MYMCP_LOG_LEVEL": variable}
    expected = configured
    if variable in LOG_LEVELS:
        expected = variable
    if flag in LOG_LEVELS:
        expected = flag
    elif variable == "loud":  # consulted, and names no level
        with pytest.raises(ConfigurationError) as refused:
            log_settings(flag, environ=environ, configured=LogSettings(configured))
        assert refused.value.code == "invalid_environment"
        assert refused.value.location.source == "$MYMCP_LOG_LEVEL"
        return
    chosen = log_settings(flag, environ=environ, configured=LogSettings(configured)).level
    assert chosen == expected


@given(FORMATS, FORMATS)
def test_the_format_follows_the_same_order(flag: str | None, variable: str | None) -> None:
    environ = {} if variable is None else {"MYMCP_LOG_FORMAT": variable}
    if flag not in LOG_FORMATS and variable == "xml":
        with pytest.raises(ConfigurationError, match=r'\$MYMCP_LOG_FORMAT.*found "xml"'):
            log_settings(None, flag, environ=environ)
        return
    chosen = log_settings(None, flag, environ=environ).format
    expected = flag if flag in LOG_FORMATS else variable if variable in LOG_FORMATS else "text"
    assert chosen == expected


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("MYMCP_LOG_LEVEL", "WARNING", LogSettings("warning")),
        ("MYMCP_LOG_LEVEL", " debug\t", LogSettings("debug")),
        ("MYMCP_LOG_FORMAT", "Json", LogSettings(format="json")),
        ("MYMCP_LOG_FORMAT", "  ", LogSettings()),  # empty counts as unset
    ],
)
def test_environment_words_ignore_case_and_surrounding_space(
    variable: str, value: str, expected: LogSettings
) -> None:
    assert log_settings(environ={variable: value}) == expected


def test_a_valid_flag_leaves_a_broken_variable_unread() -> None:
    environ = {"MYMCP_LOG_LEVEL": "verbose", "MYMCP_LOG_FORMAT": "xml"}
    assert log_settings("error", "json", environ=environ) == LogSettings("error", "json")


def _record(name: str, level: int, message: str, created: float) -> logging.LogRecord:
    record = logging.LogRecord(name, level, __file__, 1, message, None, None)
    record.created = created
    return record


def test_a_text_line_has_a_utc_timestamp_level_logger_and_message() -> None:
    lines = StderrLines(LogSettings())
    record = _record("mcp", logging.INFO, "request id=1 method=ping", 1764577559.1239)
    assert lines.line(record) == "2025-12-01T08:25:59.123Z INFO mcp request id=1 method=ping\n"


def test_a_json_line_is_one_object() -> None:
    lines = StderrLines(LogSettings(format="json"))
    record = _record("uvicorn.error", logging.INFO, 'Started "x"', 1764577559.5)
    assert json.loads(lines.line(record)) == {
        "time": "2025-12-01T08:25:59.500Z",
        "level": "INFO",
        "logger": "uvicorn.error",
        "message": 'Started "x"',
    }


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_the_stamp_matches_the_standard_library(created: float) -> None:
    lines = StderrLines(LogSettings())
    stamp = lines.line(_record("x", logging.INFO, "m", created)).split(" ", 1)[0]
    second = int(created)
    assert stamp[:19] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    assert stamp[19:] == f".{int((created - second) * 1000):03d}Z"


class _Stderr:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys
        self._seen = ""

    def getvalue(self) -> str:
        self._seen += self._capsys.readouterr().err
        return self._seen


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[_Stderr]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    shown = warnings.showwarning
    yield _Stderr(capsys)
    warnings.showwarning = shown
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name in ("mymcp", "mcp", "uvicorn.error"):
        logging.getLogger(name).setLevel(logging.NOTSET)


def test_held_lines_come_out_in_the_settled_format_and_level(stderr: _Stderr) -> None:
    handler = configure_logging(LogSettings(), held=True)
    logging.getLogger("mymcp.host.configuration").info("host_configuration outcome=loaded")
    logging.getLogger("mymcp.test").debug("not shown at info")
    assert stderr.getvalue() == ""
    handler.settle(LogSettings("info", "json"))
    (line,) = stderr.getvalue().splitlines()
    assert json.loads(line)["message"] == "host_configuration outcome=loaded"
    logging.getLogger("mymcp.test").warning("after")
    assert json.loads(stderr.getvalue().splitlines()[-1])["level"] == "WARNING"


def test_a_stricter_settled_level_drops_held_lines(stderr: _Stderr) -> None:
    handler = configure_logging(LogSettings(), held=True)
    logging.getLogger("mymcp.x").info("quiet, please")
    logging.getLogger("mymcp.x").error("still said")
    handler.settle(LogSettings("warning"))
    assert [line.split(" ", 3)[3] for line in stderr.getvalue().splitlines()] == ["still said"]


def test_exceptions_are_one_line_unless_debug(stderr: _Stderr) -> None:
    configure_logging(LogSettings())
    try:
        raise RuntimeError("secret /home/someone")
    except RuntimeError:
        logging.getLogger("mymcp.x").exception("tool_failure")
    assert stderr.getvalue().endswith(" ERROR mymcp.x tool_failure error_type=RuntimeError\n")
    assert "secret" not in stderr.getvalue()


@pytest.mark.parametrize("level", ["info", "debug"])
def test_a_warning_is_a_log_line_in_the_chosen_format(stderr: _Stderr, level: str) -> None:
    # A plugin's or a library's warning: no raw text line breaking the JSON stream, and
    # below debug none of its file, source line or text.
    configure_logging(LogSettings(level, "json"))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("library says: token sk-SECRET /home/someone", UserWarning, stacklevel=1)
    (line,) = stderr.getvalue().splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"]) == ("WARNING", "py.warnings")
    assert record["message"].startswith("python_warning category=UserWarning")
    assert ("sk-SECRET" in record["message"]) is (level == "debug")


@pytest.mark.parametrize("configured_by", ["launcher", "uvicorn_worker"])
def test_requests_cancelled_at_the_end_of_a_stop_are_a_warning_not_an_error(
    stderr: _Stderr, configured_by: str
) -> None:
    # uvicorn writes it at ERROR; here it is a routine end (each call is answered and
    # audited), and a journal must not show a stop as a failure.
    uvicorn_log = logging.getLogger("uvicorn.error")
    saved = list(uvicorn_log.filters)
    try:
        if configured_by == "launcher":
            configure_logging(LogSettings("info", "json"))
        else:
            logging.config.dictConfig(uvicorn_log_config(LogSettings("info", "json")))
        uvicorn_log.error("Cancel %s running task(s), timeout graceful shutdown exceeded", 2)
        uvicorn_log.error("Exception in ASGI application")
        records = [json.loads(line) for line in stderr.getvalue().splitlines()]
        assert [(r["level"], r["message"]) for r in records] == [
            ("WARNING", "Cancel 2 running task(s), timeout graceful shutdown exceeded"),
            ("ERROR", "Exception in ASGI application"),
        ]
    finally:
        uvicorn_log.filters[:] = saved


def test_uvicorn_gets_the_same_handler_and_levels() -> None:
    document = uvicorn_log_config(LogSettings("warning", "json"))
    logging.config.dictConfig(document)  # what uvicorn does in its worker
    try:
        (handler,) = logging.getLogger().handlers
        assert isinstance(handler, StderrLines)
        assert logging.getLogger("uvicorn.error").level == logging.WARNING
        assert logging.getLogger().level == logging.WARNING
    finally:
        logging.getLogger().handlers.clear()


@given(
    st.sampled_from([logging.DEBUG, logging.INFO, logging.WARNING]),
    st.text(),
    st.sampled_from(LOG_FORMATS),
    st.floats(min_value=0, max_value=4e9, allow_nan=False),
)
def test_a_line_written_without_its_record_is_the_line_the_record_gives(
    level: int, message: str, log_format: str, created: float
) -> None:
    lines = StderrLines(LogSettings(format=log_format))
    expected = lines.line(_record("mcp", level, message, created))
    written = io.StringIO()
    with contextlib.redirect_stderr(written), mock.patch.object(time, "time", return_value=created):
        lines.write_line("mcp", level, message)  # no event loop: written at once
    assert written.getvalue() == expected


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_request_lines_skip_their_record_only_while_the_handler_is_alone(
    stderr: _Stderr,
) -> None:
    from mymcp.transport._jsonrpc import Request, log_request

    handler = configure_logging(LogSettings())
    root, mcp = logging.getLogger(), logging.getLogger("mcp")
    assert direct_handler(mcp, logging.INFO) is handler
    log_request(Request(1, "ping", None))
    assert stderr.getvalue().endswith(" INFO mcp request id=1 method=ping\n")

    # Another handler (a test's capture, an embedding application's) gets records.
    collected = _Collected()
    root.addHandler(collected)
    assert direct_handler(mcp, logging.INFO) is None
    log_request(Request(2, "ping", None))
    assert collected.messages == ["request id=2 method=ping"]
    assert stderr.getvalue().endswith(" INFO mcp request id=2 method=ping\n")
    root.removeHandler(collected)

    # So does any arrangement a filter could act in, or where lines do not reach it.
    refuse = logging.Filter("elsewhere")
    for owner in (mcp, root, handler):
        owner.addFilter(refuse)
        assert direct_handler(mcp, logging.INFO) is None
        owner.removeFilter(refuse)
    mcp.propagate = False
    try:
        assert direct_handler(mcp, logging.INFO) is None
    finally:
        mcp.propagate = True
    handler.setLevel(logging.WARNING)
    assert direct_handler(mcp, logging.INFO) is None
    assert direct_handler(mcp, logging.WARNING) is handler
    handler.setLevel(logging.NOTSET)
    assert direct_handler(mcp, logging.INFO) is handler

    # Lines held until the configuration is read keep their records.
    held = configure_logging(LogSettings(), held=True)
    assert direct_handler(mcp, logging.INFO) is None
    log_request(Request(3, "ping", None))
    held.settle(LogSettings(format="json"))
    assert json.loads(stderr.getvalue().splitlines()[-1])["message"] == "request id=3 method=ping"
