"""What the index hands out, and the per-selection view that patches keep current."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import store
from .model import RECORD_SUFFIX, MemoryRecord, MemoryRecordV2, RelativePath, Scope, location_agrees
from .search import RankCandidate, RecordTerms
from .store import RecordRejected, SkipReason

__all__ = [
    "LINK",
    "IndexedRecord",
    "Outcome",
    "ScanResult",
    "Selection",
    "SelectionView",
    "difference",
    "interpret",
]

# (directory prefix, recursive, include legacy records)
Selection = tuple[RelativePath, bool, bool]


@dataclass(frozen=True, slots=True)
class IndexedRecord:
    """A valid record at its location, with its file digest and cached recall terms."""

    parts: RelativePath
    scope: Scope
    record: MemoryRecord
    digest: bytes
    candidate: RankCandidate

    @property
    def terms(self) -> RecordTerms:
        return self.candidate.terms

    @property
    def scope_relative_path(self) -> str:
        return self.candidate.path


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Valid selected records (unordered), plus bounded counts for logging.

    Equality compares the record tuples element by element, identity first, so an
    unchanged walk is recognised in one C-level pass.
    """

    records: tuple[IndexedRecord, ...]
    candidates: int = 0
    skipped: int = 0
    # The selection this result describes (None for a result that is not kept); values
    # derived from an earlier result of the same selection may be patched, not rebuilt.
    selection: object = field(default=None, compare=False)


# Marks a symlinked entry in an examined directory (counted as a skip, never read).
LINK = object()
Outcome = IndexedRecord | SkipReason


@dataclass(slots=True, eq=False)
class SelectionView:
    """What the last complete walk of one selection found, kept current by patches.

    ``members`` holds the outcome of every candidate file, ``selected`` the members that
    make up the result, ``links`` the symlinked entries counted as skips.
    """

    key: Selection
    members: dict[RelativePath, Outcome]
    selected: dict[RelativePath, IndexedRecord]
    links: set[RelativePath]
    skipped: int
    result: ScanResult

    def covers(self, directory: RelativePath) -> bool:
        """Whether the walk of this selection listed ``directory``."""
        prefix, recursive, _ = self.key
        if recursive:
            return directory[: len(prefix)] == prefix
        return directory == prefix

    def apply(
        self, parts: RelativePath, state: object, removed: list[IndexedRecord]
    ) -> IndexedRecord | None:
        """Put the examined entry ``parts`` in ``state``; returns a record newly selected.

        ``state`` is None (absent or not a candidate), ``LINK`` or the file's outcome.
        A record that leaves the result is appended to ``removed``.
        """
        _, recursive, include_legacy = self.key
        members, selected = self.members, self.selected
        skipped = self.skipped
        old = members.pop(parts, None)
        if isinstance(old, SkipReason):
            skipped -= 1
        if parts in self.links:
            self.links.discard(parts)
            skipped -= 1
        before = selected.get(parts)
        after: IndexedRecord | None = None
        if state is LINK:
            if recursive or parts[-1].endswith(RECORD_SUFFIX):
                self.links.add(parts)
                skipped += 1
        elif isinstance(state, SkipReason):
            members[parts] = state
            skipped += 1
        elif isinstance(state, IndexedRecord):
            members[parts] = state
            if include_legacy or isinstance(state.record, MemoryRecordV2):
                after = state
        if after is None:
            selected.pop(parts, None)
        else:
            selected[parts] = after  # an existing key keeps its position
        if before is not None and before is not after:
            removed.append(before)
        self.skipped = skipped
        return after if after is not before else None


def difference(
    old: tuple[IndexedRecord, ...], new: tuple[IndexedRecord, ...]
) -> tuple[list[IndexedRecord], list[IndexedRecord]]:
    """Records of ``old`` missing from ``new`` and the reverse, by object identity."""
    before = {id(item): item for item in old}
    after = {id(item): item for item in new}
    removed = [item for key, item in before.items() if key not in after]
    added = [item for key, item in after.items() if key not in before]
    return removed, added


def interpret(parts: RelativePath, data: bytes, digest: bytes) -> IndexedRecord | SkipReason:
    scope = Scope(parts[0])
    parse: Callable[[bytes], MemoryRecord] = store.parse_record
    try:
        record = parse(data)
    except RecordRejected as exc:
        return exc.reason
    if not location_agrees(parts, record):
        return SkipReason.PATH_MISMATCH
    relative = "/".join(parts[1:])
    # Ranking terms are extracted on the first recall that needs them, not here.
    candidate = RankCandidate(record.id, relative, record=record)
    return IndexedRecord(parts, scope, record, digest, candidate)
