"""`verify`: tampering of every kind is found, legitimate crashes are not tampering, and a
verify running next to a live writer sees a consistent log."""

from __future__ import annotations

import errno
import json
import mmap
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.cli import main
from mymcp.errors import AuditError
from mymcp.governance import audit_verify, check_audit_directory, read_records, verify_audit
from mymcp.governance.audit_format import (
    MAX_LINE_BYTES,
    _lines_from_the_end,
    read_head,
    segment_name,
)
from tests.governance.audit_logs import (
    Clock,
    forged,
    open_log,
    rewrite,
    segment_lines,
    segment_numbers,
    write,
)


def test_edit_is_detected(tmp_path: Path) -> None:
    write(tmp_path, 10)
    lines = segment_lines(tmp_path)
    lines[4] = lines[4].replace(b'"allowed"', b'"denied"')
    rewrite(tmp_path, lines)
    result = verify_audit(tmp_path)
    assert not result.ok
    assert result.problem == "segment-000001.jsonl line 5: hash does not match its content"


def test_edit_with_recomputed_hash_breaks_the_next_link(tmp_path: Path) -> None:
    write(tmp_path, 10)
    lines = segment_lines(tmp_path)
    record = json.loads(lines[4])
    record["decision"] = "denied"
    lines[4] = forged(record)
    rewrite(tmp_path, lines)
    assert verify_audit(tmp_path).problem == (
        "segment-000001.jsonl line 6: prev does not match the record before"
    )


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (lambda lines: lines[:3] + lines[4:], "line 4: prev does not match the record before"),
        (lambda lines: [*lines[:5], lines[2], *lines[5:]], "line 6: prev does not match"),
        (lambda lines: [lines[0], lines[2], lines[1], *lines[3:]], "line 2: prev does not match"),
        (lambda lines: lines[:-1], "records after seq 9 are missing (HEAD names seq 10)"),
        (lambda lines: lines[:-3], "records after seq 7 are missing (HEAD names seq 10)"),
        (lambda lines: [*lines, lines[-1]], "line 11: prev does not match"),
    ],
    ids=["delete", "insert", "reorder", "truncate-one", "truncate-three", "duplicate-last"],
)
def test_deleted_inserted_reordered_and_truncated_lines_are_detected(
    tmp_path: Path, tamper: Any, problem: str
) -> None:
    write(tmp_path, 10)
    rewrite(tmp_path, tamper(segment_lines(tmp_path)))
    result = verify_audit(tmp_path)
    assert not result.ok
    assert problem in str(result.problem)


@pytest.mark.parametrize(
    "change",
    [
        # A repeated key: a JSON parser keeps the last, so the record still hashes right.
        lambda line: b'{"decision":"denied",' + line[1:],
        lambda line: line[:-1] + b"\r\n",
        lambda line: line.replace(b'":"', b'": "', 1),
        lambda line: b" " + line,
        # The whole record in canonical JSON, `hash` in its sorted place instead of last.
        lambda line: (
            json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")).encode() + b"\n"
        ),
    ],
    ids=["duplicate-key", "crlf", "space-after-colon", "leading-space", "hash-not-last"],
)
def test_a_line_must_be_byte_for_byte_the_writers_encoding(tmp_path: Path, change: Any) -> None:
    write(tmp_path, 6)
    lines = segment_lines(tmp_path)
    lines[3] = change(lines[3])
    rewrite(tmp_path, lines)
    result = verify_audit(tmp_path)
    assert not result.ok
    assert str(result.problem).startswith("segment-000001.jsonl line 4: ")


def test_missing_head_is_reported(tmp_path: Path) -> None:
    write(tmp_path, 3)
    (tmp_path / "HEAD").unlink()
    assert verify_audit(tmp_path).problem == "HEAD is missing or unreadable"


def test_every_segment_removed_is_reported(tmp_path: Path) -> None:
    write(tmp_path, 3).close()
    for path in tmp_path.glob("segment-*.jsonl"):
        path.unlink()
    assert verify_audit(tmp_path).problem == ("records after seq 0 are missing (HEAD names seq 3)")


def test_a_new_log_verifies_before_its_first_record(tmp_path: Path) -> None:
    open_log(tmp_path).close()
    assert (tmp_path / "HEAD").read_text() == f"0 {'0' * 64}\n"
    result = verify_audit(tmp_path)
    assert (result.ok, result.records, result.segments) == (True, 0, 0)


def test_removing_the_oldest_segment_by_hand_is_detected(tmp_path: Path) -> None:
    write(tmp_path, 200, max_segment_bytes=4096, max_segments=50)
    segments = sorted(tmp_path.glob("segment-*.jsonl"))
    assert len(segments) >= 3
    segments[0].unlink()
    result = verify_audit(tmp_path)
    assert not result.ok
    assert "earlier segments are missing" in str(result.problem)


def test_removing_the_newest_segment_is_detected(tmp_path: Path) -> None:
    write(tmp_path, 200, max_segment_bytes=4096, max_segments=50)
    sorted(tmp_path.glob("segment-*.jsonl"))[-1].unlink()
    assert "are missing" in str(verify_audit(tmp_path).problem)


def test_removing_the_newest_segment_of_a_rotated_log_names_the_missing_end(
    tmp_path: Path,
) -> None:
    # Retention removed the oldest segments; the records saying so are in the newest one.
    write(tmp_path, 60, max_segment_bytes=2048, max_segments=3).close()
    assert verify_audit(tmp_path).ok
    last = (tmp_path / "HEAD").read_text().split()[0]
    newest = sorted(tmp_path.glob("segment-*.jsonl"))[-1]
    newest.unlink()
    problem = str(verify_audit(tmp_path).problem)
    assert problem.startswith("records after seq ")
    assert problem.endswith(f"are missing (HEAD names seq {last})")


def test_a_broken_line_inside_a_segment_is_tampering(tmp_path: Path) -> None:
    write(tmp_path, 5)
    lines = segment_lines(tmp_path)
    lines[2] = b'{"seq":3,"time":"2025-\n'
    rewrite(tmp_path, lines)
    assert verify_audit(tmp_path).problem == "segment-000001.jsonl line 3: not a valid record"


# -- a cut-off log is not healed by the next write -------------------------------------------


def test_a_truncated_log_stays_broken_after_the_next_write(tmp_path: Path) -> None:
    write(tmp_path, 10).close()
    rewrite(tmp_path, segment_lines(tmp_path)[:-2])
    assert "records after seq 8 are missing" in str(verify_audit(tmp_path).problem)
    for round_number in range(3):  # it stays broken, whatever is written after
        log = open_log(tmp_path)
        log.append("tool_call", tool=f"after_{round_number}", decision="allowed")
        log.commit()
        log.close()
        result = verify_audit(tmp_path)
        assert not result.ok
        assert result.problem == (
            "segment-000001.jsonl line 9: when this record was written the log did not reach "
            "the record HEAD named (HEAD named seq 10, the log ended at seq 8): records were "
            "removed or HEAD was changed"
        )
    mismatch = [r for r in read_records(tmp_path) if r["event"] == "audit_head_mismatch"]
    assert len(mismatch) == 1  # recorded once, when it was found
    assert (mismatch[0]["seq"], mismatch[0]["head_seq"]) == (9, 10)


def test_what_the_writer_finds_is_no_later_than_the_records_it_goes_ahead_of(
    tmp_path: Path,
) -> None:
    # A cut end found at the first write, and a torn final line: both are recorded
    # ahead of the queued records, so their times must not be later than those.
    clock = Clock(1_764_547_200.0)
    write(tmp_path, 10, clock=clock).close()
    lines = segment_lines(tmp_path)
    rewrite(tmp_path, [*lines[:-2], lines[-2][:-9]])
    log = open_log(tmp_path, clock=clock)
    clock.now += 0.25
    log.append("tool_call", tool="queued_first", decision="allowed")
    clock.now += 0.5
    log.append("tool_call", tool="queued_second", decision="allowed")
    clock.now += 3  # the background writer's flush comes later
    log.commit()
    log.close()
    records = list(read_records(tmp_path))
    events = [r["event"] for r in records[-4:]]
    assert events == ["audit_recovered", "audit_head_mismatch", "tool_call", "tool_call"]
    times = [r["time"] for r in records]
    assert times == sorted(times)
    assert records[-4]["time"] == records[-2]["time"] == "2025-12-01T00:00:00.250Z"


def test_a_running_writer_notices_a_cut_off_end(tmp_path: Path) -> None:
    log = write(tmp_path, 10)
    rewrite(tmp_path, segment_lines(tmp_path)[:-2])
    log.append("tool_call", tool="after", decision="allowed")
    log.commit()
    assert "did not reach the record HEAD named" in str(verify_audit(tmp_path).problem)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda directory: (directory / "HEAD").unlink(),
        lambda directory: (directory / "HEAD").write_text(f"3 {'a' * 64}\n"),
        lambda directory: [path.unlink() for path in directory.glob("segment-*.jsonl")],
    ],
    ids=["head-removed", "head-replaced", "segments-removed"],
)
def test_a_head_that_disagrees_is_recorded_before_the_chain_goes_on(
    tmp_path: Path, tamper: Any
) -> None:
    write(tmp_path, 5).close()
    tamper(tmp_path)
    write(tmp_path, 2).close()
    assert "did not reach the record HEAD named" in str(verify_audit(tmp_path).problem)


def test_head_lagging_after_a_crash_is_not_tampering(tmp_path: Path) -> None:
    write(tmp_path, 5).close()
    lagging = (tmp_path / "HEAD").read_bytes()
    write(tmp_path, 3).close()
    # A crash after the records were written but before HEAD was replaced.
    (tmp_path / "HEAD").write_bytes(lagging)
    crashed = verify_audit(tmp_path)
    assert crashed.ok, crashed.problem
    assert crashed.notes == (_lag(5, 8, 3),)
    write(tmp_path, 2).close()
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert result.records == 10
    assert not [r for r in read_records(tmp_path) if r["event"] == "audit_head_mismatch"]


def test_a_crash_before_the_first_head_is_not_tampering(tmp_path: Path) -> None:
    open_log(tmp_path).close()
    genesis = (tmp_path / "HEAD").read_bytes()
    write(tmp_path, 3).close()
    (tmp_path / "HEAD").write_bytes(genesis)  # records written, HEAD not yet replaced
    write(tmp_path, 1).close()
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert result.records == 4


# -- HEAD behind the log: always said, never a break ------------------------------------------


def _lag(named: int, end: int, beyond: int, gone: str = "") -> str:
    what = f"seq {named}" if named else "seq 0 (no record)"
    return (
        f"HEAD lags the log: it names {what}{gone}, the log ends at seq {end}, records "
        f"beyond it: {beyond} (left by a crash or a failed write between writing records "
        "and replacing HEAD, or by HEAD set back by hand)"
    )


def _record(directory: Path, seq: int) -> dict[str, Any]:
    return next(record for record in read_records(directory) if record["seq"] == seq)


def test_head_set_back_to_an_early_record_is_noted(tmp_path: Path) -> None:
    write(tmp_path, 701, max_segment_bytes=40_000).close()
    third = _record(tmp_path, 3)
    (tmp_path / "HEAD").write_text(f"3 {third['hash']}\n")
    result = verify_audit(tmp_path)
    assert (result.ok, result.records) == (True, 701)
    assert result.notes == (
        "HEAD lags the log: it names seq 3, the log ends at seq 701, records beyond it: "
        "698 (left by a crash or a failed write between writing records and replacing HEAD, "
        "or by HEAD set back by hand)",
    )


def test_a_cut_end_with_head_reset_is_noted_though_the_chain_cannot_prove_it(
    tmp_path: Path,
) -> None:
    # The last two segments removed and HEAD written as before the first record: what
    # is left is exactly what a crash during a first, large write leaves, so it passes,
    # but it never passes silently.
    write(tmp_path, 701, max_segment_bytes=40_000).close()
    assert segment_numbers(tmp_path) == [1, 2, 3, 4, 5]
    for number in (4, 5):
        (tmp_path / segment_name(number)).unlink()
    (tmp_path / "HEAD").write_text(f"0 {'0' * 64}\n")
    end = len(list(read_records(tmp_path)))
    result = verify_audit(tmp_path)
    assert (result.ok, result.records, result.segments) == (True, end, 3)
    assert result.notes == (_lag(0, end, end),)


def test_head_naming_a_record_retention_removed_is_noted(tmp_path: Path) -> None:
    log = write(tmp_path, 10, max_segment_bytes=2048, max_segments=3)
    second = _record(tmp_path, 2)
    for index in range(80):
        log.append("tool_call", principal="anonymous", tool=f"later_{index}", decision="allowed")
    log.close()
    (tmp_path / "HEAD").write_text(f"2 {second['hash']}\n")
    kept = [record["seq"] for record in read_records(tmp_path)]
    assert kept[0] > 2  # retention removed it, with its segment_removed records after
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    gone = f", a record no longer in the log (it starts at seq {kept[0]})"
    assert result.notes == (_lag(2, kept[-1], len(kept), gone),)
    # A writer continuing the log reads it alike: a lag, not records taken away (which
    # would be recorded as such, and break the log for good).
    later = open_log(tmp_path, max_segment_bytes=2048, max_segments=3)
    later.append("tool_call", principal="anonymous", tool="after_restart", decision="allowed")
    later.close()
    events = [record["event"] for record in read_records(tmp_path)]
    assert "audit_head_mismatch" not in events
    after = verify_audit(tmp_path)
    assert (after.ok, after.notes) == (True, ())


def test_head_left_behind_by_failed_replacements_spans_many_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why a lagging HEAD is never a break: a writer that cannot replace HEAD (no room
    for the new file) keeps the records it wrote and goes on committing, so no count of
    records beyond HEAD is too many for an honest log."""
    log = write(tmp_path, 3)
    before = read_head(tmp_path)
    write_bytes = os.write

    def no_room_for_head(fd: int, data: Any) -> int:
        if "/.HEAD." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "simulated")
        return write_bytes(fd, data)

    monkeypatch.setattr(os, "write", no_room_for_head)
    for index in range(5):
        for call in range(4):
            log.append("tool_call", principal="anonymous", tool=f"t{index}_{call}")
        with pytest.raises(AuditError):
            log.commit()
    assert read_head(tmp_path) == before == (3, _record(tmp_path, 3)["hash"])
    result = verify_audit(tmp_path)
    assert (result.ok, result.records) == (True, 23)
    assert result.notes == (_lag(3, 23, 20),)
    monkeypatch.setattr(os, "write", write_bytes)
    log.append("tool_call", principal="anonymous", tool="after")
    log.close()
    healed = verify_audit(tmp_path)
    assert (healed.ok, healed.records, healed.notes) == (True, 24, ())


def test_a_resumed_walk_notes_a_lagging_head_as_a_whole_one_does(tmp_path: Path) -> None:
    log = write(tmp_path, 60, max_segment_bytes=2048)
    earlier = verify_audit(tmp_path)
    assert earlier.prefix is not None
    log.append("tool_call", principal="anonymous", tool="later")
    log.close()
    (tmp_path / "HEAD").write_text(f"60 {_record(tmp_path, 60)['hash']}\n")
    resumed = verify_audit(tmp_path, resume=earlier.prefix)
    assert resumed.ok, resumed.problem
    assert resumed.notes == verify_audit(tmp_path).notes == (_lag(60, 61, 1),)


# -- legitimate crashes ----------------------------------------------------------------------


def test_a_torn_last_line_is_reported_as_such_and_recovered(tmp_path: Path) -> None:
    write(tmp_path, 5).close()
    with open(tmp_path / "segment-000001.jsonl", "ab") as handle:
        handle.write(b'{"seq":6,"time":"2025-')  # a crash in the middle of a write
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert result.notes == ("torn final line in segment-000001.jsonl (a crash during a write)",)
    log = open_log(tmp_path)
    log.append("tool_call", tool="after_crash")
    log.commit()
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert result.segments == 2
    events = [r["event"] for r in read_records(tmp_path)]
    assert events[-2:] == ["audit_recovered", "tool_call"]


def _numbered_after_one_more_record(directory: Path, tool: str) -> list[dict[str, Any]]:
    """The records once a new writer added one more, checked to be numbered 1, 2, ...
    without a gap or a repeat."""
    log = open_log(directory)
    log.append("tool_call", tool=tool)
    log.commit()
    log.close()
    records = list(read_records(directory))
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    return records


@pytest.mark.parametrize(
    "ending",
    [
        b"not a record\n",
        b"\n",
        b'{"seq": 1}\n',
        b"not a record\n" + b'{"seq":6,"ti',
        b"# junk\n" * 12_000,  # more than one window read from the end
        b"x" * 200_000 + b"\n",  # one line longer than any record
    ],
    ids=["junk", "blank", "no-hash", "junk-then-torn", "much-junk", "overlong"],
)
def test_lines_after_the_last_record_never_restart_the_numbers(
    tmp_path: Path, ending: bytes
) -> None:
    """An edit that leaves lines no record reads at the end of the log: the next writer
    continues the numbers and hashes after the last record, in a segment of its own,
    and `verify` still points at the edit."""
    write(tmp_path, 5).close()
    with open(tmp_path / "segment-000001.jsonl", "ab") as handle:
        handle.write(ending)
    records = _numbered_after_one_more_record(tmp_path, "after_edit")
    assert records[-2]["event"] == "audit_recovered"
    assert records[-2]["prev"] == records[-3]["hash"]
    assert segment_numbers(tmp_path) == [1, 2]  # the edited segment is left as it was
    result = verify_audit(tmp_path)
    assert not result.ok
    assert str(result.problem).startswith("segment-000001.jsonl line 6: ")


def test_writers_whose_lock_file_was_replaced_still_lock_the_same_file(tmp_path: Path) -> None:
    """Two writers of one directory; the lock file is removed and a third writer makes
    a new one. All three must go on excluding each other, or two append at once."""
    first, second = open_log(tmp_path), open_log(tmp_path)
    (tmp_path / "audit.lock").unlink()
    third = open_log(tmp_path)  # creates a new lock file
    logs = (first, second, third)
    start = threading.Barrier(len(logs))

    def keep_writing(log: Any, name: str) -> None:
        start.wait()
        for index in range(60):
            log.append("tool_call", principal=name, tool=f"t{index}", decision="allowed")
            log.commit()

    threads = [
        threading.Thread(target=keep_writing, args=(log, f"w{n}")) for n, log in enumerate(logs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for log in logs:
        log.close()
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert sum(r.get("event") == "tool_call" for r in read_records(tmp_path)) == 180


def test_a_planted_newest_segment_of_junk_does_not_restart_the_numbers(tmp_path: Path) -> None:
    write(tmp_path, 5).close()
    (tmp_path / segment_name(999)).write_bytes(b"not a record\n")
    records = _numbered_after_one_more_record(tmp_path, "after_plant")
    assert records[-1]["tool"] == "after_plant"
    assert segment_numbers(tmp_path) == [1, 999, 1000]
    assert not verify_audit(tmp_path).ok


def test_a_segment_name_the_writer_would_not_give_is_no_segment(tmp_path: Path) -> None:
    """`segment-0000001.jsonl` would be a second name for segment 1: it is not read, not
    counted by retention and never removed in place of the real segment."""
    write(tmp_path, 3).close()
    planted = tmp_path / "segment-0000001.jsonl"
    planted.write_bytes((tmp_path / "segment-000001.jsonl").read_bytes())
    log = open_log(tmp_path, max_segment_bytes=4096, max_segments=2)
    for index in range(200):
        log.append("tool_call", tool=f"t{index}")
        if index % 20 == 0:
            log.commit()
    log.close()
    assert planted.exists()
    assert [r["seq"] for r in read_records(tmp_path)][:1] != [1]  # segment 1 went
    result = verify_audit(tmp_path)
    assert result.ok, result.problem


def test_a_segment_holding_only_a_torn_line_may_become_the_oldest(tmp_path: Path) -> None:
    """A crash during the first write to a new segment leaves a segment with one torn
    line; retention later makes it the oldest, then removes it. None of it is tampering."""
    write(tmp_path, 120, max_segment_bytes=4096, max_segments=3).close()
    torn = segment_numbers(tmp_path)[-1] + 1
    (tmp_path / segment_name(torn)).write_bytes(b'{"seq":99999,"ti')
    assert verify_audit(tmp_path).ok
    log = open_log(tmp_path, max_segment_bytes=4096, max_segments=3)
    oldest_seen: set[int] = set()
    for index in range(400):
        log.append("tool_call", tool=f"t{index}", decision="allowed")
        if index % 10 == 0:
            log.commit()
            oldest_seen.add(segment_numbers(tmp_path)[0])
            result = verify_audit(tmp_path)
            assert result.ok, (index, result.problem)
    log.close()
    assert torn in oldest_seen  # the torn segment was the oldest at some point
    assert torn not in segment_numbers(tmp_path)  # and then it was removed
    result = verify_audit(tmp_path)
    assert result.ok, result.problem


# -- verify next to a live writer ------------------------------------------------------------


@pytest.mark.slow
def test_verify_during_rotating_writes_never_reports_a_false_break(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_segment_bytes=65536, max_segments=2)
    stop = threading.Event()
    committed = threading.Event()

    def keep_writing() -> None:
        while not stop.is_set():
            for _ in range(50):
                log.append("tool_call", tool="t", decision="allowed", args_digest="a" * 64)
            log.commit()
            committed.set()

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        # Verify only once there is a chain to verify: on a busy machine the writer may
        # not get to run before a whole series of verifies of an empty directory is over.
        assert committed.wait(timeout=60)
        results = [verify_audit(tmp_path) for _ in range(150)]
    finally:
        stop.set()
        writer.join()
    log.close()
    assert [r.problem for r in results if not r.ok] == []
    assert results[-1].records > 0


def test_a_segment_removed_by_someone_else_during_verify_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, 200, max_segment_bytes=4096, max_segments=50).close()

    real_open = audit_verify.open_segment

    def vanish_once(path: Path) -> Any:
        if path.name == segment_name(2):
            path.unlink()
        return real_open(path)

    # The walk opens each segment as it comes to it: the second goes just before.
    monkeypatch.setattr(audit_verify, "open_segment", vanish_once)
    result = verify_audit(tmp_path)
    assert result.problem == "segment-000002.jsonl: removed while it was being verified"


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_a_segment_swapped_for_a_fifo_or_link_during_verify_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """Never followed, never waited on: a FIFO would hold the reader forever."""
    write(tmp_path, 200, max_segment_bytes=4096, max_segments=50).close()
    real_open = audit_verify.open_segment
    elsewhere = tmp_path.parent / f"{tmp_path.name}-copy"

    def swap_once(path: Path) -> Any:
        if path.name == segment_name(2) and not path.is_symlink() and path.is_file():
            path.rename(elsewhere)
            if planted == "fifo":
                os.mkfifo(path, 0o600)
            else:
                path.symlink_to(elsewhere)
        return real_open(path)

    monkeypatch.setattr(audit_verify, "open_segment", swap_once)
    result = verify_audit(tmp_path)
    assert result.problem == (
        "segment-000002.jsonl: no longer a regular file (a link or another kind)"
    )


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=8),
    segment_bytes=st.sampled_from([600, 2048, 1 << 20]),
    data=st.data(),
)
def test_any_commit_pattern_verifies_and_any_single_edit_is_caught(
    tmp_path_factory: pytest.TempPathFactory, batches: list[int], segment_bytes: int, data: Any
) -> None:
    directory = tmp_path_factory.mktemp("audit")
    log = open_log(directory, max_segment_bytes=segment_bytes, max_segments=1000)
    for size in batches:
        for index in range(size):
            log.append("tool_call", tool=f"t{index}", decision="allowed")
        log.commit()
    result = verify_audit(directory)
    assert result.ok, result.problem
    assert result.records == sum(batches)
    if not result.records:
        return
    segments = sorted(directory.glob("segment-*.jsonl"))
    path = data.draw(st.sampled_from(segments))
    lines = path.read_bytes().splitlines(keepends=True)
    position = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    record = json.loads(lines[position])
    record["tool"] = "forged"
    lines[position] = forged(record)
    path.write_bytes(b"".join(lines))
    assert not verify_audit(directory).ok


def _finishes(work: Any) -> Any:
    """`work()`'s value, failing the test (not hanging it) if it blocks."""
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(work()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert done, "blocked"
    return done[0]


@pytest.mark.parametrize("kind", ["digits", "fifo", "endless", "large"])
def test_a_hostile_head_is_a_missing_head_never_a_crash_a_wait_or_a_whole_read(
    tmp_path: Path, kind: str
) -> None:
    write(tmp_path, 3)
    head = tmp_path / "HEAD"
    head.unlink()
    if kind == "digits":  # more digits than int() reads
        head.write_bytes(b"9" * 5000 + b" " + b"0" * 64 + b"\n")
    elif kind == "fifo":  # opening it for reading would wait for a writer
        os.mkfifo(head, 0o600)
    elif kind == "endless":  # following the link would read forever
        head.symlink_to("/dev/zero")
    else:
        head.write_bytes(b"1" * 10_000_000)
    assert _finishes(lambda: read_head(tmp_path)) is None
    result = _finishes(lambda: verify_audit(tmp_path))
    assert result.problem is not None
    assert "HEAD" in result.problem


def test_a_fifo_in_the_lock_file_s_place_is_no_lock(tmp_path: Path) -> None:
    write(tmp_path, 3)
    (tmp_path / "audit.lock").unlink()
    os.mkfifo(tmp_path / "audit.lock", 0o600)
    assert _finishes(lambda: verify_audit(tmp_path)).ok


def test_a_line_longer_than_any_record_is_broken_and_never_held_whole(tmp_path: Path) -> None:
    write(tmp_path, 4)
    lines = segment_lines(tmp_path)
    rewrite(tmp_path, [*lines[:2], b"x" * 300_000 + b"\n", *lines[2:]])
    result = verify_audit(tmp_path)
    assert result.problem == "segment-000001.jsonl line 3: not a valid record (far too long)"
    assert [record["seq"] for record in read_records(tmp_path)] == [1, 2, 3, 4]


@pytest.mark.parametrize("kind", ["directory", "fifo", "link"])
def test_a_segment_that_is_no_regular_file_is_tampering(tmp_path: Path, kind: str) -> None:
    write(tmp_path, 3)
    odd = tmp_path / segment_name(2)
    if kind == "directory":
        odd.mkdir()
    elif kind == "fifo":
        os.mkfifo(odd, 0o600)
    else:
        odd.symlink_to(tmp_path / segment_name(1))
    result = _finishes(lambda: verify_audit(tmp_path))
    assert result.problem == f"{odd.name}: not a regular file (a link, directory or FIFO)"


def test_an_unreadable_head_without_segments_is_no_fresh_log(tmp_path: Path) -> None:
    (tmp_path / "HEAD").write_bytes(b"not a head\n")
    assert verify_audit(tmp_path).problem == "HEAD is missing or unreadable"
    (tmp_path / "HEAD").unlink()
    assert verify_audit(tmp_path).ok  # nothing written yet: a fresh log


# --- resuming from an earlier walk (what the console does on every view) -------------------


def _walked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The segment numbers each later `verify_audit` reads, in order."""
    seen: list[int] = []
    walk_segment = audit_verify._walk_segment

    def recording(walk: Any, number: int, path: Path) -> None:
        seen.append(number)
        walk_segment(walk, number, path)

    monkeypatch.setattr(audit_verify, "_walk_segment", recording)
    return seen


def test_a_resumed_walk_reads_only_what_is_new_and_agrees_with_a_whole_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = write(tmp_path, 60, max_segment_bytes=2048)
    first = verify_audit(tmp_path)
    assert first.ok
    assert first.prefix is not None
    numbers = segment_numbers(tmp_path)
    assert len(numbers) > 3
    for index in range(40):  # more records: the newest segment grows, and new ones seal
        log.append("tool_call", principal="anonymous", tool=f"later_{index}", decision="allowed")
    log.commit()
    walked = _walked(monkeypatch)
    resumed = verify_audit(tmp_path, resume=first.prefix)
    assert walked == [n for n in segment_numbers(tmp_path) if n >= numbers[-1]]
    whole = verify_audit(tmp_path)
    assert (resumed.ok, resumed.records, resumed.head_hash) == (True, 100, whole.head_hash)
    log.close()


@pytest.mark.parametrize("tamper", ["edit", "truncate", "remove"])
def test_a_sealed_segment_changed_after_a_walk_is_read_again_and_found(
    tmp_path: Path, tamper: str
) -> None:
    log = write(tmp_path, 60, max_segment_bytes=2048)
    earlier = verify_audit(tmp_path)
    assert earlier.ok
    lines = segment_lines(tmp_path, 2)
    if tamper == "edit":
        # The same length, and the modification time put back: only the file's change
        # time, which nobody can set, tells that it was touched.
        before = os.stat(tmp_path / segment_name(2))
        lines[1] = lines[1].replace(b'"allowed"', b'"allowex"')
        rewrite(tmp_path, lines, 2)
        os.utime(tmp_path / segment_name(2), ns=(before.st_atime_ns, before.st_mtime_ns))
    elif tamper == "truncate":
        rewrite(tmp_path, lines[:-1], 2)
    else:
        (tmp_path / segment_name(2)).unlink()
    resumed = verify_audit(tmp_path, resume=earlier.prefix)
    assert not resumed.ok
    assert resumed.problem == verify_audit(tmp_path).problem
    log.close()


def test_bytes_changed_through_a_shared_mapping_are_found(
    tmp_path: Path,
) -> None:
    log = write(tmp_path, 60, max_segment_bytes=2048)
    path = tmp_path / segment_name(2)
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
        mapped[0:1] = mapped[0:1]  # the first write through the page stamps the file
        mapped.flush()
        earlier = verify_audit(tmp_path)
        assert earlier.ok
        at = mapped.find(b'"allowed"')
        # The page is writable now: on many file systems, no time changes for this.
        mapped[at : at + 9] = b'"ALLOWED"'
        resumed = verify_audit(tmp_path, resume=earlier.prefix)
    assert not resumed.ok
    assert resumed.problem == verify_audit(tmp_path).problem
    log.close()


def test_a_head_pointed_into_the_proved_segments_is_checked_again(tmp_path: Path) -> None:
    log = write(tmp_path, 60, max_segment_bytes=2048)
    log.close()
    earlier = verify_audit(tmp_path)
    assert earlier.ok
    # HEAD names an old record, with a hash that is not that record's.
    (tmp_path / "HEAD").write_text(f"5 {'0' * 64}\n")
    resumed = verify_audit(tmp_path, resume=earlier.prefix)
    assert not resumed.ok
    assert resumed.problem == verify_audit(tmp_path).problem


# --- the command ------------------------------------------------------------------------------


def test_the_command_prints_a_lagging_head_as_a_note_and_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, 5).close()
    lagging = (tmp_path / "HEAD").read_bytes()
    write(tmp_path, 2).close()
    (tmp_path / "HEAD").write_bytes(lagging)
    assert main(["audit", "verify", "--directory", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("ok records=7 segments=1 head=")
    assert err == f"note: {_lag(5, 7, 2)}\n"


def _symlink_refused(link: Path) -> str:
    return (
        f"mymcp: error: {link}: MyMCP audit directory is not a directory: a symlink, which "
        "the server refuses too; name the directory it points to (code=audit_unavailable)\n"
    )


@pytest.mark.parametrize("command", ["verify", "show"])
def test_a_symlinked_directory_is_refused_as_such_not_as_a_broken_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    audit = tmp_path / "audit"
    write(audit, 3).close()
    link = tmp_path / "link"
    link.symlink_to(audit, target_is_directory=True)
    assert main(["audit", command, "--directory", str(link)]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", _symlink_refused(link))
    # In the words `mymcp check` and the server's start use for the same directory.
    with pytest.raises(AuditError) as refused:
        check_audit_directory(link)
    assert refused.value.code == "audit_unavailable"
    assert str(refused.value).startswith(f"{link}: MyMCP audit directory is not a directory: ")


def test_a_configured_symlinked_directory_is_refused_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    audit = tmp_path / "audit"
    write(audit, 3).close()
    link = tmp_path / "link"
    link.symlink_to(audit, target_is_directory=True)
    config = tmp_path / "xdg" / "mymcp" / "config.toml"
    config.parent.mkdir(parents=True, mode=0o700)
    config.write_text(f"schema_version = 8\n[audit]\ndirectory = {json.dumps(str(link))}\n")
    config.chmod(0o600)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert main(["audit", "verify"]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", _symlink_refused(link))


def _from_the_end_as_read_forwards(data: bytes) -> list[bytes | None]:
    """What `_lines_from_the_end` must give: the lines read forwards, last first; the
    last one cut short, and any longer than a record, as None."""
    pieces = data.split(b"\n")
    cut = pieces.pop()
    lines: list[bytes | None] = [None] if cut else []
    lines += [p if len(p) <= MAX_LINE_BYTES else None for p in reversed(pieces)]
    return lines


_LINES = st.lists(
    st.one_of(
        st.binary(max_size=40).map(lambda line: line.replace(b"\n", b"")),
        st.integers(0, 3 * MAX_LINE_BYTES).map(lambda size: b"x" * size),
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(_LINES, st.booleans())
def test_reading_a_segment_from_its_end_agrees_with_reading_it_forwards(
    lines: list[bytes], ended: bool
) -> None:
    data = b"\n".join(lines) + (b"\n" if ended else b"")
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        assert list(_lines_from_the_end(handle)) == _from_the_end_as_read_forwards(data)
