"""Exact-call approval: a person approves one specific call, and one execution spends it.

A `tools/call` of a tool that `[approval] tools` selects does not run until a person has
approved it in the console. The approval is bound to everything that makes the call
what it is: the principal, the session, the public tool name and the canonical JSON of
the arguments (key order and whitespace do not matter, every value does). The first
identical call after the grant runs, and spends it; the next identical call needs a new
approval, and a call that differs in anything needs its own.

Approvals live in this process only (a restart drops them) and are bounded: at most
`MAX_PENDING_PER_PRINCIPAL` pending per principal (that principal's oldest pending is
dropped first) and, as a last resort against many principals at once, `MAX_PENDING`
overall. The overall bound takes from whoever holds the most pending approvals, so
that one principal's flood never drops another principal's approval. Every step is
recorded in the audit: `approval_requested`, `approval_granted`, `approval_denied`,
`approval_spent` and `approval_expired`.

The store is used from the event loop only (the transport and the console both run
there), so it needs no lock.
"""

from __future__ import annotations

import enum
import hashlib
import json
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from mymcp.config import ApprovalSettings
from mymcp.errors import ApprovalError
from mymcp.governance.audit import AuditLog, canonical_json
from mymcp.governance.policy import select_tools
from mymcp.runtime import HOST_ORIGIN, HostRuntime

__all__ = [
    "MAX_APPROVAL_ARGUMENT_BYTES",
    "Approval",
    "ApprovalError",
    "ApprovalState",
    "Approvals",
    "Verdict",
    "approval_required_tools",
    "rfc3339",
]

MAX_PENDING_PER_PRINCIPAL: Final = 256
MAX_PENDING: Final = 1024
MAX_FINISHED: Final = 256
MAX_APPROVAL_ARGUMENT_BYTES: Final = 256 * 1024


def rfc3339(seconds: float) -> str:
    """UTC time to the second, as the console and the tool results show it."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApprovalState(enum.StrEnum):
    PENDING = "pending"
    GRANTED = "granted"
    DENIED = "denied"
    SPENT = "spent"
    EXPIRED = "expired"


@dataclass(slots=True)
class Approval:
    """One call waiting for, holding or having used a person's decision.

    Mutable only by `Approvals`. `arguments` is the decoded arguments object exactly as
    the tool would receive it; the console shows it, nothing else reads it.
    """

    id: str
    principal: str
    principal_id: str
    session_id: str
    tool: str
    arguments: dict[str, Any]
    canonical: bytes
    args_digest: str | None
    created_at: float
    expires_at: float
    state: ApprovalState = ApprovalState.PENDING
    decided_at: float | None = None
    ended_at: float | None = None
    """When it was spent or expired."""
    client_declined_at: float | None = None
    """When the client last said its user declined to open the approval page (the
    stateless era's retry says so); the console shows it beside the decision."""

    @property
    def key(self) -> tuple[str, str, str, bytes]:
        return (self.principal_id, self.session_id, self.tool, self.canonical)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the transport does with a call: `run` it, or answer with `approval`'s state
    (no approval at all: the arguments are too large to be approved)."""

    run: bool
    approval: Approval | None = None
    opened: bool = False
    """This call opened `approval`: nobody can have been shown it yet."""


_RUN: Final = Verdict(True)
_TOO_LARGE: Final = Verdict(False)
"""Refused without an approval: the arguments are too large to review."""


def approval_required_tools(settings: ApprovalSettings, runtime: HostRuntime) -> frozenset[str]:
    """The public names `[approval] tools` selects (selectors as in `[policy]`).

    Raises ConfigurationError (`policy_*` codes) naming `approval.tools[i]`.
    """
    tools = tuple(tool for tool in runtime.registry if tool.origin != HOST_ORIGIN)
    selected: set[str] = set()
    for position, selector in enumerate(settings.tools):
        where = f"approval.tools[{position}]"
        selected |= select_tools(selector, tools, where, runtime.inactive_names)
    return frozenset(selected)


class Approvals:
    """The approval requirement of one runtime and the approvals of this process.

    `_tracked` holds every approval a call may still meet: pending, granted, and denied
    or expired ones not yet reported to the caller. Once spent or reported, an approval
    moves to the bounded `_finished` history the console shows. `per_principal_limit`
    and `limit` bound the pending approvals (see the module's description).
    """

    def __init__(
        self,
        required: frozenset[str],
        ttl_seconds: int,
        *,
        audit: AuditLog | None = None,
        clock: Callable[[], float] = time.time,
        per_principal_limit: int = MAX_PENDING_PER_PRINCIPAL,
        limit: int = MAX_PENDING,
    ) -> None:
        self._required = required
        self._per_principal_limit = per_principal_limit
        self._limit = limit
        self._ttl = ttl_seconds
        self._audit = audit
        self._clock = clock
        self._tracked: OrderedDict[str, Approval] = OrderedDict()  # by id, oldest first
        self._by_key: dict[tuple[str, str, str, bytes], Approval] = {}
        self._finished: deque[Approval] = deque(maxlen=MAX_FINISHED)
        self._version = 0

    @property
    def required(self) -> frozenset[str]:
        """Public names of the tools whose calls need a person's approval."""
        return self._required

    @property
    def ttl_seconds(self) -> int:
        return self._ttl

    @property
    def version(self) -> int:
        """Changes whenever an approval is created or changes state (for live views)."""
        return self._version

    def requires(self, tool: str) -> bool:
        return tool in self._required

    # -- the transport's side ------------------------------------------------------------

    def check(
        self,
        *,
        principal: str,
        principal_id: str,
        session_id: str,
        tool: str,
        arguments: dict[str, Any],
        args_digest: str | None,
        spend: bool = True,
    ) -> Verdict:
        """Run the call, or name the approval it waits for (or why it will not run).
        Without `spend` (the client says its user declined), a granted approval is left
        granted and named, and the call does not run."""
        if tool not in self._required:
            return _RUN
        self._expire(self._clock())
        canonical = canonical_json(arguments)
        if len(canonical) > MAX_APPROVAL_ARGUMENT_BYTES:
            return _TOO_LARGE  # a person could not review it anyway
        approval = self._by_key.get((principal_id, session_id, tool, canonical))
        if approval is None:
            approval = self._request(principal, principal_id, session_id, tool, canonical)
            approval.args_digest = args_digest
            self._record("approval_requested", approval)
            if not spend:
                self._note_declined(approval)
            return Verdict(False, approval, opened=True)
        if not spend and approval.state in (ApprovalState.PENDING, ApprovalState.GRANTED):
            # Still open, and still decidable; the person deciding should know.
            self._note_declined(approval)
        if approval.state is ApprovalState.GRANTED:
            if not spend:
                return Verdict(False, approval)
            approval.state = ApprovalState.SPENT
            approval.ended_at = self._clock()
            self._retire(approval)
            self._record("approval_spent", approval)
            return Verdict(True, approval)
        if approval.state is not ApprovalState.PENDING:
            # A denial or an expiry is reported once; the next identical call asks anew.
            self._retire(approval)
        return Verdict(False, approval)

    def _note_declined(self, approval: Approval) -> None:
        approval.client_declined_at = self._clock()
        self._version += 1

    def _request(
        self, principal: str, principal_id: str, session_id: str, tool: str, canonical: bytes
    ) -> Approval:
        self._make_room(principal_id)
        now = self._clock()
        approval = Approval(
            id=secrets.token_urlsafe(16),
            principal=principal,
            principal_id=principal_id,
            session_id=session_id,
            tool=tool,
            arguments=json.loads(canonical),
            canonical=canonical,
            args_digest=None,
            created_at=now,
            expires_at=now + self._ttl,
        )
        self._tracked[approval.id] = approval
        self._by_key[approval.key] = approval
        self._version += 1
        return approval

    def _make_room(self, principal_id: str) -> None:
        """Drop one pending approval if a new one of `principal_id` would exceed a bound."""
        held: dict[str, list[Approval]] = {}  # pending by principal, each oldest first
        for approval in self._tracked.values():
            if approval.state is ApprovalState.PENDING:
                held.setdefault(approval.principal_id, []).append(approval)
        mine = held.get(principal_id, [])
        if len(mine) >= self._per_principal_limit:
            self._drop(mine[0])
            return
        if sum(map(len, held.values())) < self._limit:
            return
        # The largest holder gives up its oldest: the caller itself when it is one of
        # them, otherwise the one that has waited longest (`held` is in that order).
        most = max(map(len, held.values()))
        victim = mine if len(mine) == most else next(a for a in held.values() if len(a) == most)
        self._drop(victim[0])

    def _retire(self, approval: Approval) -> None:
        """Stop tracking: no later call can meet this approval again."""
        self._tracked.pop(approval.id, None)
        if self._by_key.get(approval.key) is approval:
            del self._by_key[approval.key]
        self._finished.append(approval)
        self._version += 1

    def _drop(self, approval: Approval) -> None:
        approval.state = ApprovalState.EXPIRED
        approval.ended_at = self._clock()
        self._retire(approval)
        self._record("approval_expired", approval, reason="capacity")

    def _expire(self, now: float) -> None:
        for approval in [a for a in self._tracked.values() if a.expires_at <= now]:
            if approval.state in (ApprovalState.PENDING, ApprovalState.GRANTED):
                approval.state = ApprovalState.EXPIRED
                approval.ended_at = approval.expires_at
                approval.expires_at = now + self._ttl  # reported to a caller for one ttl
                self._version += 1
                self._record("approval_expired", approval, reason="ttl")
            else:  # a denial or expiry nobody came back for
                self._retire(approval)

    def end_session(self, session_id: str) -> None:
        """The session `session_id` ended (deleted, expired, evicted): its approvals that
        wait for a decision or for their call can never be used, since an approval is
        bound to its session. They expire now, so that nobody decides a call that
        cannot come back."""
        if not session_id:
            return
        now = self._clock()
        for approval in [a for a in self._tracked.values() if a.session_id == session_id]:
            if approval.state in (ApprovalState.PENDING, ApprovalState.GRANTED):
                approval.state = ApprovalState.EXPIRED
                approval.ended_at = now
                self._record("approval_expired", approval, reason="session_ended")
            self._retire(approval)

    # -- the console's side --------------------------------------------------------------

    def pending(self) -> list[Approval]:
        """Approvals waiting for a decision, newest first."""
        self._expire(self._clock())
        return [a for a in reversed(self._tracked.values()) if a.state is ApprovalState.PENDING]

    def recent(self) -> list[Approval]:
        """Decided, spent or expired approvals, newest first (bounded history)."""
        self._expire(self._clock())
        tracked = [a for a in self._tracked.values() if a.state is not ApprovalState.PENDING]
        return [*reversed(tracked), *reversed(self._finished)][:MAX_FINISHED]

    def get(self, approval_id: str) -> Approval | None:
        self._expire(self._clock())
        found = self._tracked.get(approval_id)
        if found is not None:
            return found
        return next((a for a in self._finished if a.id == approval_id), None)

    def decide(self, approval_id: str, *, approve: bool) -> Approval:
        """A person's decision. Raises ApprovalError `not_found`, `expired` or `decided`."""
        approval = self.get(approval_id)
        if approval is None:
            raise ApprovalError("not_found")
        if approval.state is ApprovalState.EXPIRED:
            raise ApprovalError("expired")
        if approval.state is not ApprovalState.PENDING:
            raise ApprovalError("decided")
        now = self._clock()
        approval.decided_at = now
        approval.expires_at = now + self._ttl  # a decision lives a full ttl from now
        approval.state = ApprovalState.GRANTED if approve else ApprovalState.DENIED
        self._version += 1
        self._record("approval_granted" if approve else "approval_denied", approval)
        return approval

    def _record(self, event: str, approval: Approval, **extra: Any) -> None:
        if self._audit is None:
            return
        if approval.session_id:  # calls outside a session (stateless era) record none
            extra["session"] = self._audit.session_tag(approval.session_id)
        self._audit.append(
            event,
            principal=approval.principal,
            tool=approval.tool,
            args_digest=approval.args_digest,
            approval=hashlib.sha256(approval.id.encode()).hexdigest()[:16],
            **extra,
        )
