"""Suite-wide fixtures."""

from __future__ import annotations

import logging
import os
import pwd
import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

# Properties are judged on what the code answers, never on how long it took: a busy
# machine must not fail an example for being slow (hypothesis's default deadline).
settings.register_profile("mymcp", deadline=None)
# In CI the examples are the same on every run: a landing is decided by the change, not
# by which examples a random seed happened to draw. Runs elsewhere keep exploring, and
# what they find becomes an explicit example.
settings.register_profile("ci", deadline=None, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "mymcp")


def pytest_configure(config: pytest.Config) -> None:
    # A shell without job control starts background commands with Ctrl-C ignored, and
    # every process the suite starts would inherit that: the tests that press Ctrl-C in
    # a server would then wait on a server that never hears it. A handled signal is
    # reset to its default in a child, an ignored one is not, so handle it here.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# The loggers whose levels the launchers set (`mymcp.logs`), plus the root.
_LAUNCHER_LOGGERS = ("", "mymcp", "mcp", "uvicorn.error")


@pytest.fixture(autouse=True, scope="session")
def _scratch_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point every place the code looks for the user's files at a scratch home, so that
    no test reads the configuration of whoever runs the suite or leaves files (an index
    snapshot, a console state) in their home. Tests that need their own set them again.
    A test that hands the code an environment without HOME makes it ask the account
    database instead, so in this process that answer is the scratch home too."""
    home = tmp_path_factory.mktemp("home")
    account = pwd.getpwuid

    def scratch_account(uid: int) -> pwd.struct_passwd:
        entry = account(uid)
        if uid != os.getuid():
            return entry
        return pwd.struct_passwd((*entry[:5], str(home), entry[6]))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pwd, "getpwuid", scratch_account)
        patch.setenv("HOME", str(home))
        for name, relative in (
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_CACHE_HOME", ".cache"),
            ("XDG_STATE_HOME", ".local/state"),
            ("XDG_DATA_HOME", ".local/share"),
        ):
            patch.setenv(name, str(home / relative))
        yield


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
