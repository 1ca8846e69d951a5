"""Bounded, no-follow directory walking under a scope: which files are candidates at all."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import _filesystem
from ._filesystem import ChildState, close_quietly
from ._record_format import SkipReason
from .model import (
    MAX_DIRECTORY_DEPTH,
    RECORD_SUFFIX,
    ErrorCode,
    MemoryOperationError,
    RelativePath,
    Scope,
)

__all__ = [
    "CandidateVisitor",
    "DirectoryHook",
    "WalkStats",
    "log_skip",
    "open_container",
    "walk_candidates",
]

_store_log = logging.getLogger("mymcp.memory.store")


def log_skip(scope: Scope, reason: SkipReason) -> None:
    """Report a passed-over entry with nothing but scope and reason (decision D6)."""
    _store_log.warning("skipped scope=%s reason=%s", scope.value, reason.value)


@dataclass(slots=True)
class WalkStats:
    """Counts gathered during one walk; also enforces the candidate bound."""

    scope: Scope
    limit: int
    candidates: int = 0
    skipped: int = 0
    seen: set[RelativePath] = field(default_factory=set)
    # Symlinked entries counted as skips, so a later event about one can be accounted.
    links: set[RelativePath] = field(default_factory=set)

    def skip(self, reason: SkipReason) -> None:
        self.skipped += 1
        log_skip(self.scope, reason)


# Called once per candidate ``*.json`` entry that is not a symlink: the open parent
# directory handle (valid only during the call), the path parts, and the entry's lstat
# result (None when even that failed).
CandidateVisitor = Callable[[int, RelativePath, "os.stat_result | None"], None]
# Called with every directory handle a walk opens (root and scope included), right after
# opening and before listing it, with its root-relative parts: the change watcher arms
# itself there, so nothing can change unseen between the listing and the watch.
DirectoryHook = Callable[[int, RelativePath], None]


def open_container(
    root: Path, parts: RelativePath, scope: Scope, on_directory: DirectoryHook | None = None
) -> int | None:
    """Open ``root/parts...`` one no-follow step at a time.

    None when any step is missing or a symlink (skipped); a step that exists but is not a
    readable directory makes the whole source unavailable.
    """
    fd = _filesystem.open_root(root)
    if fd is not None and on_directory is not None:
        on_directory(fd, ())
    for depth, name in enumerate(parts, 1):
        if fd is None:
            return None
        state, child = _filesystem.open_child_directory(fd, name)
        close_quietly(fd)
        fd = child
        if fd is not None and on_directory is not None:
            on_directory(fd, parts[:depth])
        if state is ChildState.SYMLINK:
            log_skip(scope, SkipReason.SYMLINK)
        elif state in (ChildState.NOT_DIRECTORY, ChildState.UNREADABLE):
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    return fd


def walk_candidates(
    fd: int,
    prefix: RelativePath,
    depth: int,
    stats: WalkStats,
    visit: CandidateVisitor,
    *,
    recursive: bool,
    on_directory: DirectoryHook | None = None,
) -> None:
    """Visit candidate files under an open directory at ``depth`` below the scope.

    Raises ``candidate_limit_exceeded`` as soon as the bound is passed, so no partial
    view ever escapes. The top directory failing to list makes the source unavailable.
    A visitor rather than a generator: one call per file is markedly cheaper than
    resuming a chain of nested generators on large roots.
    """
    _walk(fd, prefix, depth, stats, visit, on_directory, recursive=recursive, top=True)


def _walk(
    fd: int,
    prefix: RelativePath,
    depth: int,
    stats: WalkStats,
    visit: CandidateVisitor,
    on_directory: DirectoryHook | None,
    *,
    recursive: bool,
    top: bool,
) -> None:
    try:
        with os.scandir(fd) as iterator:
            entries = list(iterator)
    except OSError:
        if top:
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        stats.skip(SkipReason.UNREADABLE)
        return
    for entry in entries:
        name = entry.name
        try:
            is_link = entry.is_symlink()
            is_dir = not is_link and entry.is_dir(follow_symlinks=False)
        except OSError:
            stats.skip(SkipReason.UNREADABLE)
            continue
        if is_link:
            # A link's target is never examined, so in a one-level listing only links
            # that look like record files are worth reporting.
            if recursive or name.endswith(RECORD_SUFFIX):
                stats.skip(SkipReason.SYMLINK)
                stats.links.add((*prefix, name))
        elif is_dir:
            if recursive:
                _descend(fd, name, prefix, depth + 1, stats, visit, on_directory)
        elif name.endswith(RECORD_SUFFIX):
            stats.candidates += 1
            if stats.candidates > stats.limit:
                raise MemoryOperationError(ErrorCode.CANDIDATE_LIMIT_EXCEEDED)
            parts = (*prefix, name)
            stats.seen.add(parts)
            try:
                info: os.stat_result | None = entry.stat(follow_symlinks=False)
            except OSError:
                info = None
            visit(fd, parts, info)


def _descend(
    fd: int,
    name: str,
    prefix: RelativePath,
    depth: int,
    stats: WalkStats,
    visit: CandidateVisitor,
    on_directory: DirectoryHook | None,
) -> None:
    if depth > MAX_DIRECTORY_DEPTH:
        stats.skip(SkipReason.TOO_DEEP)
        return
    state, child = _filesystem.open_child_directory(fd, name)
    if child is None:
        if state is ChildState.SYMLINK:
            stats.skip(SkipReason.SYMLINK)
        elif state is not ChildState.MISSING:
            stats.skip(SkipReason.UNREADABLE)
        return
    parts = (*prefix, name)
    try:
        if on_directory is not None:
            on_directory(child, parts)
        _walk(child, parts, depth, stats, visit, on_directory, recursive=True, top=False)
    finally:
        close_quietly(child)
