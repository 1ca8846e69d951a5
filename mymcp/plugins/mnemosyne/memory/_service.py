"""The read-side memory service: raw tool arguments in, JSON-ready outcomes out."""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._cursor import CursorCodec
from ._inspect import parse_inspect_arguments, run_inspect
from ._listing import CollectionMode, parse_list_arguments, run_list
from ._outcomes import (
    LogFields,
    ToolOutcome,
    emit_terminal_event,
    failure,
    internal_failure,
    success,
)
from ._recall import parse_recall_arguments, run_recall
from .index import MemoryIndex
from .model import ErrorCode, MemoryOperationError, Scope
from .search import Bm25Ranker

__all__ = ["CANDIDATE_LIMIT_DEFAULT", "CANDIDATE_LIMIT_MAX", "MemoryService"]

CANDIDATE_LIMIT_DEFAULT = 10_000
CANDIDATE_LIMIT_MAX = 1_000_000
# Roots only change when the operator's environment does; a few indexes cover tests and
# reconfiguration without letting abandoned roots pin memory forever.
_MAX_INDEXES = 4
_SCOPE_WORDS = frozenset(scope.value for scope in Scope)
# Words the terminal event may log as values (anything else is dropped).
_VOCABULARY = _SCOPE_WORDS | frozenset(mode.value for mode in CollectionMode)
_SUCCESS_VOCABULARY = _VOCABULARY | {"ok"}


class MemoryService:
    """Recall, list and inspect over one lazily resolved memory root.

    Build one per process: it owns the per-root indexes that spare unchanged files from
    being re-read. The root resolver runs on every call and may raise; that reports the
    source as unavailable. No read operation ever creates the root.
    """

    def __init__(
        self,
        root_resolver: Callable[[], Path],
        candidate_limit: int,
        cursor_codec: CursorCodec,
    ) -> None:
        if type(candidate_limit) is not int or not 1 <= candidate_limit <= CANDIDATE_LIMIT_MAX:
            raise ValueError("candidate_limit must be an integer from 1 to 1,000,000")
        self._resolve_root = root_resolver
        self._candidate_limit = candidate_limit
        self._codec = cursor_codec
        self._ranker = Bm25Ranker()
        self._indexes: OrderedDict[str, MemoryIndex] = OrderedDict()
        self._indexes_lock = threading.Lock()

    @property
    def candidate_limit(self) -> int:
        return self._candidate_limit

    def current_index(self) -> MemoryIndex:
        """The index of the root the resolver names right now (for writers to keep coherent)."""
        try:
            root = Path(os.path.abspath(self._resolve_root()))
        except Exception:  # a broken resolver is an unavailable source, never a crash
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        key = str(root)
        with self._indexes_lock:
            index = self._indexes.get(key)
            if index is None:
                index = self._indexes[key] = MemoryIndex(root)
                while len(self._indexes) > _MAX_INDEXES:
                    self._indexes.popitem(last=False)
            else:
                self._indexes.move_to_end(key)
            return index

    def recall(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Rank up to five active records in one scope (optionally one namespace)."""

        def action(fields: LogFields) -> dict[str, Any]:
            request = parse_recall_arguments(arguments)
            fields.update(
                scope=request.scope.value,
                namespace="present" if request.namespace_id else "absent",
                tags=len(request.tags),
            )
            payload = run_recall(
                self.current_index(),
                request,
                candidate_limit=self._candidate_limit,
                ranker=self._ranker,
            )
            fields["results"] = len(payload["memories"])
            return payload

        return self._execute("memory_recall", action, retrieval=True)

    def inspect(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Return one exact record by its versioned reference."""

        def action(fields: LogFields) -> dict[str, Any]:
            reference = parse_inspect_arguments(arguments)
            fields.update(schema_version=reference.schema_version, scope=reference.scope.value)
            return run_inspect(
                self.current_index(), reference, candidate_limit=self._candidate_limit
            )

        return self._execute("memory_inspect", action)

    def list(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Return one deterministic page of the selected inventory, without content."""

        def action(fields: LogFields) -> dict[str, Any]:
            request = parse_list_arguments(arguments)
            selector = request.selector
            fields.update(
                scope=selector.scope.value,
                namespace="present" if selector.namespace_id else "absent",
                cursor="present" if request.cursor else "absent",
            )
            if selector.namespace_id is not None:
                fields["collection"] = selector.mode.value
            payload = run_list(
                self.current_index(),
                request,
                candidate_limit=self._candidate_limit,
                codec=self._codec,
            )
            page = payload["page"]
            fields.update(count=page["count"], total=page["total_count"], page=page["number"])
            return payload

        return self._execute("memory_list", action)

    def _execute(
        self,
        event: str,
        action: Callable[[LogFields], dict[str, Any]],
        *,
        retrieval: bool = False,
    ) -> ToolOutcome:
        logger = logging.getLogger(f"mcp.{event}")
        fields: LogFields = {}
        vocabulary = _VOCABULARY
        try:
            payload = action(fields)
        except MemoryOperationError as exc:
            status = exc.code.status(retrieval=retrieval).value
            fields.pop("results", None)
            emit_terminal_event(
                logger, event, status, code=exc.code, fields=fields, vocabulary=vocabulary
            )
            return failure(exc, retrieval=retrieval)
        except Exception:
            # Exception text may quote paths or values, so only the fixed code is logged.
            emit_terminal_event(
                logger,
                event,
                "internal_error",
                code=ErrorCode.INTERNAL_ERROR,
                fields=fields,
                vocabulary=vocabulary,
            )
            return internal_failure()
        emit_terminal_event(
            logger, event, payload["status"], fields=fields, vocabulary=_SUCCESS_VOCABULARY
        )
        return success(payload)
