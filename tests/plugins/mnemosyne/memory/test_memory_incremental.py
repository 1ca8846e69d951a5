"""Incremental upkeep of the memory index: single-file changes without a walk.

Three mechanisms, each checked for "no full walk" and for the right answer:

* change events that name one entry patch exactly those rows (``MemoryIndex._patch``);
* the list order and cursor checksums change only with the rows that changed;
* remember's duplicate map changes only with the rows that changed.

Derived views follow the row set's generation number (``MemoryIndex.revision``), which
moves exactly when a row changes.
"""

from __future__ import annotations

import json
import os
import random
import string
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    MemoryIndex,
    MemoryOperationError,
    MemoryService,
    MutationService,
    Scope,
    analysis,
)
from mymcp.plugins.mnemosyne.memory import index as index_module
from mymcp.plugins.mnemosyne.memory.model import is_timestamp

from .conftest import Scanned, scan

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def _scan(index: MemoryIndex, namespace: str | None = None, *, limit: int = 10_000) -> Scanned:
    container = () if namespace is None else (namespace,)
    return scan(index, Scope.PROJECT, container, candidate_limit=limit)


def _ids(index: MemoryIndex, namespace: str | None = None) -> set[str]:
    return _scan(index, namespace).ids


def _armed(root: Path) -> MemoryIndex:
    index = MemoryIndex(root)
    assert index.watching
    return index


# -- incremental event handling ---------------------------------------------------------


@linux_only
def test_one_file_edited_added_deleted_and_renamed_without_a_walk(
    root: Path, write: Writer, v1: Factory, walks: list[int], count_reads: dict[str, int]
) -> None:
    for number in range(20):
        write(v1(memory_id=f"n{number}"), f"project/ns/{number}.json")
    index = _armed(root)
    assert _ids(index) == {f"n{number}" for number in range(20)}
    assert len(walks) == 1
    before = dict(count_reads)
    expected = {f"n{number}" for number in range(20)}

    write(v1(memory_id="edited"), "project/ns/3.json")  # edit in place
    expected = expected - {"n3"} | {"edited"}
    assert _ids(index) == expected
    write(v1(memory_id="added"), "project/ns/new.json")  # add
    expected |= {"added"}
    assert _ids(index) == expected
    (root / "project/ns/4.json").unlink()  # delete
    expected -= {"n4"}
    assert _ids(index) == expected
    (root / "project/ns/5.json").rename(root / "project/ns/renamed.json")  # rename
    assert _ids(index) == expected
    assert len(walks) == 1
    # Only the named files were read: the edit, the addition and the renamed file.
    assert count_reads["read"] - before["read"] == 3
    assert len(index) == 20  # one row per file: the deleted and the old name are gone
    # The patched result is exactly what a fresh walk finds.
    fresh = MemoryIndex(root, watch=False)
    assert _ids(fresh) == expected
    assert _scan(fresh).candidates == _scan(index).candidates == 20


@linux_only
def test_a_file_moved_between_watched_directories_is_patched(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="mover"), "project/one/m.json")
    write(v1(memory_id="stay"), "project/two/s.json")
    index = _armed(root)
    assert _ids(index) == {"mover", "stay"}
    assert _ids(index, "one") == {"mover"}
    assert _ids(index, "two") == {"stay"}
    walked = len(walks)
    (root / "project/one/m.json").rename(root / "project/two/m.json")
    # Every proven selection is patched: scope-wide and both namespaces.
    assert _ids(index) == {"mover", "stay"}
    assert _ids(index, "one") == set()
    assert _ids(index, "two") == {"mover", "stay"}
    assert len(walks) == walked


@linux_only
def test_unrelated_entries_keep_the_same_generation(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="one"), "project/ns/one.json")
    index = _armed(root)
    first = _scan(index)
    (root / "project/ns/notes.txt").write_text("not a record")
    temp = root / "project/ns" / f".mem_{'a' * 32}.{'0' * 16}.tmp"
    temp.write_text("a writer's temp file")
    temp.unlink()
    again = _scan(index)
    assert again.revision == first.revision  # no row changed, no derived view moved
    assert again.ids == first.ids
    assert len(walks) == 1


@linux_only
def test_breaking_and_symlinking_a_file_are_skips_without_a_walk(
    root: Path, tmp_path: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="good"), "project/ns/good.json")
    write(v1(memory_id="other"), "project/ns/other.json")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(v1(memory_id="outside")))
    index = _armed(root)
    assert _ids(index) == {"good", "other"}
    (root / "project/ns/good.json").write_text("{broken")
    assert _ids(index) == {"other"}
    (root / "project/ns/other.json").unlink()
    (root / "project/ns/other.json").symlink_to(outside)
    assert _ids(index) == set()
    patched = _scan(index)
    assert len(walks) == 1
    # Counts agree with a fresh walk: one candidate (the broken file; links are not).
    fresh = _scan(MemoryIndex(root, watch=False))
    assert patched.candidates == fresh.candidates == 1
    walked = len(walks)
    (root / "project/ns/other.json").unlink()
    write(v1(memory_id="back"), "project/ns/good.json")
    assert _ids(index) == {"back"}
    assert len(walks) == walked


@linux_only
def test_candidate_limit_still_fails_closed_after_a_patch(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    for number in range(3):
        write(v1(memory_id=f"n{number}"), f"project/{number}.json")
    index = _armed(root)
    assert len(_scan(index, limit=3).records) == 3
    write(v1(memory_id="n3"), "project/3.json")
    with pytest.raises(MemoryOperationError) as caught:
        _scan(index, limit=3)
    assert caught.value.code.value == "candidate_limit_exceeded"
    assert len(_scan(index, limit=4).records) == 4
    assert len(walks) == 1


@linux_only
def test_events_a_patch_cannot_attribute_fall_back_to_a_walk(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="one"), "project/ns/one.json")
    index = _armed(root)
    assert _ids(index, "ns") == {"one"}
    # The selection's own container replaced: named in its parent, but not a file event.
    (root / "project/ns").rename(root / "project/gone")
    (root / "project/ns").mkdir()
    assert _ids(index, "ns") == set()
    assert len(walks) == 2
    # A hard-linked record can change through another directory: it is looked at on
    # every call, without a walk.
    write(v1(memory_id="linked"), "project/ns/l.json")
    os.link(root / "project/ns/l.json", root / "elsewhere.json")
    assert _ids(index, "ns") == {"linked"}
    (root / "elsewhere.json").write_text(json.dumps(v1(memory_id="relinked")))
    assert _ids(index, "ns") == {"relinked"}
    assert len(walks) == 2


@linux_only
def test_own_writes_are_patched_not_walked(root: Path, walks: list[int]) -> None:
    reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    writes = MutationService(reads, 10_000)
    arguments = _remember_args(content="first")
    assert writes.remember(arguments).payload["status"] == "remembered"
    walked = len(walks)
    for number in range(5):
        outcome = writes.remember(_remember_args(content=f"note {number}"))
        assert outcome.payload["status"] == "remembered"
    assert writes.remember(arguments).payload["status"] == "already_exists"
    listed = reads.list({"scope": "project", "namespace_id": "ns", "collection_id": None})
    assert listed.payload["page"]["total_count"] == 6
    assert len(walks) == walked + 1  # the listing's own selection, walked once


# -- listing: the order and checksums follow the changed rows only ---------------------


@pytest.fixture
def item_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts how often a record's share of a list checksum is computed."""
    calls: list[int] = []
    real = index_module._item_hash

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(index_module, "_item_hash", counting)
    return calls


def _page(service: MemoryService, **arguments: Any) -> dict[str, Any]:
    outcome = service.list({"scope": "project", **arguments})
    assert not outcome.is_error, outcome.payload
    return outcome.payload


def _error(service: MemoryService, **arguments: Any) -> str:
    outcome = service.list({"scope": "project", **arguments})
    assert outcome.is_error
    return str(outcome.payload["code"])


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "stat-walk"])
def test_listing_follows_every_change_at_the_cost_of_the_change(
    root: Path,
    write: Writer,
    v2: Factory,
    item_hashes: list[int],
    watch: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if watch and not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux only")
    if not watch:
        monkeypatch.setattr(index_module.Watcher, "create", classmethod(lambda cls: None))
    bodies = [v2(namespace="ns", memory_id=f"mem_{n:032x}", content=f"c{n}") for n in range(7)]
    paths = [write(body) for body in bodies]
    service = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    first = _page(service, page_size=2)
    assert len(item_hashes) == 7  # each record described once, when it was indexed
    cursor = first["page"]["next_cursor"]
    second = _page(service, cursor=cursor)
    again = _page(service, page_size=2)
    assert again == first
    assert [m["reference"]["id"] for m in second["memories"]] == [b["id"] for b in bodies[2:4]]
    assert len(item_hashes) == 7  # nothing changed: no per-item work at all
    # Same identity and path, different file bytes: the snapshot changes.
    write(v2(namespace="ns", memory_id=bodies[5]["id"], content="edited"))
    assert _error(service, cursor=cursor) == "stale_cursor"
    assert len(item_hashes) == 9  # the edited record left and came back, nothing else
    fresh = _page(service, page_size=2)
    assert fresh["page"]["next_cursor"] != cursor
    assert _page(service, cursor=fresh["page"]["next_cursor"])["page"]["number"] == 2
    # Deleted: fewer items, stale again; a cursor beyond the end is invalid, not stale.
    paths[6].unlink()
    assert _error(service, cursor=fresh["page"]["next_cursor"]) == "stale_cursor"
    tail = _page(service, page_size=3)
    assert tail["page"]["total_count"] == 6
    assert len(item_hashes) == 10


def test_list_checksum_is_the_sum_of_each_record_path_and_bytes(
    root: Path, write: Writer, v1: Factory, v2: Factory
) -> None:
    write(v2(namespace="ns"))
    write(v2(namespace="ns", collection="c"))
    write(v1(memory_id="old"), "project/old.json")
    index = MemoryIndex(root, watch=False)
    selection = index.refresh(Scope.PROJECT, recursive=True, candidate_limit=10)
    everything = index.inventory(selection, include_legacy=True)
    items = list(index.records(selection, include_legacy=True))
    expected = sum(index_module._item_hash(item.parts, item.digest) for item in items)
    assert (everything.count, everything.checksum) == (3, expected % (1 << 128))
    canonical = index.inventory(selection, include_legacy=False)
    assert canonical.count == 2
    assert canonical.checksum != everything.checksum
    # Another codec signs the same state differently: cursors never cross processes.
    first, second = CursorCodec.generate(), CursorCodec.generate()
    state = (everything.count, everything.checksum)
    assert first.snapshot_digest(*state) != second.snapshot_digest(*state)


def test_generation_moves_exactly_when_a_row_changes(
    root: Path, write: Writer, v1: Factory
) -> None:
    write(v1(memory_id="a"), "project/a.json")
    write(v1(memory_id="b"), "project/b.json")
    index = MemoryIndex(root, watch=False)
    first = _scan(index)
    assert _scan(index).revision == first.revision  # walked again, nothing changed
    (root / "project/b.json").write_bytes((root / "project/b.json").read_bytes())
    assert _scan(index).revision == first.revision  # same bytes: the verdict stands
    write(v1(memory_id="b2"), "project/b.json")
    second = _scan(index)
    assert second.revision > first.revision
    assert second.ids == {"a", "b2"}


# -- remember: the duplicate map ----------------------------------------------------------


def _remember_args(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "scope": "project",
        "namespace": {"kind": "project", "id": "ns", "label": None},
        "collection": None,
        "kind": "decision",
        "language": "en",
        "title": "Title",
        "content": "Content.",
        "tags": ["one", "Two"],
        "origin": "explicit_user_statement",
    }
    arguments.update(overrides)
    return arguments


@pytest.fixture
def duplicate_keys(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = index_module.duplicate_hash

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    # Indexing a record and the remember lookup both compute keys.
    monkeypatch.setattr(index_module, "duplicate_hash", counting)
    return calls


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "stat-walk"])
def test_duplicate_map_stays_coherent_across_mutations_and_hand_edits(
    root: Path,
    write: Writer,
    v2: Factory,
    duplicate_keys: list[int],
    watch: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if watch and not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux only")
    if not watch:
        monkeypatch.setattr(index_module.Watcher, "create", classmethod(lambda cls: None))
    for number in range(30):
        write(v2(namespace="ns", content=f"filler {number}"))
    reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    writes = MutationService(reads, 10_000)

    def remember(**overrides: Any) -> dict[str, Any]:
        return writes.remember(_remember_args(**overrides)).payload

    def change(tool: str, reference: dict[str, Any], revision: int, **extra: Any) -> None:
        arguments = {"reference": reference, "expected_revision": revision, **extra}
        payload = getattr(writes, tool)(arguments).payload
        assert payload["status"] in ("revised", "archived", "restored", "forgotten"), payload

    created = remember()
    assert created["status"] == "remembered"
    reference = created["reference"]
    built = len(duplicate_keys)
    assert built >= 30  # each record's key, computed once when it was indexed
    # Tags compare casefolded and unordered.
    assert remember(tags=["two", "ONE"]) == {**created, "status": "already_exists"}
    assert len(duplicate_keys) - built <= 4  # later calls: a handful of keys, not 30
    change("archive", reference, 1)
    assert remember()["status"] == "existing_archived"
    change("restore", reference, 2)
    assert remember()["status"] == "already_exists"
    revised = {"namespace_label": None, "title": "Title", "content": "Revised.", "tags": []}
    change("revise", reference, 3, **revised)
    assert remember(content="Revised.", tags=[])["status"] == "already_exists"
    second = remember()  # the original text is free again
    assert second["status"] == "remembered"
    assert remember()["reference"] == second["reference"]
    change("archive", reference, 4)
    change("forget", reference, 5)
    assert remember(content="Revised.", tags=[])["status"] == "remembered"
    # Hand edits: a duplicate written by hand is found, one deleted by hand is not.
    by_hand = v2(namespace="ns", kind="decision", title="By hand", content="Hand.", tags=[])
    path = write(by_hand)
    found = remember(title="By hand", content="Hand.", tags=[])
    assert found["status"] == "already_exists"
    assert found["reference"]["id"] == by_hand["id"]
    path.unlink()
    assert remember(title="By hand", content="Hand.", tags=[])["status"] == "remembered"
    if watch:
        assert len(duplicate_keys) - built <= 40  # never a rebuild over all records


# -- faster tokenisation, same terms ----------------------------------------------------

_ASCII_TEXT = st.text(
    alphabet=st.sampled_from(string.ascii_letters + string.digits + "-._: \n,;!?'\"()/_"),
    max_size=120,
)


@given(_ASCII_TEXT)
def test_ascii_tokenisation_matches_the_general_path(text: str) -> None:
    folded = text.casefold()
    general = analysis._unicode_query_terms(folded)
    assert analysis.query_terms(text) == general
    assert analysis.analyze(text) == [term for _, term in general]


def test_ascii_tokenisation_handles_compounds_and_long_words() -> None:
    text = "ADR-12 v3.11.2 il6 " + "x" * 50 + " " + "-".join(["ab"] * 40) + " end."
    folded = text.casefold()
    assert analysis.query_terms(text) == analysis._unicode_query_terms(folded)
    rng = random.Random(5)
    for _ in range(200):
        sample = "".join(rng.choice("ab1-.: ") for _ in range(rng.randint(0, 30)))
        assert analysis.analyze(sample) == [
            term for _, term in analysis._unicode_query_terms(sample.casefold())
        ]


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("2026-02-28T23:59:59Z", True),
        ("2024-02-29T00:00:00Z", True),
        ("2026-02-29T00:00:00Z", False),
        ("2026-13-01T00:00:00Z", False),
        ("2026-01-01T24:00:00Z", False),
        ("2026-01-01T00:60:00Z", False),
        ("2026-01-01T00:00:60Z", False),
        ("0000-01-01T00:00:00Z", False),
        ("2026-1-01T00:00:00Z", False),
    ],
)
def test_timestamps_are_validated_without_strptime(value: str, valid: bool) -> None:
    assert is_timestamp(value) is valid
