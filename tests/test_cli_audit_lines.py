"""`mymcp audit show` without `--json`: one readable line per record."""

from __future__ import annotations

from pathlib import Path

import pytest

from mymcp.cli import main
from mymcp.cli.governance import _readable
from mymcp.governance import AuditLog

CALL = {"time": "2026-12-02T10:00:00.000Z", "seq": 7, "event": "tool_call"}


def test_a_call_that_ran_says_how_long_it_took() -> None:
    line = _readable(
        {
            **CALL,
            "principal": "local",
            "tool": "t",
            "decision": "allowed",
            "outcome": "ok",
            "duration_ms": 1.5,
        }
    )
    assert line == "2026-12-02T10:00:00.000Z  #7  tool_call  local  t  allowed -> ok (1.5 ms)"


def test_a_call_refused_before_it_ran_shows_no_duration() -> None:
    record = {**CALL, "decision": "allowed", "outcome": "invalid_arguments"}
    assert _readable(record).endswith("allowed -> invalid_arguments")


def test_nothing_in_a_record_reaches_the_terminal_raw() -> None:
    line = _readable({**CALL, "principal": "oauth:\x1b[2J\u202e", "reason": "a\nb"})
    assert "\x1b" not in line
    assert "\u202e" not in line
    assert "\n" not in line
    assert "oauth:\\x1b[2J\\u202e" in line


def test_a_directory_without_an_audit_log_is_no_verified_empty_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("verify", "show"):
        assert main(["audit", command, "--directory", str(tmp_path)]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert err == (
            f"mymcp: error: {tmp_path} holds no audit log (no audit.key, HEAD or segment "
            "file); a server with [audit] on creates them\n"
        )


def test_a_fresh_audit_directory_verifies_as_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = AuditLog(tmp_path / "audit", max_segment_bytes=1 << 20, max_segments=4)
    audit.close()
    assert main(["audit", "verify", "--directory", str(tmp_path / "audit")]) == 0
    assert capsys.readouterr().out.startswith("ok records=")
