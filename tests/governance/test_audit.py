"""The audit writer: records and their encoding, rotation, rate limits, failures, the
directory's checks, crashes and sharing between processes (`verify` is tested in
test_audit_verify.py)."""

from __future__ import annotations

import errno
import os
import signal
import stat
import string
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.config import parse_host_configuration
from mymcp.errors import AuditError
from mymcp.governance import (
    NUMBER,
    WORD,
    AuditLog,
    RecordShape,
    check_audit_directory,
    open_audit,
    read_records,
    verify_audit,
)
from mymcp.governance.audit import FLUSH_INTERVAL_SECONDS
from mymcp.governance.audit_format import (
    GENESIS_HASH,
    canonical_json,
    canonical_record,
    prepare_directory,
    record_hash,
    segment_name,
    segments,
)
from tests.governance.audit_logs import REPO, Clock, open_log, segment_numbers, write


def test_records_chain_and_verify(tmp_path: Path) -> None:
    clock = Clock()
    log = AuditLog(tmp_path, max_segment_bytes=1 << 20, max_segments=4, clock=clock)
    log.append("session_open", principal="operator:alice", session=log.session_tag("s1"))
    clock.now += 1.5
    log.append("tool_call", principal="operator:alice", tool="memory_recall", decision="allowed")
    log.commit()
    records = list(read_records(tmp_path))
    assert [r["seq"] for r in records] == [1, 2]
    assert records[0]["prev"] == GENESIS_HASH
    assert records[1]["prev"] == records[0]["hash"]
    assert records[0]["time"] == "2025-12-01T00:00:00.000Z"
    assert records[1]["time"] == "2025-12-01T00:00:01.500Z"
    assert all(record_hash(r) == r["hash"] for r in records)
    result = verify_audit(tmp_path)
    assert (result.ok, result.records, result.segments) == (True, 2, 1)
    assert result.head_hash == records[-1]["hash"]
    assert (tmp_path / "HEAD").read_text() == f"2 {records[-1]['hash']}\n"
    for name in ("audit.key", "segment-000001.jsonl", "HEAD"):
        assert (tmp_path / name).stat().st_mode & 0o077 == 0
    log.close()


def test_a_key_lost_beside_existing_records_is_replaced_and_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = write(tmp_path, 3)
    old_digest = log.digest({"q": 1})
    log.close()
    (tmp_path / "audit.key").unlink()
    with caplog.at_level("WARNING", logger="mymcp.audit"):
        log = open_log(tmp_path)
    log.commit()
    assert log.digest({"q": 1}) != old_digest  # later digests no longer match earlier ones
    events = [record["event"] for record in read_records(tmp_path)]
    assert events == ["tool_call"] * 3 + ["audit_key_replaced"]
    assert [r.getMessage() for r in caplog.records] == ["audit outcome=key_replaced"]
    assert verify_audit(tmp_path).ok
    log.close()
    # A new log is no replacement: nothing to record.
    fresh = tmp_path / "fresh"
    open_log(fresh).close()
    assert list(read_records(fresh)) == []


def test_digests_hide_values_but_match_equal_arguments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.digest({"query": "my secret plans", "tags": ["a", "b"]})
    assert first == log.digest({"tags": ["a", "b"], "query": "my secret plans"})
    assert first != log.digest({"query": "my secret plans", "tags": ["b", "a"]})
    assert first != log.digest({"query": "my secret plans ", "tags": ["a", "b"]})
    assert log.digest({"x": "\ud800"}) != log.digest({"x": "\ud801"})  # never fails
    log.append("tool_call", tool="memory_recall", args_digest=first)
    log.commit()
    data = (tmp_path / "segment-000001.jsonl").read_bytes()
    assert b"secret" not in data
    assert len(log.session_tag("abc")) == 32
    assert log.session_tag("abc") != log.session_tag("abd")
    # Another install has another key: digests cannot be compared across installs.
    assert open_log(tmp_path / "other").digest({"query": "my secret plans"}) != log.digest(
        {"query": "my secret plans"}
    )


def test_the_digest_is_the_documented_hmac(tmp_path: Path) -> None:
    import hashlib
    import hmac

    log = open_log(tmp_path)
    key = (tmp_path / "audit.key").read_bytes()
    for value in ({}, {"query": "x", "limit": 3}, [1, "é"]):
        expected = hmac.new(key, b"arguments\x00" + canonical_json(value), hashlib.sha256)
        assert log.digest(value) == expected.hexdigest()


def test_rotation_and_retention_keep_the_chain_verifiable(tmp_path: Path) -> None:
    write(tmp_path, 400, max_segment_bytes=4096, max_segments=3)
    segments = sorted(tmp_path.glob("segment-*.jsonl"))
    assert len(segments) == 3
    assert all(path.stat().st_size <= 4096 for path in segments)
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    records = list(read_records(tmp_path))
    removed = [r for r in records if r["event"] == "segment_removed"]
    assert removed, "removing a segment is itself recorded"
    assert records[-1]["seq"] == result.records + records[0]["seq"] - 1
    total_tool_calls = sum(1 for r in records if r["event"] == "tool_call")
    assert total_tool_calls < 400  # the oldest records are gone, boundedly
    # Each removal names the hash the next segment's first record chains from.
    first_kept = records[0]
    assert any(r["last_hash"] == first_kept["prev"] for r in removed)


@pytest.mark.parametrize("content", [b"", b"x", b'{"seq":'])
@pytest.mark.parametrize("first", [999_000, None])  # far after the chain, or right after it
def test_files_planted_after_the_chain_never_make_retention_remove_history(
    tmp_path: Path, content: bytes, first: int | None
) -> None:
    """Files named like later segments holding no complete line (empty, or what looks
    like a write interrupted by a crash) hold no history: counting them for retention
    would remove real segments, each recorded as ordinary retention, and the chain would
    still verify once the planted files were gone."""
    write(tmp_path, 120, max_segment_bytes=4096, max_segments=16).close()
    before = segment_numbers(tmp_path)
    assert 2 < len(before) < 16
    start = before[-1] + 1 if first is None else first
    planted = [tmp_path / segment_name(start + n) for n in range(16)]
    for path in planted:
        path.write_bytes(content)
        path.chmod(0o600)
    log = open_log(tmp_path, max_segment_bytes=4096, max_segments=16)
    log.append("tool_call", principal="anonymous", tool="after", decision="allowed")
    log.close()
    for path in planted:
        path.unlink()
    assert segment_numbers(tmp_path)[: len(before)] == before  # nothing of it removed
    records = list(read_records(tmp_path))
    assert not [r for r in records if r["event"] == "segment_removed"]
    assert records[0]["seq"] == 1
    assert verify_audit(tmp_path).ok


def test_retention_keeps_its_count_of_real_segments_past_a_torn_fragment(
    tmp_path: Path,
) -> None:
    """A crash while a new segment's first line was written leaves a fragment holding no
    line. It does not count as one of the segments kept, and it is removed, recorded,
    once it is older than all of them."""
    write(tmp_path, 60, max_segment_bytes=4096, max_segments=3).close()
    torn = segment_numbers(tmp_path)[-1] + 1
    (tmp_path / segment_name(torn)).write_bytes(b'{"seq":')
    log = open_log(tmp_path, max_segment_bytes=4096, max_segments=3)
    kept: list[list[int]] = []
    for index in range(200):
        log.append("tool_call", principal="anonymous", tool=f"later_{index}", decision="allowed")
        log.commit()
        numbers = segment_numbers(tmp_path)
        kept.append([n for n in numbers if n != torn])
        if torn not in numbers:
            break
    log.close()
    assert all(len(numbers) == 3 for numbers in kept)  # three real ones, fragment or not
    assert torn not in segment_numbers(tmp_path)  # removed, once older than all three
    records = list(read_records(tmp_path))
    removed = [r["segment"] for r in records if r["event"] == "segment_removed"]
    assert torn in removed  # and recorded
    assert kept[-1][0] > torn
    assert verify_audit(tmp_path).ok


def test_a_segment_is_removed_only_once_its_removal_record_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unlink = Path.unlink
    seen: list[tuple[str, list[str]]] = []

    def observed(path: Path, missing_ok: bool = False) -> None:
        if path.name.startswith("segment-"):
            removals = [
                segment_name(r["segment"])
                for r in read_records(path.parent)
                if r["event"] == "segment_removed"
            ]
            seen.append((path.name, removals))
        unlink(path, missing_ok)

    monkeypatch.setattr(Path, "unlink", observed)
    write(tmp_path, 300, max_segment_bytes=4096, max_segments=3).close()
    assert seen
    assert all(name in removals for name, removals in seen)


def test_a_crash_between_the_removal_record_and_the_removal_is_harmless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, 60, max_segment_bytes=4096, max_segments=50).close()
    kept = len(segment_numbers(tmp_path))
    unlink = Path.unlink

    def refuse(path: Path, missing_ok: bool = False) -> None:
        raise OSError(errno.EIO, "simulated crash")

    monkeypatch.setattr(Path, "unlink", refuse)
    log = open_log(tmp_path, max_segment_bytes=4096, max_segments=kept - 1)
    log.append("tool_call", tool="x", decision="allowed")
    with pytest.raises(AuditError):
        log.commit()
    assert len(segment_numbers(tmp_path)) == kept  # recorded as removed, still there
    assert verify_audit(tmp_path).ok
    monkeypatch.setattr(Path, "unlink", unlink)
    log.append("tool_call", tool="y", decision="allowed")
    log.commit()
    log.close()
    assert len(segment_numbers(tmp_path)) == kept - 1
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert [r["tool"] for r in read_records(tmp_path) if r["event"] == "tool_call"][-2:] == [
        "x",
        "y",
    ]


def test_head_is_fsynced_before_its_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    calls: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def record_fsync(fd: int) -> None:
        calls.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        fsync(fd)

    def record_replace(source: Any, target: Any, **kwargs: Any) -> None:
        calls.append(("replace", os.path.basename(str(target))))
        replace(source, target, **kwargs)

    monkeypatch.setattr(os, "fsync", record_fsync)
    monkeypatch.setattr(os, "replace", record_replace)
    log.append("tool_call", tool="x")
    log.commit()
    monkeypatch.undo()
    log.close()
    head_temporary = next(i for i, (_, name) in enumerate(calls) if name.startswith(".HEAD"))
    renamed = calls.index(("replace", "HEAD"))
    assert calls[0] == ("fsync", "segment-000001.jsonl")  # the records first
    assert head_temporary < renamed
    assert ("fsync", tmp_path.name) in calls[renamed + 1 :]


def test_auth_failures_are_rate_limited_and_every_suppressed_count_is_written(
    tmp_path: Path,
) -> None:
    clock, ticks = Clock(), Clock(100.0)
    log = AuditLog(
        tmp_path, max_segment_bytes=1 << 20, max_segments=4, clock=clock, monotonic=ticks
    )
    for _ in range(50):
        log.append_rate_limited("auth_failure", "rejected")
    log.append_rate_limited("auth_failure", "malformed")
    clock.now -= 3600  # the wall clock jumps back: the window is measured monotonically
    ticks.now += 0.5
    log.append_rate_limited("auth_failure", "rejected")
    log.commit()  # still inside the second: nothing suppressed is written yet
    assert [r["event"] for r in read_records(tmp_path)] == ["auth_failure", "auth_failure"]
    ticks.now += 0.6
    log.commit()  # the second is over: what it suppressed is counted, without a new failure
    for _ in range(4):  # a final burst
        log.append_rate_limited("auth_failure", "malformed")
    log.close()  # ... whose count is written at close
    records = [(r["event"], r["reason"], r.get("count")) for r in read_records(tmp_path)]
    assert records == [
        ("auth_failure", "rejected", None),
        ("auth_failure", "malformed", None),
        ("auth_failure_suppressed", "rejected", 50),
        ("auth_failure", "malformed", None),
        ("auth_failure_suppressed", "malformed", 3),
    ]


# -- failures while writing --------------------------------------------------------------------


def _is_segment(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl")


def _fsync_fails_once() -> Any:
    fsync, failed = os.fsync, []

    def fsync_fails_once(fd: int) -> None:
        if _is_segment(fd) and not failed:
            failed.append(fd)
            raise OSError(errno.EIO, "simulated")  # the bytes are in the file already
        fsync(fd)

    return fsync_fails_once


def _disk_fills() -> Any:
    write, calls = os.write, []

    def disk_fills(fd: int, data: Any) -> int:
        # As a filling disk does: a short write (ending inside a line), then a failure.
        if _is_segment(fd) and len(calls) < 2:
            calls.append(fd)
            if len(calls) == 1:
                return write(fd, bytes(data)[: len(data) // 2 + 7])
            raise OSError(errno.ENOSPC, "simulated")
        return write(fd, data)

    return disk_fills


@pytest.mark.parametrize(("name", "fault"), [("fsync", _fsync_fails_once), ("write", _disk_fills)])
def test_a_failure_after_bytes_reached_the_file_does_not_duplicate_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fault: Any
) -> None:
    log = open_log(tmp_path)
    log.append("tool_call", tool="a")
    log.commit()
    monkeypatch.setattr(os, name, fault())
    for tool in ("b", "c", "d"):
        log.append("tool_call", tool=tool)
    with pytest.raises(AuditError):
        log.commit()
    log.append("tool_call", tool="e")
    log.commit()
    log.close()
    events = [(r["event"], r.get("tool")) for r in read_records(tmp_path)]
    tools = [tool for event, tool in events if event == "tool_call"]
    assert tools == ["a", "b", "c", "d", "e"]  # each once, in order
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    # A line cut short is a torn line the next write recovers from, not tampering.
    assert (("audit_recovered", None) in events) == (name == "write")


class _FullDisk:
    """A disk that fills in the middle of a line and stays full until `free`: every
    segment write then fails having written nothing, though new files can still be
    created (as on tmpfs)."""

    def __init__(self) -> None:
        self.full = False
        self._short = False
        self._write = os.write

    def write(self, fd: int, data: Any) -> int:
        if not self.full or not _is_segment(fd):
            return self._write(fd, data)
        if not self._short:
            self._short = True
            return self._write(fd, bytes(data)[: len(data) // 2 + 7])
        raise OSError(errno.ENOSPC, "simulated")


def test_a_disk_that_stays_full_for_a_while_leaves_a_chain_that_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    log.append("tool_call", tool="a")
    log.commit()
    disk = _FullDisk()
    monkeypatch.setattr(os, "write", disk.write)
    disk.full = True
    for tool in ("b", "c", "d"):
        log.append("tool_call", tool=tool)
        with pytest.raises(AuditError):
            log.commit()
    # A failed attempt left the next segment created and empty behind the torn line;
    # read while the disk is still full (or after a stop), that is a crash's torn line.
    assert [p.stat().st_size == 0 for _, p in segments(tmp_path)] == [False, True]
    during = verify_audit(tmp_path)
    assert during.ok, during.problem
    disk.full = False
    log.append("tool_call", tool="e")
    log.commit()
    log.close()
    events = [(r["event"], r.get("tool")) for r in read_records(tmp_path)]
    assert [tool for event, tool in events if event == "tool_call"] == ["a", "b", "c", "d", "e"]
    assert ("audit_recovered", None) in events
    result = verify_audit(tmp_path)
    assert result.ok, result.problem


def test_after_a_failed_write_calls_are_refused_at_once_for_an_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    log = open_log(tmp_path, monotonic=lambda: now[0])
    log.append("tool_call", tool="a")
    log.commit()
    assert not log.refusing()
    disk = _FullDisk()
    monkeypatch.setattr(os, "write", disk.write)
    disk.full = True
    log.append("tool_call", tool="b")
    with pytest.raises(AuditError):
        log.commit()
    assert log.refusing()
    now[0] += FLUSH_INTERVAL_SECONDS  # the background writer's next try is due
    assert not log.refusing()
    disk.full = False
    log.commit()
    assert not log.refusing()
    log.close()


def test_a_full_disk_does_not_stop_a_start_whose_key_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_log(tmp_path).close()
    from mymcp.governance import audit_format

    def disk_full(*_: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(audit_format, "create_private_file", disk_full)
    open_log(tmp_path).close()  # the key is read, not written again


def test_a_fifo_under_a_segments_name_refuses_writes_instead_of_blocking(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    log.append("tool_call", tool="a")
    log.commit()
    log.close()
    segment = tmp_path / segment_name(1)
    segment.unlink()
    os.mkfifo(segment, 0o600)
    planted = open_log(tmp_path)
    planted.append("tool_call", tool="b")
    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            planted.commit()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    writer = threading.Thread(target=commit, daemon=True)
    writer.start()
    writer.join(timeout=30)  # it used to block for good, holding the audit lock
    assert not writer.is_alive()
    (error,) = outcome
    assert isinstance(error, AuditError)
    assert error.code == "audit_unavailable"


# -- encoding ---------------------------------------------------------------------------------

_flat_values = st.one_of(
    st.text(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
)


@given(st.dictionaries(st.text(min_size=1, max_size=12), _flat_values, max_size=14))
def test_the_fast_record_encoding_is_the_canonical_one(record: dict[str, Any]) -> None:
    assert canonical_record(record) == canonical_json(record)


_member_names = st.text(min_size=1, max_size=10).filter(
    lambda name: name not in ("event", "prev", "seq", "time")
)
_words = st.text(alphabet=string.ascii_letters + string.digits + "_", max_size=70)
_numbers = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
# A varying member: of no declared kind (any flat value, escaped), a word, or a number.
_varying = st.one_of(
    st.tuples(st.none(), _flat_values),
    st.tuples(st.just(WORD), _words),
    st.tuples(st.just(NUMBER), _numbers),
)


@given(
    event=st.text(max_size=10),
    fixed=st.dictionaries(_member_names, _flat_values, max_size=6),
    varying=st.dictionaries(_member_names, _varying, max_size=6),
    prev=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    seq=st.integers(min_value=1, max_value=2**40),
)
def test_a_shaped_record_is_encoded_exactly_as_the_canonical_one(
    event: str,
    fixed: dict[str, Any],
    varying: dict[str, tuple[str | None, Any]],
    prev: str,
    seq: int,
) -> None:
    fixed = {name: value for name, value in fixed.items() if name not in varying}
    names = tuple(varying)
    kinds = {name: kind for name, (kind, _) in varying.items() if kind is not None}
    shape = RecordShape(event, fixed, names, kinds)
    values = tuple(value for _, value in varying.values())
    moment = "2026-12-01T09:12:03.418Z"
    expected = {"event": event, **fixed, **dict(zip(names, values, strict=True))}
    expected.update(prev=prev, seq=seq, time=moment)
    assert shape.encode(values, prev, seq, moment) == canonical_json(expected)


@given(
    declared=st.lists(
        st.sampled_from(["args_digest", "call", "duration_ms", "outcome", "approval"]),
        unique=True,
    ),
    words=st.lists(_words, min_size=5, max_size=5),
    number=_numbers,
    prev=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    seq=st.integers(min_value=1, max_value=2**40),
)
def test_a_shape_whose_values_arrive_in_slot_order_encodes_them_in_place(
    declared: list[str], words: list[str], number: float, prev: str, seq: int
) -> None:
    # The dispatcher's shapes: every varying member a declared word or number, named so
    # that the values arrive in the order of their slots (sorted) — and in any other order.
    for names in (tuple(sorted(declared)), tuple(declared)):
        kinds = {name: NUMBER if name == "duration_ms" else WORD for name in names}
        values = tuple(
            number if name == "duration_ms" else words[index] for index, name in enumerate(names)
        )
        shape = RecordShape("tool_call", {"decision": "allowed", "tool": "t"}, names, kinds)
        moment = "2026-12-01T09:12:03.418Z"
        expected = {"event": "tool_call", "decision": "allowed", "tool": "t"}
        expected.update(zip(names, values, strict=True))
        expected.update(prev=prev, seq=seq, time=moment)
        assert shape.encode(values, prev, seq, moment) == canonical_json(expected)


# -- the directory ----------------------------------------------------------------------------


def test_unsafe_directory_or_key_is_refused_naming_the_path(tmp_path: Path) -> None:
    for mode in (0o777, 0o755, 0o750, 0o701):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        with pytest.raises(AuditError) as caught:
            open_log(shared)
        assert caught.value.code == "audit_unavailable"
        assert str(shared) in str(caught.value)
        assert f"chmod 700 {shared}" in str(caught.value)
        assert str(shared) not in caught.value.message  # what logs see: no path
        with pytest.raises(AuditError):
            check_audit_directory(shared)
    private = tmp_path / "private"
    open_log(private).close()
    (private / "audit.key").chmod(0o644)
    with pytest.raises(AuditError) as caught:
        open_log(private)
    assert str(private / "audit.key") in str(caught.value)
    with pytest.raises(AuditError):
        check_audit_directory(private)
    link = tmp_path / "link"
    link.symlink_to(private)
    with pytest.raises(AuditError):
        open_log(link)
    with pytest.raises(AuditError):
        check_audit_directory(link)


@pytest.mark.usefixtures("umask_022")
def test_every_directory_a_first_start_creates_is_private(tmp_path: Path) -> None:
    # The default audit directory under an XDG_STATE_HOME that does not exist yet: the
    # start creates three levels, and all three hold (or lead to) the audit key.
    tmp_path.chmod(0o755)
    state = tmp_path / "state2"
    configuration = parse_host_configuration(b"schema_version = 8\n[audit]\nenabled = true\n")
    log = open_audit(configuration, {"XDG_STATE_HOME": str(state)})
    assert log is not None
    log.close()
    for made in (state, state / "mymcp", state / "mymcp" / "audit"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # the user's: left alone


def test_a_file_in_the_way_of_the_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    with pytest.raises(AuditError) as caught:
        open_log(tmp_path / "state" / "mymcp" / "audit")
    assert caught.value.code == "audit_unavailable"
    assert str(tmp_path / "state" / "mymcp" / "audit") in str(caught.value)
    assert "Not a directory" in str(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 54321, 54321)
    with pytest.raises(AuditError) as caught:
        open_log(foreign)
    assert "belongs to another user" in str(caught.value)
    with pytest.raises(AuditError):
        check_audit_directory(foreign)


def test_checking_the_directory_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "state" / "audit"
    assert check_audit_directory(missing) is False
    assert not (tmp_path / "state").exists()
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    assert check_audit_directory(empty) is True
    assert list(empty.iterdir()) == []
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(AuditError):
        check_audit_directory(blocked / "audit")


def test_background_writer_commits_and_close_flushes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.start()
    log.append("tool_call", tool="x")
    log.close()  # stops the thread and commits what is queued
    assert [r["tool"] for r in read_records(tmp_path)] == ["x"]


# -- processes ----------------------------------------------------------------------------------


def _prepare_at_once(directory: Path, count: int) -> list[bytes | BaseException]:
    """What `count` threads released together get from `prepare_directory(directory)`."""
    start = threading.Barrier(count)
    outcomes: list[bytes | BaseException] = []

    def prepare() -> None:
        start.wait()
        try:
            outcomes.append(prepare_directory(directory))
        except BaseException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_servers_starting_together_read_one_whole_key(tmp_path: Path) -> None:
    # Several processes sharing one audit directory may start at the same moment: each
    # must find either no key (and make it) or the whole key another one made.
    for attempt in range(30):
        directory = tmp_path / f"audit{attempt}"
        outcomes = _prepare_at_once(directory, 6)
        assert len(outcomes) == 6
        assert len(set(outcomes)) == 1, outcomes
        assert isinstance(outcomes[0], bytes)
        assert len(outcomes[0]) == 32
        assert sorted(os.listdir(directory)) == ["audit.key"]


_WRITER = """
import sys
from pathlib import Path
from mymcp.governance import AuditLog
log = AuditLog(Path(sys.argv[1]), max_segment_bytes=int(sys.argv[3]), max_segments=1000)
for index in range(int(sys.argv[2])):
    log.append("tool_call", tool=f"{sys.argv[4]}{index}", decision="allowed")
    if index % 3 == 0:
        log.commit()
        print(index, flush=True)
log.commit()
print("done", flush=True)
"""


def _writer(
    directory: Path, count: int, tag: str, segment_bytes: int = 1 << 20
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(directory), str(count), str(segment_bytes), tag],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_processes_share_one_directory_without_breaking_the_chain(tmp_path: Path) -> None:
    first = _writer(tmp_path, 600, "a", 8192)
    second = _writer(tmp_path, 600, "b", 8192)
    for process in (first, second):
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        assert out.splitlines()[-1] == "done"
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    tools = [r["tool"] for r in read_records(tmp_path)]
    assert len(tools) == 1200
    assert sorted(tools) == sorted([f"a{i}" for i in range(600)] + [f"b{i}" for i in range(600)])
    # Each process's own records stay in its order.
    for tag in ("a", "b"):
        mine = [int(t[1:]) for t in tools if t[0] == tag]
        assert mine == sorted(mine)


@pytest.mark.slow
def test_kill_9_during_a_write_burst_leaves_a_verifiable_log(tmp_path: Path) -> None:
    writer = _writer(tmp_path, 1_000_000, "k", 16384)
    assert writer.stdout is not None
    for _ in range(200):  # wait until it is well into the burst
        writer.stdout.readline()
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    writer.stdout.close()
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert result.records >= 199 * 3 + 1  # the 200th line is printed after record 598
    log = open_log(tmp_path, max_segment_bytes=16384)
    log.append("tool_call", tool="after_restart")
    log.commit()
    after = verify_audit(tmp_path)
    assert after.ok, after.problem
    assert after.records >= result.records + 1


# A writer that dies (SIGKILL, as a power cut would stop it) in the middle of writing a
# batch: the kernel has taken part of the bytes, so the file ends inside a line.
_DIES_MID_WRITE = """
import os, signal, sys
from pathlib import Path
from mymcp.governance import AuditLog
write = os.write
def torn(fd, data):
    if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl") and len(data) > 200:
        write(fd, bytes(data)[: len(data) // 2 + 7])
        os.kill(os.getpid(), signal.SIGKILL)
    return write(fd, data)
log = AuditLog(Path(sys.argv[1]), max_segment_bytes=1 << 20, max_segments=16)
log.append("tool_call", tool="before", decision="allowed")
log.commit()
os.write = torn
for index in range(20):
    log.append("tool_call", tool=f"lost{index}", decision="allowed")
log.commit()
"""


@pytest.mark.slow
def test_a_writer_killed_inside_a_line_leaves_a_torn_line_verify_explains(
    tmp_path: Path,
) -> None:
    died = subprocess.run(
        [sys.executable, "-c", _DIES_MID_WRITE, str(tmp_path)], cwd=REPO, timeout=60
    )
    assert died.returncode == -signal.SIGKILL
    data = (tmp_path / "segment-000001.jsonl").read_bytes()
    assert not data.endswith(b"\n")  # really torn
    result = verify_audit(tmp_path)
    assert result.ok, result.problem
    assert result.records > 1  # the complete lines before the tear count
    # The commit died before it replaced HEAD, which still names the first record.
    beyond = result.records - 1
    assert result.notes == (
        "torn final line in segment-000001.jsonl (a crash during a write)",
        f"HEAD lags the log: it names seq 1, the log ends at seq {result.records}, records "
        f"beyond it: {beyond} (left by a crash or a failed write between writing records "
        "and replacing HEAD, or by HEAD set back by hand)",
    )
    log = open_log(tmp_path)
    log.append("tool_call", tool="after_restart")
    log.close()
    after = verify_audit(tmp_path)
    assert after.ok, after.problem
    assert [r["event"] for r in read_records(tmp_path)][-2:] == ["audit_recovered", "tool_call"]
