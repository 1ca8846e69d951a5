"""MCP sessions: a bounded in-memory store binding each session to a principal and runtime."""

from __future__ import annotations

import enum
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mymcp._escaping import is_visible_ascii
from mymcp.config import (
    DEFAULT_ABSOLUTE_LIFETIME_SECONDS,
    DEFAULT_INACTIVITY_TIMEOUT_SECONDS,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSIONS_PER_PRINCIPAL,
)
from mymcp.governance import AuditLog

_log = logging.getLogger("mcp")

__all__ = [
    "Session",
    "SessionEnd",
    "SessionStore",
    "audit_session_ends",
    "is_session_id_shape",
]

_MAX_SESSION_ID_LENGTH = 256


def is_session_id_shape(value: str) -> bool:
    """Visible ASCII only (0x21-0x7E), bounded; anything else is a malformed header."""
    return len(value) <= _MAX_SESSION_ID_LENGTH and is_visible_ascii(value)


@dataclass(slots=True)
class Session:
    """One live session; mutable only in its activity time, and only by the store."""

    id: str
    principal_id: str
    generation: str
    protocol_version: str
    created: float
    last_activity: float
    absolute_expiry: float | None
    url_elicitation: bool = False
    """The client declared URL-mode elicitation at initialize (approvals use it)."""
    principal: str = ""
    """The principal's name (`operator:alice`), as the audit names it."""


class SessionEnd(enum.StrEnum):
    """Why a session ended."""

    DELETED = "deleted"  # the client sent DELETE
    EXPIRED = "expired"  # inactivity or absolute lifetime, noticed at the next sweep
    EVICTED = "evicted"  # a quota made room for a new session
    SHUTDOWN = "shutdown"  # the server stopped


def audit_session_ends(audit: AuditLog) -> Callable[[Session, SessionEnd], None]:
    """An `on_end` for `SessionStore` recording each end as `session_close` with its reason."""

    def record(session: Session, reason: SessionEnd) -> None:
        audit.append(
            "session_close",
            principal=session.principal,
            session=audit.session_tag(session.id),
            reason=reason.value,
        )

    return record


class SessionStore:
    """Sessions keyed by id, in least-recently-active order so idle ones sweep cheaply.

    Creating a session never fails. A principal at its quota loses its own
    least-recently-used session, so one client's flood only ever evicts that client's
    sessions, and a client that opens a session per call and never deletes one keeps
    working. The global bound is a last resort against many principals at once: it
    evicts the idlest session of all. A limit of 0 seconds disables that lifetime.

    Every session that leaves the store, however it leaves, is passed to `on_end` with
    the reason (the audit's `session_close` records); `close` ends them all.
    """

    def __init__(
        self,
        *,
        limit: int = DEFAULT_MAX_SESSIONS,
        per_principal_limit: int = DEFAULT_SESSIONS_PER_PRINCIPAL,
        inactivity_seconds: int = DEFAULT_INACTIVITY_TIMEOUT_SECONDS,
        absolute_seconds: int = DEFAULT_ABSOLUTE_LIFETIME_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        on_end: Callable[[Session, SessionEnd], None] | None = None,
    ) -> None:
        if limit < 1 or per_principal_limit < 1:
            raise ValueError("session limits must be positive")
        self._limit = limit
        self._per_principal = per_principal_limit
        self._inactivity = inactivity_seconds
        self._absolute = absolute_seconds
        self._clock = clock
        self._on_end = on_end
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        # Per principal, its session ids in the same least-recently-active order.
        self._by_principal: dict[str, OrderedDict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def count_for(self, principal_id: str) -> int:
        return len(self._by_principal.get(principal_id, ()))

    def _expired(self, session: Session, now: float) -> bool:
        if self._inactivity and now - session.last_activity > self._inactivity:
            return True
        return session.absolute_expiry is not None and now >= session.absolute_expiry

    def _remove(self, session_id: str, reason: SessionEnd) -> None:
        session = self._sessions.pop(session_id)
        owned = self._by_principal[session.principal_id]
        del owned[session_id]
        if not owned:
            del self._by_principal[session.principal_id]
        if self._on_end is not None:
            self._on_end(session, reason)

    def _sweep_idle(self, now: float) -> None:
        # The oldest activity sits first, so idle expiry stops at the first live session.
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if not self._expired(oldest, now):
                break
            self._remove(oldest.id, SessionEnd.EXPIRED)

    def _sweep_all(self, now: float) -> None:
        for session_id in [s.id for s in self._sessions.values() if self._expired(s, now)]:
            self._remove(session_id, SessionEnd.EXPIRED)

    def create(
        self,
        principal_id: str,
        generation: str,
        protocol_version: str,
        *,
        url_elicitation: bool = False,
        principal: str = "",
    ) -> Session:
        """A new session, after evicting whatever the quotas require."""
        now = self._clock()
        self._sweep_idle(now)
        owned = self._by_principal.get(principal_id)
        # An evicted session's client gets 404 at its next request: the log says why, as
        # the audit does when it is on (without it, nothing else would).
        if owned is not None and len(owned) >= self._per_principal:
            self._remove(next(iter(owned)), SessionEnd.EVICTED)
            _log.info(
                "session outcome=evicted reason=principal_quota limit=%d", self._per_principal
            )
        if len(self._sessions) >= self._limit:
            self._sweep_all(now)
            if len(self._sessions) >= self._limit:
                self._remove(next(iter(self._sessions)), SessionEnd.EVICTED)
                _log.info("session outcome=evicted reason=store_full limit=%d", self._limit)
        session_id = secrets.token_urlsafe(32)
        while session_id in self._sessions:  # 256 random bits: practically never loops
            session_id = secrets.token_urlsafe(32)
        expiry = now + self._absolute if self._absolute else None
        session = Session(
            session_id,
            principal_id,
            generation,
            protocol_version,
            now,
            now,
            expiry,
            url_elicitation,
            principal,
        )
        self._sessions[session_id] = session
        self._by_principal.setdefault(principal_id, OrderedDict())[session_id] = None
        return session

    def lookup(self, session_id: str, principal_id: str, generation: str) -> Session | None:
        """The live session for this principal and runtime, refreshed; otherwise None.

        Another principal's session is reported exactly like an unknown one.
        """
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if self._expired(session, now):
            self._remove(session_id, SessionEnd.EXPIRED)
            return None
        if session.principal_id != principal_id or session.generation != generation:
            return None
        session.last_activity = now
        self._sessions.move_to_end(session_id)
        self._by_principal[principal_id].move_to_end(session_id)
        return session

    def terminate(self, session_id: str, principal_id: str, generation: str) -> bool:
        if self.lookup(session_id, principal_id, generation) is None:
            return False
        self._remove(session_id, SessionEnd.DELETED)
        return True

    def close(self) -> None:
        """End every session (the server is stopping): those already past a lifetime
        as expired, the others as shut down."""
        now = self._clock()
        for session in list(self._sessions.values()):
            expired = self._expired(session, now)
            self._remove(session.id, SessionEnd.EXPIRED if expired else SessionEnd.SHUTDOWN)
