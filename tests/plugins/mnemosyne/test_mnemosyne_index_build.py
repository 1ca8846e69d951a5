"""The memory index a server builds when it starts: in the background, with progress at
least every two seconds, broken files reported once, and calls that wait for it."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from mymcp.plugins.mnemosyne import Mnemosyne, MnemosyneSettings, create_mnemosyne

pytestmark = pytest.mark.slow

RECORDS = 2100


def _record(memory_id: str, title: str) -> str:
    return json.dumps(
        {
            "schema_version": 2,
            "id": memory_id,
            "scope": "project",
            "namespace": {"kind": "project", "id": "alpha", "label": None},
            "collection": None,
            "kind": "decision",
            "language": "en",
            "title": title,
            "content": f"Content of {title}.",
            "tags": [],
            "provenance": {"origin": "explicit_user_statement", "recorded_via": "memory_remember"},
            "lifecycle": {"state": "active", "revision": 1},
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    directory = tmp_path / "memory" / "project" / "alpha"
    directory.mkdir(parents=True)
    for number in range(RECORDS - 1):
        memory_id = "mem_" + uuid.UUID(int=number + 1).hex
        (directory / f"{memory_id}.json").write_text(_record(memory_id, f"note {number}"))
    (directory / f"mem_{uuid.UUID(int=9999).hex}.json").write_text(
        _record(f"mem_{uuid.UUID(int=9999).hex}", "zebra crossing")
    )
    (directory / "broken.json").write_text("{half")
    return tmp_path / "memory"


def _plugin(root: Path, candidate_limit: int = 200_000) -> Mnemosyne:
    environ = {"MNEMOSYNE_MEMORY_ROOT": str(root), "HOME": str(root.parent)}
    return create_mnemosyne(MnemosyneSettings(candidate_limit=candidate_limit), environ=environ)


class Steps:
    """A clock that advances a fixed step on every reading."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    caplog.set_level(logging.INFO, logger="mymcp")

    def read() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name in ("mymcp.mnemosyne.index", "mymcp.memory.index", "mymcp.memory.store")
        ]

    return read


def test_progress_is_logged_every_two_seconds_and_the_end_summarised(
    root: Path, lines: Callable[[], list[str]]
) -> None:
    plugin = _plugin(root)
    plugin.build_index(clock=Steps(1.5))
    said = lines()
    progress = [line for line in said if line.startswith("index_build indexed=")]
    # Readings come every 1.5 s of the fake clock: the first report is due at the second
    # reading after the start (3 s in), after 512 files, then every other reading.
    assert progress[:3] == [
        "index_build indexed=512/2101",
        "index_build indexed=1024/2101",
        "index_build indexed=1536/2101",
    ]
    index = plugin.service.current_index()
    assert [line for line in said if line.startswith("skipped ")] == [
        f"skipped scope=project file={index.file_id(('project', 'alpha', 'broken.json'))} "
        "reason=invalid_json"
    ]
    assert said[-1].startswith("index_build outcome=done records=2101 skipped=1 seconds=")
    # A second build (a restart over the same, unchanged files) reports the broken file
    # again once, and walks nothing it already knows.
    plugin.build_index(clock=Steps(1.5))
    assert sum("reason=invalid_json" in line for line in lines()) == 1


def test_a_stopped_build_leaves_the_scope_to_the_next_call(
    root: Path, lines: Callable[[], list[str]]
) -> None:
    plugin = _plugin(root)
    plugin.stop_index_build()
    plugin.build_index(clock=Steps(0.1))
    built = [line for line in lines() if line.startswith("index_build ")]
    assert built[-1] == "index_build outcome=stopped indexed=0/2101"
    found = plugin.service.recall({"query": "zebra", "scope": "project"}).payload
    assert [memory["title"] for memory in found["memories"]] == ["zebra crossing"]


def test_a_scope_over_the_candidate_limit_names_the_setting(
    root: Path, lines: Callable[[], list[str]]
) -> None:
    _plugin(root, candidate_limit=100).build_index(clock=Steps(0.1))
    assert (
        "index_build scope=project outcome=candidate_limit_exceeded setting=candidate_limit"
        in lines()
    )


class PausedBuild:
    """A build started on its own thread that stops at its first progress report (256
    files into project, reporting) until `release` is set."""

    def __init__(self, plugin: Mnemosyne) -> None:
        self.paused, self.release = threading.Event(), threading.Event()
        self.readings = 0
        self.thread = threading.Thread(target=plugin.build_index, kwargs={"clock": self.clock})
        self.thread.start()
        assert self.paused.wait(30)

    def clock(self) -> float:  # read at the start and at each progress report
        if self.readings == 1:
            self.paused.set()
            self.release.wait(30)
        self.readings += 1
        return 0.0

    def finish(self) -> None:
        self.release.set()
        self.thread.join(30)


def test_a_call_during_the_build_waits_and_sees_every_file(root: Path) -> None:
    plugin = _plugin(root)
    build = PausedBuild(plugin)
    answers: list[object] = []
    caller = threading.Thread(
        target=lambda: answers.append(
            plugin.service.recall({"query": "zebra", "scope": "project"}).payload
        )
    )
    caller.start()
    build.finish()
    caller.join(30)
    (answer,) = answers
    assert [memory["title"] for memory in answer["memories"]] == ["zebra crossing"]  # type: ignore[index]


def _temp(directory: Path, record_id: str) -> Path:
    """A temp file as an interrupted write leaves it: the record's full text."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".{record_id}.{uuid.uuid4().hex[:16]}.tmp"
    path.write_text(_record(record_id, "left behind by a killed write"))
    return path


def test_the_build_sweeps_interrupted_writes_in_every_scope(
    root: Path, lines: Callable[[], list[str]]
) -> None:
    left = [
        _temp(root / "project" / "alpha", "mem_" + uuid.uuid4().hex),
        _temp(root / "project" / "beta" / "notes", "mem_" + uuid.uuid4().hex),
        _temp(root / "knowledge" / "topic", "mem_" + uuid.uuid4().hex),
    ]
    unrelated = root / "knowledge" / "topic" / ".editor-backup.tmp"
    unrelated.write_text("not ours")
    _plugin(root).build_index(clock=Steps(0.1))
    assert [path for path in left if path.exists()] == []
    assert unrelated.exists()  # only the writer's own temp names are ever swept
    assert sum(
        int(line.rsplit("=", 1)[1]) for line in lines() if line.startswith("temp_sweep ")
    ) == len(left)


def test_the_build_sweeps_a_root_that_holds_no_record_yet(
    tmp_path: Path, lines: Callable[[], list[str]]
) -> None:
    # What kill -9 during the very first memory_remember leaves: directories and a temp
    # file, no record.
    root = tmp_path / "memory"
    left = _temp(root / "self" / "me", "mem_" + uuid.uuid4().hex)
    _plugin(root).build_index(clock=Steps(0.1))
    assert not left.exists()
    # Only the build's own lines: an index closed meanwhile (another test's, collected
    # now) may log its snapshot after them.
    built = [line for line in lines() if line.startswith("index_build ")]
    assert built[-1].startswith("index_build outcome=done records=0 skipped=0 seconds=")


def _other(root: Path, scope: str, kind: tuple[str, str], word: str) -> None:
    memory_id = "mem_" + uuid.uuid4().hex
    body = json.loads(_record(memory_id, word))
    body.update(scope=scope, kind=kind[1])
    body["namespace"] = {"kind": kind[0], "id": "elsewhere", "label": None}
    directory = root / scope / "elsewhere"
    directory.mkdir(parents=True)
    (directory / f"{memory_id}.json").write_text(json.dumps(body))


def test_calls_about_other_scopes_answer_while_a_scope_is_built(root: Path) -> None:
    # preference is built before project, knowledge after it: neither waits for it.
    _other(root, "preference", ("domain", "preference"), "tea")
    _other(root, "knowledge", ("topic", "reference"), "moss")
    plugin = _plugin(root)
    build = PausedBuild(plugin)
    try:
        answers: dict[str, object] = {}
        answered = threading.Event()

        def call() -> None:
            answers["knowledge"] = plugin.service.recall({"query": "moss", "scope": "knowledge"})
            # Meanwhile a file appears in the directory being walked (already listed);
            # the next call applies its event, after another walk than the build's.
            late = "mem_" + uuid.UUID(int=77777).hex
            alpha = root / "project" / "alpha"
            (alpha / f"{late}.json").write_text(_record(late, "late bloomer"))
            answers["preference"] = plugin.service.recall({"query": "tea", "scope": "preference"})
            answered.set()

        caller = threading.Thread(target=call)
        caller.start()
        assert answered.wait(30)
        assert not build.release.is_set()  # answered while project is still being built
        caller.join(30)
        for scope, title in (("preference", "tea"), ("knowledge", "moss")):
            memories = answers[scope].payload["memories"]  # type: ignore[attr-defined]
            assert [memory["title"] for memory in memories] == [title]
    finally:
        build.finish()
    # The build kept what changed behind it: the late file is listed, with every other.
    listed = plugin.service.list({"scope": "project", "page_size": 1}).payload
    assert listed["page"]["total_count"] == RECORDS + 1
    found = plugin.service.recall({"query": "bloomer", "scope": "project"}).payload
    assert [memory["title"] for memory in found["memories"]] == ["late bloomer"]


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o700])
def test_a_root_others_may_write_to_is_named_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int
) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(mode)
    with caplog.at_level(logging.INFO):
        _plugin(root).build_index(clock=Steps(0.1))
    warned = [r.getMessage() for r in caplog.records if "memory_root" in r.getMessage()]
    expected = (
        []
        if mode == 0o700
        else ["memory_root outcome=unsafe_permissions hint=run_mymcp_memory_check"]
    )
    assert warned == expected
    assert all(str(root) not in r.getMessage() for r in caplog.records)  # no path in logs


def test_the_build_counts_nothing_through_a_scope_that_is_a_link(
    root: Path, tmp_path: Path, lines: Callable[[], list[str]]
) -> None:
    # A scope linked elsewhere (to /, say) must not have the build list what is there.
    elsewhere = tmp_path / "elsewhere" / "topic"
    elsewhere.mkdir(parents=True)
    for number in range(600):
        (elsewhere / f"mem_{uuid.UUID(int=number + 1).hex}.json").write_text("{}")
    (root / "knowledge").symlink_to(elsewhere.parent, target_is_directory=True)
    _plugin(root).build_index(clock=Steps(1.5))
    progress = [line for line in lines() if line.startswith("index_build indexed=")]
    assert progress[0] == "index_build indexed=512/2101"


def test_a_tree_deeper_than_the_index_reads_is_counted_and_built_without_recursion(
    root: Path, lines: Callable[[], list[str]]
) -> None:
    # Deeper than the interpreter's recursion limit: a recursive walk would fail.
    top = root / "project" / "alpha"
    deepest = top
    for _ in range(1100):  # not `mkdir(parents=True)`, which recurses too
        deepest = deepest / "d"
        deepest.mkdir()
    try:
        _plugin(root).build_index(clock=Steps(1.5))
        said = lines()
        assert said[-1].startswith("index_build outcome=done records=2101 skipped=2 seconds=")
        assert "index_build indexed=512/2101" in said
    finally:
        while deepest != top:
            deepest.rmdir()
            deepest = deepest.parent


def test_a_build_that_fails_says_so_in_one_line(
    root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = _plugin(root)

    def failing() -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(plugin, "build_index", failing)
    caught: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", caught.append)
    with caplog.at_level(logging.INFO, logger="mymcp"):
        plugin.start_index_build()
        assert plugin._thread is not None
        plugin._thread.join(30)
    assert caught == []  # nothing reached the thread's traceback printer
    assert [r.getMessage() for r in caplog.records if "index_build" in r.getMessage()] == [
        "index_build outcome=error error=RecursionError"
    ]
