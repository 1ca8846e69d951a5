"""Attaching a test's log handler to a logger for a while, at a level, and restoring it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def attached(handler: logging.Handler, name: str | None, level: int) -> Iterator[None]:
    """`handler` receives the records of logger `name` (None: the root) at `level` and
    above while inside; the logger's own level is put back afterwards."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
