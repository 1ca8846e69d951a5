"""Suite-wide fixtures."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

# The loggers whose levels the launchers set (`mymcp.logs`), plus the root.
_LAUNCHER_LOGGERS = ("", "mymcp", "mcp", "uvicorn.error")


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """A test that runs a command in-process (`cli.main`) configures logging as the
    launcher does: one stderr handler and levels on our loggers. Put both back, so that
    a later test capturing log records sees what the code logs, whatever ran before."""
    loggers = [logging.getLogger(name) for name in _LAUNCHER_LOGGERS]
    levels = [logger.level for logger in loggers]
    handlers = list(logging.getLogger().handlers)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)
    logging.getLogger().handlers[:] = handlers


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common umask, under which a directory made without care is 0755 (readable by
    everyone); the one the suite ran under is put back after."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)
