"""Fixtures that start the real server in a private sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import RunningServer, Sandbox, make_sandbox, serve


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return make_sandbox(tmp_path)


@pytest.fixture
def anonymous_server(sandbox: Sandbox) -> Iterator[RunningServer]:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox) as server:
        yield server
