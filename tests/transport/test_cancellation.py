"""How closing an HTTP connection reaches the requests on it: `ConnectionWatch` cancels
the tasks of the requests it watches when the connection closes, exactly those, once,
and refuses to watch a request that begins after the close."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.transport._exchange import ConnectionWatch

# Each step: watch request i, stop watching it, or close the connection.
_STEPS = st.lists(
    st.tuples(st.sampled_from(["add", "discard", "close"]), st.integers(0, 4)), max_size=12
)


@settings(max_examples=60, deadline=None)
@given(_STEPS)
def test_closing_a_connection_cancels_exactly_its_watched_requests(
    steps: list[tuple[str, int]],
) -> None:
    async def scenario() -> None:
        tasks = [asyncio.create_task(asyncio.Event().wait()) for _ in range(5)]
        await asyncio.sleep(0)  # every task is now waiting
        watch = ConnectionWatch()
        watched: set[int] = set()
        expected: set[int] = set()
        for action, number in steps:
            if action == "add":
                added = watch.add(tasks[number])
                assert added is not watch.closed
                if added:
                    watched.add(number)
            elif action == "discard":
                watch.discard(tasks[number])
                watched.discard(number)
            elif not watch.closed:
                watch.close()
                expected |= watched
                watched.clear()
        assert {n for n in range(5) if tasks[n].cancelling()} == expected
        assert all(tasks[n].cancelling() == 1 for n in expected)  # once each
        await asyncio.gather(*(tasks[n] for n in expected), return_exceptions=True)
        assert {n for n in range(5) if tasks[n].done()} == expected
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())


def test_a_second_close_cancels_nothing_more() -> None:
    async def scenario() -> int:
        task = asyncio.create_task(asyncio.Event().wait())
        watch = ConnectionWatch()
        assert watch.add(task)
        watch.close()
        watch.close()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelling()

    assert asyncio.run(scenario()) == 1
