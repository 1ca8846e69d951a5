"""How closing an HTTP connection reaches the requests on it: `ConnectionWatch` cancels
the tasks of the requests it watches when the connection closes, exactly those, once,
and cancels at once a request watched after the close."""

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
        cancels = dict.fromkeys(range(5), 0)
        for action, number in steps:
            if action == "add":
                watch.add(tasks[number])
                if watch.closed:  # watched too late: cancelled at once
                    cancels[number] += 1
                else:
                    watched.add(number)
            elif action == "discard":
                watch.discard(tasks[number])
                watched.discard(number)
            elif not watch.closed:
                watch.close()
                for watched_number in watched:
                    cancels[watched_number] += 1
                watched.clear()
        expected = {n for n, count in cancels.items() if count}
        assert {n: tasks[n].cancelling() for n in range(5)} == cancels  # once per watch
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
        watch.add(task)
        watch.close()
        watch.close()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelling()

    assert asyncio.run(scenario()) == 1
