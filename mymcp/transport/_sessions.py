"""MCP sessions: a bounded in-memory store binding each session to a principal and runtime."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mymcp.transport._exchange import is_visible_ascii

__all__ = ["DEFAULT_SESSION_LIMIT", "Session", "SessionStore", "is_session_id_shape"]

DEFAULT_SESSION_LIMIT = 1024
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


class SessionStore:
    """Sessions keyed by id, in least-recently-active order so idle ones sweep cheaply.

    A limit of 0 seconds disables that lifetime. A full store refuses new sessions (the
    transport answers 503) after sweeping whatever has expired.
    """

    def __init__(
        self,
        *,
        limit: int = DEFAULT_SESSION_LIMIT,
        inactivity_seconds: int = 1800,
        absolute_seconds: int = 28800,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError("session limit must be positive")
        self._limit = limit
        self._inactivity = inactivity_seconds
        self._absolute = absolute_seconds
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def _expired(self, session: Session, now: float) -> bool:
        if self._inactivity and now - session.last_activity > self._inactivity:
            return True
        return session.absolute_expiry is not None and now >= session.absolute_expiry

    def _sweep_idle(self, now: float) -> None:
        # The oldest activity sits first, so idle expiry stops at the first live session.
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if not self._expired(oldest, now):
                break
            del self._sessions[oldest.id]

    def _sweep_all(self, now: float) -> None:
        for session_id in [s.id for s in self._sessions.values() if self._expired(s, now)]:
            del self._sessions[session_id]

    def create(
        self,
        principal_id: str,
        generation: str,
        protocol_version: str,
        *,
        url_elicitation: bool = False,
    ) -> Session | None:
        """A new session, or None when the store is full of live sessions."""
        now = self._clock()
        self._sweep_idle(now)
        if len(self._sessions) >= self._limit:
            self._sweep_all(now)
            if len(self._sessions) >= self._limit:
                return None
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
        )
        self._sessions[session_id] = session
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
            del self._sessions[session_id]
            return None
        if session.principal_id != principal_id or session.generation != generation:
            return None
        session.last_activity = now
        self._sessions.move_to_end(session_id)
        return session

    def terminate(self, session_id: str, principal_id: str, generation: str) -> bool:
        if self.lookup(session_id, principal_id, generation) is None:
            return False
        del self._sessions[session_id]
        return True
