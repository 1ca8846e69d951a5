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


@pytest.mark.parametrize("damage", ["removed", "emptied", "cut"])
def test_show_says_when_the_record_head_names_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    directory = tmp_path / "audit"
    audit = AuditLog(directory, max_segment_bytes=1 << 20, max_segments=4)
    for number in range(3):
        audit.append("tool_call", principal="local", tool=f"t{number}", decision="allowed")
    audit.close()
    assert main(["audit", "show", "--directory", str(directory)]) == 0
    whole = capsys.readouterr()
    assert len(whole.out.splitlines()) == 3
    assert whole.err == ""
    (segment,) = directory.glob("segment-*")
    if damage == "removed":
        segment.unlink()
    elif damage == "emptied":
        segment.write_bytes(b"")
    else:  # the newest record cut off
        lines = segment.read_bytes().splitlines(keepends=True)
        segment.write_bytes(b"".join(lines[:-1]))
    assert main(["audit", "show", "--directory", str(directory)]) == 0
    shown = capsys.readouterr()
    assert shown.err.startswith("note: the record HEAD names (seq ")
    assert shown.err.endswith("run mymcp audit verify\n")


@pytest.mark.parametrize("damage", ["removed", "garbage", "directory"])
def test_show_says_when_head_itself_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    directory = tmp_path / "audit"
    audit = AuditLog(directory, max_segment_bytes=1 << 20, max_segments=4)
    audit.append("tool_call", principal="local", tool="t", decision="allowed")
    audit.close()
    head = directory / "HEAD"
    head.unlink()
    if damage == "garbage":
        head.write_text("hello\n")
    elif damage == "directory":
        head.mkdir()
    assert main(["audit", "show", "--directory", str(directory)]) == 0
    shown = capsys.readouterr()
    assert len(shown.out.splitlines()) == 1  # what is there is still shown
    assert shown.err == (
        "note: HEAD is missing or unreadable, so the end of the log cannot be checked; it "
        "may have been cut or altered: run mymcp audit verify\n"
    )


def test_show_says_when_no_record_is_of_the_event_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "audit"
    audit = AuditLog(directory, max_segment_bytes=1 << 20, max_segments=4)
    audit.append("tool_call", principal="local", tool="t", decision="allowed")
    audit.append("session_open", principal="local", session="s")
    audit.close()
    assert main(["audit", "show", "--directory", str(directory), "--event", "tool_cal"]) == 0
    shown = capsys.readouterr()
    assert shown.out == ""
    assert shown.err == (
        'note: no record in the log is a "tool_cal" event; its events are: session_open, '
        "tool_call\n"
    )
    # Values the log holds, filtered away by each other, get no note.
    argv = ["audit", "show", "--directory", str(directory), "--event", "session_open"]
    assert main([*argv, "--tool", "t", "--principal", "local"]) == 0
    assert capsys.readouterr() == ("", "")


def test_show_says_when_no_record_names_the_tool_or_principal_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "audit"
    audit = AuditLog(directory, max_segment_bytes=1 << 20, max_segments=4)
    for index in range(25):
        audit.append("tool_call", principal=f"oauth:user{index:02d}", tool="t", decision="allowed")
    audit.close()
    argv = ["audit", "show", "--directory", str(directory)]
    assert main([*argv, "--tool", "memory_lst"]) == 0
    shown = capsys.readouterr()
    assert shown.out == ""
    assert shown.err == 'note: no record in the log names the tool "memory_lst"; it names: t\n'
    assert main([*argv, "--principal", "oauth:user"]) == 0
    note = capsys.readouterr().err
    assert note.startswith('note: no record in the log names the principal "oauth:user"; ')
    assert note.endswith("oauth:user18, oauth:user19 and 5 more\n")
