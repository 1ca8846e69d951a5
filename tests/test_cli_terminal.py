"""What every command prints on the operator's terminal for a failure."""

from __future__ import annotations

import pytest

from mymcp.cli.terminal import EXIT_FAILURE, fail
from mymcp.errors import ExternalPluginLoadError, Location


def test_a_failure_is_one_line_whatever_its_detail_holds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A plugin's exception names itself and its message as it likes.
    detail = "Evil\n2026-01-01T00:00:00Z ERROR mymcp forged=1: secret \x1b[2J/home/victim"
    where = Location(source="plugin evil (module evil)")
    status = fail(
        ExternalPluginLoadError("external_plugin_import_failed", location=where, detail=detail)
    )
    assert status == EXIT_FAILURE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("mymcp: error: plugin evil (module evil): ")
    assert "Evil\\x0a2026-01-01T00:00:00Z ERROR mymcp forged=1" in err
    assert "\x1b" not in err
    assert err.rstrip("\n").endswith("(code=external_plugin_import_failed)")
