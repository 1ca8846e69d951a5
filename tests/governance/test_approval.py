"""The approvals store as a state machine, checked against a small model of the rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mymcp.governance import (
    MAX_APPROVAL_ARGUMENT_BYTES,
    ApprovalError,
    Approvals,
    ApprovalState,
    AuditLog,
    read_records,
)
from mymcp.governance.approval import MAX_PENDING, MAX_PENDING_PER_PRINCIPAL

TTL = 60
CALLERS = [("alice", "s1"), ("alice", "s2"), ("bob", "s3")]
ARGUMENTS = [{"text": "a"}, {"text": "b"}, {"text": "a", "tags": ["x"]}]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Entry:
    """The model: what the rules say about one (principal, session, tool, arguments)."""

    state: str  # pending | granted | denied | expired
    expires: float
    id: str


class ApprovalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.store = Approvals(frozenset({"notes__write"}), TTL, clock=self.clock)
        self.model: dict[tuple[str, str, int], Entry] = {}
        self.runs = 0

    def _expire(self) -> None:
        for key, entry in list(self.model.items()):
            if entry.expires <= self.clock.now:
                if entry.state in ("pending", "granted"):
                    entry.state, entry.expires = "expired", self.clock.now + TTL
                else:
                    del self.model[key]

    @rule(caller=st.sampled_from(CALLERS), which=st.integers(0, len(ARGUMENTS) - 1))
    def call(self, caller: tuple[str, str], which: int) -> None:
        principal, session = caller
        verdict = self.store.check(
            principal=f"operator:{principal}",
            principal_id=principal,
            session_id=session,
            tool="notes__write",
            arguments=dict(ARGUMENTS[which]),
            args_digest=None,
        )
        self._expire()
        key = (principal, session, which)
        entry = self.model.get(key)
        if entry is None:
            assert not verdict.run
            assert verdict.approval is not None
            assert verdict.approval.state is ApprovalState.PENDING
            self.model[key] = Entry("pending", self.clock.now + TTL, verdict.approval.id)
        elif entry.state == "granted":
            assert verdict.run
            self.runs += 1
            del self.model[key]
        elif entry.state == "pending":
            assert not verdict.run
            assert verdict.approval is not None
            assert verdict.approval.id == entry.id
        else:
            assert not verdict.run
            assert verdict.approval is not None
            assert verdict.approval.state.value == entry.state
            del self.model[key]

    @precondition(lambda self: any(e.state == "pending" for e in self.model.values()))
    @rule(data=st.data(), approve=st.booleans())
    def decide(self, data: Any, approve: bool) -> None:
        self._expire()
        pending = [(k, e) for k, e in self.model.items() if e.state == "pending"]
        if not pending:
            return
        _, entry = data.draw(st.sampled_from(pending))
        approval = self.store.decide(entry.id, approve=approve)
        assert approval.state is (ApprovalState.GRANTED if approve else ApprovalState.DENIED)
        entry.state = "granted" if approve else "denied"
        entry.expires = self.clock.now + TTL

    @rule(seconds=st.sampled_from([1, 30, 59, 60, 61, 200]))
    def wait(self, seconds: int) -> None:
        self.clock.now += seconds

    @invariant()
    def pending_list_matches(self) -> None:
        self._expire()
        expected = {e.id for e in self.model.values() if e.state == "pending"}
        assert {a.id for a in self.store.pending()} == expected

    @invariant()
    def decided_ones_cannot_be_decided_again(self) -> None:
        for entry in self.model.values():
            if entry.state != "pending":
                with pytest.raises(ApprovalError):
                    self.store.decide(entry.id, approve=True)


TestApprovalMachine = ApprovalMachine.TestCase
TestApprovalMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_only_selected_tools_need_approval() -> None:
    store = Approvals(frozenset({"notes__write"}), TTL)
    verdict = store.check(
        principal="anonymous",
        principal_id="anonymous",
        session_id="s",
        tool="notes__read",
        arguments={},
        args_digest=None,
    )
    assert verdict.run
    assert verdict.approval is None
    assert store.pending() == []


def test_arguments_too_large_to_review_are_refused() -> None:
    store = Approvals(frozenset({"notes__write"}), TTL)
    verdict = store.check(
        principal="anonymous",
        principal_id="anonymous",
        session_id="s",
        tool="notes__write",
        arguments={"text": "x" * MAX_APPROVAL_ARGUMENT_BYTES},
        args_digest=None,
    )
    assert (verdict.run, verdict.approval) == (False, None)


def test_pending_approvals_are_bounded_per_principal_oldest_dropped_first(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, max_segment_bytes=1 << 20, max_segments=4)
    store = Approvals(frozenset({"notes__write"}), TTL, audit=audit)
    for index in range(MAX_PENDING_PER_PRINCIPAL + 3):
        store.check(
            principal="operator:alice",
            principal_id="alice",
            session_id="s",
            tool="notes__write",
            arguments={"n": index},
            args_digest=None,
        )
    pending = store.pending()
    assert len(pending) == MAX_PENDING_PER_PRINCIPAL
    assert {a.arguments["n"] for a in pending} == set(range(3, MAX_PENDING_PER_PRINCIPAL + 3))
    audit.commit()
    dropped = [r for r in read_records(tmp_path) if r.get("reason") == "capacity"]
    assert len(dropped) == 3
    assert all(r["event"] == "approval_expired" for r in dropped)


def _ask(store: Approvals, principal: str, n: int) -> str:
    verdict = store.check(
        principal=f"operator:{principal}",
        principal_id=principal,
        session_id=f"s-{principal}",
        tool="notes__write",
        arguments={"n": n},
        args_digest=None,
    )
    assert verdict.approval is not None
    return verdict.approval.id


def test_other_principals_flooding_never_drop_ones_approval() -> None:
    store = Approvals(frozenset({"notes__write"}), TTL)
    alices = _ask(store, "alice", 0)
    flooders = ["bob", "carol", "dave", "erin"]
    for principal in flooders:
        for n in range(MAX_PENDING_PER_PRINCIPAL):
            _ask(store, principal, n)
    pending = store.pending()
    assert alices in {a.id for a in pending}
    assert len(pending) == MAX_PENDING
    counts = {p: sum(a.principal_id == p for a in pending) for p in ["alice", *flooders]}
    # The overall bound took from the largest holders, never from alice.
    assert counts["alice"] == 1
    assert sum(counts.values()) == MAX_PENDING
    assert max(counts.values()) - min(counts[p] for p in flooders) <= 1


PRINCIPALS = ["alice", "bob", "carol", "dave"]


class CapacityMachine(RuleBasedStateMachine):
    """Small bounds, many principals: what is dropped, and from whom."""

    PER_PRINCIPAL, OVERALL = 3, 7

    def __init__(self) -> None:
        super().__init__()
        self.store = Approvals(
            frozenset({"notes__write"}),
            TTL,
            per_principal_limit=self.PER_PRINCIPAL,
            limit=self.OVERALL,
        )
        self.asked = 0

    def _held(self) -> dict[str, list[str]]:
        held: dict[str, list[str]] = {p: [] for p in PRINCIPALS}
        for approval in reversed(self.store.pending()):  # oldest first
            held[approval.principal_id].append(approval.id)
        return held

    @rule(principal=st.sampled_from(PRINCIPALS))
    def ask(self, principal: str) -> None:
        before = self._held()
        self.asked += 1
        new = _ask(self.store, principal, self.asked)
        after = self._held()
        assert after[principal][-1] == new
        dropped = {p: [i for i in before[p] if i not in after[p]] for p in PRINCIPALS}
        losers = [p for p, ids in dropped.items() if ids]
        total = sum(map(len, before.values()))
        if len(before[principal]) >= self.PER_PRINCIPAL:
            assert losers == [principal]  # its own oldest makes room
        elif total >= self.OVERALL:
            (loser,) = losers
            most = max(map(len, before.values()))
            assert len(before[loser]) == most  # only the largest holder loses one
            if loser != principal:
                assert len(before[principal]) < most
        else:
            assert losers == []
        for p in losers:
            assert dropped[p] == before[p][:1]  # exactly its oldest pending

    @rule(data=st.data(), approve=st.booleans())
    def decide(self, data: Any, approve: bool) -> None:
        pending = self.store.pending()
        if pending:
            chosen = data.draw(st.sampled_from(pending))
            self.store.decide(chosen.id, approve=approve)

    @invariant()
    def bounds_hold(self) -> None:
        held = self._held()
        assert all(len(ids) <= self.PER_PRINCIPAL for ids in held.values())
        assert sum(map(len, held.values())) <= self.OVERALL


TestCapacityMachine = CapacityMachine.TestCase
TestCapacityMachine.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)


def test_the_arguments_a_person_sees_are_the_canonical_ones() -> None:
    store = Approvals(frozenset({"notes__write"}), TTL)
    verdict = store.check(
        principal="operator:alice",
        principal_id="alice",
        session_id="s",
        tool="notes__write",
        arguments={"b": [1, 2.5, None], "a": "\u00e9\ud800"},
        args_digest=None,
    )
    assert verdict.approval is not None
    assert verdict.approval.arguments == {"a": "\u00e9\ud800", "b": [1, 2.5, None]}
    assert list(verdict.approval.arguments) == ["a", "b"]
