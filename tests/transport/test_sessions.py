"""Session store lifetimes, bounds and principal binding, on an injected clock."""

from __future__ import annotations

from mymcp.transport import SessionStore


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


def test_full_store_sweeps_expired_before_refusing() -> None:
    clock = Clock()
    store = SessionStore(limit=2, inactivity_seconds=10, absolute_seconds=0, clock=clock)
    first = store.create("p", "g", "v")
    second = store.create("p", "g", "v")
    assert first is not None
    assert second is not None
    assert store.create("p", "g", "v") is None
    clock.now += 5
    assert store.lookup(second.id, "p", "g") is second
    clock.now += 6  # first is idle for 11 s, second for 6 s
    third = store.create("p", "g", "v")
    assert third is not None
    assert store.lookup(first.id, "p", "g") is None
    assert store.lookup(second.id, "p", "g") is second


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
