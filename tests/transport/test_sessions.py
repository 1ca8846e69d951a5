"""Session store lifetimes, bounds and principal binding, on an injected clock."""

from __future__ import annotations

import logging

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mymcp.transport import SessionEnd, SessionStore
from mymcp.transport._sessions import Session
from tests.transport.conftest import initialize, rpc, session_headers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_inactivity_expiry_and_refresh() -> None:
    clock = Clock()
    store = SessionStore(inactivity_seconds=10, absolute_seconds=0, clock=clock)
    session = store.create("p", "g", "2025-11-25")
    assert session is not None
    clock.now += 9
    assert store.lookup(session.id, "p", "g") is session  # refreshes activity
    clock.now += 9
    assert store.lookup(session.id, "p", "g") is session
    clock.now += 10.5
    assert store.lookup(session.id, "p", "g") is None
    assert len(store) == 0


def test_absolute_lifetime_ignores_activity() -> None:
    clock = Clock()
    store = SessionStore(inactivity_seconds=0, absolute_seconds=30, clock=clock)
    session = store.create("p", "g", "2025-11-25")
    assert session is not None
    for _ in range(5):
        clock.now += 5.9
        assert store.lookup(session.id, "p", "g") is not None
    clock.now = 1030.0
    assert store.lookup(session.id, "p", "g") is None


def test_zero_disables_both_limits() -> None:
    clock = Clock()
    store = SessionStore(inactivity_seconds=0, absolute_seconds=0, clock=clock)
    session = store.create("p", "g", "2025-11-25")
    assert session is not None
    clock.now += 10**9
    assert store.lookup(session.id, "p", "g") is session


def test_full_store_sweeps_expired_before_evicting() -> None:
    clock = Clock()
    store = SessionStore(limit=2, inactivity_seconds=10, absolute_seconds=0, clock=clock)
    first = store.create("p", "g", "v")
    second = store.create("q", "g", "v")
    clock.now += 5
    assert store.lookup(second.id, "q", "g") is second
    clock.now += 6  # first is idle for 11 s (expired), second for 6 s
    third = store.create("r", "g", "v")
    assert store.lookup(first.id, "p", "g") is None
    assert store.lookup(second.id, "q", "g") is second
    assert store.lookup(third.id, "r", "g") is third


def test_other_principal_or_generation_sees_nothing_and_cannot_terminate() -> None:
    store = SessionStore()
    session = store.create("alice", "g1", "v")
    assert session is not None
    assert store.lookup(session.id, "bob", "g1") is None
    assert store.lookup(session.id, "alice", "g2") is None
    assert not store.terminate(session.id, "bob", "g1")
    assert store.terminate(session.id, "alice", "g1")
    assert store.lookup(session.id, "alice", "g1") is None


def test_session_ids_are_unique_and_long() -> None:
    store = SessionStore(limit=500)
    ids = {store.create("p", "g", "v").id for _ in range(500)}  # type: ignore[union-attr]
    assert len(ids) == 500
    assert all(len(i) == 43 for i in ids)


def test_a_principal_at_its_quota_loses_its_own_least_recently_used_session() -> None:
    clock = Clock()
    store = SessionStore(per_principal_limit=3, clock=clock)
    mine = [store.create("alice", "g", "v") for _ in range(3)]
    other = store.create("bob", "g", "v")
    clock.now += 1
    assert store.lookup(mine[0].id, "alice", "g") is mine[0]  # mine[1] is now the LRU one
    newest = store.create("alice", "g", "v")
    assert store.lookup(mine[1].id, "alice", "g") is None
    for kept in (mine[0], mine[2], newest):
        assert store.lookup(kept.id, "alice", "g") is kept
    assert store.lookup(other.id, "bob", "g") is other
    assert store.count_for("alice") == 3


def test_a_flood_from_one_principal_never_evicts_another_principal() -> None:
    store = SessionStore(limit=1024, per_principal_limit=64)
    bob = store.create("bob", "g", "v")
    for _ in range(5000):
        store.create("mallory", "g", "v")
    assert store.count_for("mallory") == 64
    assert store.lookup(bob.id, "bob", "g") is bob
    assert store.create("carol", "g", "v") is not None
    assert len(store) == 66


def test_a_full_store_evicts_the_globally_idlest_session() -> None:
    clock = Clock()
    store = SessionStore(limit=3, per_principal_limit=3, clock=clock)
    sessions = {name: store.create(name, "g", "v") for name in ("a", "b", "c")}
    clock.now += 1
    store.lookup(sessions["a"].id, "a", "g")
    store.create("d", "g", "v")
    assert store.lookup(sessions["b"].id, "b", "g") is None  # b was the idlest
    assert store.lookup(sessions["a"].id, "a", "g") is sessions["a"]
    assert store.lookup(sessions["c"].id, "c", "g") is sessions["c"]


def test_each_eviction_is_one_log_line_saying_which_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = SessionStore(limit=3, per_principal_limit=2)
    with caplog.at_level(logging.INFO, logger="mcp"):
        for name in ("a", "a", "a", "b", "c"):
            store.create(name, "g", "v")
    assert [r.getMessage() for r in caplog.records] == [
        "session outcome=evicted reason=principal_quota limit=2",
        "session outcome=evicted reason=store_full limit=3",
    ]


def test_every_way_out_of_the_store_is_reported_once_with_its_reason() -> None:
    clock = Clock()
    ended: list[tuple[str, str, SessionEnd]] = []

    def on_end(session: Session, reason: SessionEnd) -> None:
        ended.append((session.id, session.principal, reason))

    store = SessionStore(
        limit=3,
        per_principal_limit=2,
        inactivity_seconds=10,
        absolute_seconds=0,
        clock=clock,
        on_end=on_end,
    )

    def create(principal: str) -> Session:
        return store.create(principal, "g", "v", principal=f"operator:{principal}")

    deleted = create("a")
    assert store.terminate(deleted.id, "a", "g")
    assert ended == [(deleted.id, "operator:a", SessionEnd.DELETED)]
    first, _, _ = create("a"), create("a"), create("a")  # a's quota is 2: the oldest goes
    assert ended[-1] == (first.id, "operator:a", SessionEnd.EVICTED)
    create("b")
    clock.now += 1
    create("c")  # the store is full and nothing expired: the globally idlest goes
    assert ended[-1][1:] == ("operator:a", SessionEnd.EVICTED)
    clock.now += 10  # everything but c's session is idle for more than 10 s
    newest = create("d")
    assert [reason for _, _, reason in ended[-2:]] == [SessionEnd.EXPIRED] * 2
    store.close()
    assert ended[-2:] == [
        (ended[-2][0], "operator:c", SessionEnd.SHUTDOWN),
        (newest.id, "operator:d", SessionEnd.SHUTDOWN),
    ]
    assert len(store) == 0
    assert len({session_id for session_id, _, _ in ended}) == len(ended) == 7  # all created


def test_an_expired_session_found_by_lookup_or_at_close_is_reported_as_expired() -> None:
    clock = Clock()
    ended: list[SessionEnd] = []
    store = SessionStore(
        inactivity_seconds=10,
        absolute_seconds=0,
        clock=clock,
        on_end=lambda session, reason: ended.append(reason),
    )
    looked_up = store.create("p", "g", "v")
    store.create("q", "g", "v")
    clock.now += 11
    assert store.lookup(looked_up.id, "p", "g") is None
    store.close()
    assert ended == [SessionEnd.EXPIRED, SessionEnd.EXPIRED]


class SessionQuotas(RuleBasedStateMachine):
    """Any interleaving of creates, lookups, terminations and time keeps every bound, and
    a create evicts only the creator's own sessions unless the whole store is full."""

    LIMIT = 6
    QUOTA = 3

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.ended: list[str] = []
        self.created = 0
        self.store = SessionStore(
            limit=self.LIMIT,
            per_principal_limit=self.QUOTA,
            inactivity_seconds=100,
            absolute_seconds=0,
            clock=self.clock,
            on_end=lambda session, reason: self.ended.append(session.id),
        )
        self.live: dict[str, str] = {}  # id -> principal, as far as the model knows

    @rule(principal=st.sampled_from(["a", "b", "c"]))
    def create(self, principal: str) -> None:
        before = dict(self.live)
        full = len(self.store) >= self.LIMIT
        session = self.store.create(principal, "g", "v")
        self.created += 1
        self.live[session.id] = principal
        for session_id, owner in before.items():
            survived = self.store.lookup(session_id, owner, "g") is not None
            if not survived:
                del self.live[session_id]
                if owner != principal:
                    assert full, "another principal lost a session while the store had room"
        assert self.store.lookup(session.id, principal, "g") is session

    @rule(data=st.data())
    def terminate(self, data: st.DataObject) -> None:
        if self.live:
            # By position in creation order: ids are random, so drawing ids is not replayable.
            session_id = list(self.live)[data.draw(st.integers(0, len(self.live) - 1))]
            assert self.store.terminate(session_id, self.live.pop(session_id), "g")

    @rule(seconds=st.sampled_from([1, 50, 101]))
    def wait(self, seconds: int) -> None:
        self.clock.now += seconds
        self.live = {
            session_id: owner
            for session_id, owner in self.live.items()
            if self.store.lookup(session_id, owner, "g") is not None
        }

    @invariant()
    def bounds_hold(self) -> None:
        assert len(self.store) <= self.LIMIT
        for principal in ("a", "b", "c"):
            assert self.store.count_for(principal) <= self.QUOTA

    @invariant()
    def every_session_that_left_was_reported_once(self) -> None:
        assert len(set(self.ended)) == len(self.ended)
        assert len(self.ended) + len(self.store) == self.created
        assert not set(self.ended) & set(self.live)


TestSessionQuotas = SessionQuotas.TestCase
TestSessionQuotas.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_a_client_that_opens_a_session_per_call_keeps_working(make_client) -> None:
    # Like the Inspector CLI: initialize, one call, never DELETE; far past every bound.
    client = make_client(session_limit=16, per_principal_limit=4)
    for number in range(200):
        session = initialize(client, authorization="Bearer inspector")
        headers = session_headers(session, authorization="Bearer inspector")
        response = client.post("/mcp", json=rpc("tools/list", request_id=number), headers=headers)
        assert response.status_code == 200


def test_one_principals_flood_never_locks_another_out(make_client) -> None:
    client = make_client(session_limit=16, per_principal_limit=4)
    bob = initialize(client, authorization="Bearer bob")
    for _ in range(100):
        initialize(client, authorization="Bearer mallory")
    headers = session_headers(bob, authorization="Bearer bob")
    assert client.post("/mcp", json=rpc("ping"), headers=headers).status_code == 200
    assert initialize(client, authorization="Bearer carol")
