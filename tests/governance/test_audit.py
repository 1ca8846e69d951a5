"""The audit log: chain, tamper detection, rotation, crashes and sharing between processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.errors import AuditError
from mymcp.governance import AuditLog, read_records, verify_audit
from mymcp.governance.audit import GENESIS_HASH, _canonical_record, canonical_json, record_hash

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self, now: float = 1_764_547_200.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def open_log(directory: Path, **overrides: Any) -> AuditLog:
    options: dict[str, Any] = {"max_segment_bytes": 1 << 20, "max_segments": 16}
    options.update(overrides)
    return AuditLog(directory, **options)


def write(directory: Path, count: int, **overrides: Any) -> AuditLog:
    log = open_log(directory, **overrides)
    for index in range(count):
        log.append("tool_call", principal="anonymous", tool=f"tool_{index}", decision="allowed")
        if index % 7 == 0:
            log.commit()
    log.commit()
    return log


def segment_lines(directory: Path, number: int = 1) -> list[bytes]:
    return (directory / f"segment-{number:06d}.jsonl").read_bytes().splitlines(keepends=True)


def rewrite(directory: Path, lines: list[bytes], number: int = 1) -> None:
    (directory / f"segment-{number:06d}.jsonl").write_bytes(b"".join(lines))


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
    record["hash"] = record_hash(record)
    lines[4] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
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


def test_missing_head_is_reported(tmp_path: Path) -> None:
    write(tmp_path, 3)
    (tmp_path / "HEAD").unlink()
    assert verify_audit(tmp_path).problem == "HEAD is missing or unreadable"


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


def test_a_broken_line_inside_a_segment_is_tampering(tmp_path: Path) -> None:
    write(tmp_path, 5)
    lines = segment_lines(tmp_path)
    lines[2] = b'{"seq":3,"time":"2025-\n'
    rewrite(tmp_path, lines)
    assert verify_audit(tmp_path).problem == "segment-000001.jsonl line 3: not a valid record"


def test_auth_failures_are_rate_limited_per_reason(tmp_path: Path) -> None:
    clock = Clock()
    log = AuditLog(tmp_path, max_segment_bytes=1 << 20, max_segments=4, clock=clock)
    for _ in range(50):
        log.append_rate_limited("auth_failure", "rejected")
    log.append_rate_limited("auth_failure", "malformed")
    clock.now += 1.0
    log.append_rate_limited("auth_failure", "rejected")
    log.commit()
    records = [(r["reason"], r["suppressed"]) for r in read_records(tmp_path)]
    assert records == [("rejected", 0), ("malformed", 0), ("rejected", 49)]


def test_unsafe_directory_or_key_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(AuditError) as caught:
        open_log(shared)
    assert caught.value.code == "audit_unavailable"
    private = tmp_path / "private"
    open_log(private).close()
    (private / "audit.key").chmod(0o644)
    with pytest.raises(AuditError):
        open_log(private)
    link = tmp_path / "link"
    link.symlink_to(private)
    with pytest.raises(AuditError):
        open_log(link)


def test_background_writer_commits_and_close_flushes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.start()
    log.append("tool_call", tool="x")
    log.close()  # stops the thread and commits what is queued
    assert [r["tool"] for r in read_records(tmp_path)] == ["x"]


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
    lines[position] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    assert not verify_audit(directory).ok


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
    assert _canonical_record(record) == canonical_json(record)
