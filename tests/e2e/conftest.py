"""Fixtures that start the real server in a private sandbox."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import RunningServer, Sandbox, make_sandbox, serve
from tests.log_capture import attached


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return make_sandbox(tmp_path)


@pytest.fixture
def anonymous_server(sandbox: Sandbox) -> Iterator[RunningServer]:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox) as server:
        yield server


class LogLines(logging.Handler):
    """The server's `mcp` log lines, each one an event a test can wait for."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._lines: list[str] = []
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._changed:
            self._lines.append(record.getMessage())
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 15.0) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: any(text in line for line in self._lines), timeout
            )


@pytest.fixture
def server_log() -> Iterator[LogLines]:
    handler = LogLines()
    with attached(handler, "mcp", logging.INFO):
        yield handler
