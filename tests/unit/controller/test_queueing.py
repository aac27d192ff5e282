"""`queueing.WorkQueue`, the controller's one queue of seats (issue 22: "a seat is worked by one
worker at a time, a seat added while queued is not added twice, a seat touched while being
worked is worked again after"; client-go's workqueue and kopf's per-object queues). Pure
asyncio: no Redis, no runtime."""

from __future__ import annotations

import asyncio
import collections
import random

import pytest

from services.controller import queueing


async def drain(queue: queueing.WorkQueue[str], limit: int = 100) -> list[str]:
    """Take and finish what is ready now, in order."""
    taken: list[str] = []
    while len(queue):
        for key in await queue.get_batch(limit):
            taken.append(key)
            queue.done(key)
    return taken


async def test_a_key_added_while_queued_is_queued_once() -> None:
    """No duplicate while queued: a key added again before a worker takes it is worked once."""
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    for key in ("a", "b", "a", "a", "c", "b"):
        queue.add(key)
    assert len(queue) == 3
    assert queue.held() == {"a", "b", "c"}
    assert await drain(queue) == ["a", "b", "c"]
    assert len(queue) == 0 and queue.held() == frozenset()


async def test_a_key_being_worked_is_not_handed_to_a_second_worker() -> None:
    """One worker per key: while a worker holds a key, adding it again hands it to nobody;
    other keys go to other workers meanwhile."""
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    queue.add("b")
    assert len(queue) == 1 and queue.processing("a")
    assert await queue.get() == "b"  # not "a": its worker has not called done
    second = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0.01)
    assert not second.done()
    queue.done("b")
    queue.done("a")
    assert await asyncio.wait_for(second, 1) == "a"


async def test_a_key_touched_while_worked_is_worked_again_after() -> None:
    """Re-worked when touched mid-work: a key added (once or many times) while its worker
    works is queued again, once, when that worker is done; a key not touched is not."""
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    queue.add("a")
    queue.add("b")
    a, b = await queue.get_batch(2)
    assert (a, b) == ("a", "b")
    for _ in range(3):
        queue.add("a")
    assert len(queue) == 0  # not ready while its worker works
    queue.done("a")
    queue.done("b")
    assert await drain(queue) == ["a"]


async def test_one_worker_per_key_under_many_workers_and_producers() -> None:
    """Many workers and producers at random: no key is ever worked by two workers at once, and
    every key added is worked after its last addition."""
    queue: queueing.WorkQueue[int] = queueing.WorkQueue()
    rng = random.Random(22)
    working: set[int] = set()
    worked: collections.Counter[int] = collections.Counter()
    last_added: dict[int, int] = {}
    last_started: dict[int, int] = {}
    clock = 0

    async def worker() -> None:
        nonlocal clock
        while True:
            try:
                keys = await queue.get_batch(rng.randint(1, 4))
            except queueing.ShutDown:
                return
            for key in keys:
                assert key not in working, f"{key} worked twice at once"
                working.add(key)
                clock += 1
                last_started[key] = clock
            await asyncio.sleep(rng.random() / 1000)
            for key in keys:
                working.discard(key)
                worked[key] += 1
                queue.done(key)

    async def producer() -> None:
        nonlocal clock
        for _ in range(400):
            key = rng.randrange(30)
            clock += 1
            last_added[key] = clock
            queue.add(key)
            if rng.random() < 0.3:
                await asyncio.sleep(0)

    workers = [asyncio.ensure_future(worker()) for _ in range(8)]
    await asyncio.gather(*(producer() for _ in range(4)))
    await asyncio.wait_for(queue.idle(), 5)
    queue.shut_down()
    await asyncio.gather(*workers)
    assert set(worked) == set(last_added)
    for key, added in last_added.items():
        assert last_started[key] > added, key  # a work began after the last addition


async def test_add_after_comes_back_later_and_keeps_the_earlier_time() -> None:
    """`add_after` is "come back later": the key is not ready before its time; a second
    `add_after` keeps the earlier of the two; `add` meanwhile queues it at once (and the timer
    then finds it queued: once)."""
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    queue.add_after("a", 0.05)
    queue.add_after("a", 5.0)
    assert len(queue) == 0 and not queue.holds("a")
    got = await asyncio.wait_for(queue.get(), 1)
    assert got == "a"
    queue.done("a")
    queue.add_after("b", 0.05)
    queue.add("b")
    assert len(queue) == 1
    await asyncio.sleep(0.1)
    assert len(queue) == 1
    assert await drain(queue) == ["b"]


async def test_rate_limited_keys_back_off_per_key_until_forgotten() -> None:
    """Per-key backoff: each failure of a key doubles its wait (up to the cap); other keys are
    not slowed; `forget` starts it over."""
    backoff = queueing.Backoff(base_s=0.01, cap_s=0.04)
    assert [backoff.delay(n) for n in range(5)] == [0.01, 0.02, 0.04, 0.04, 0.04]
    queue: queueing.WorkQueue[str] = queueing.WorkQueue(backoff=backoff)
    loop = asyncio.get_running_loop()
    waits = []
    for _ in range(3):
        started = loop.time()
        queue.add_rate_limited("a")
        assert await asyncio.wait_for(queue.get(), 1) == "a"
        waits.append(loop.time() - started)
        queue.done("a")
    assert queue.failures("a") == 3
    assert waits[0] >= 0.009 and waits[1] >= 0.019 and waits[2] >= 0.039, waits
    queue.add("b")
    assert await asyncio.wait_for(queue.get(), 0.005) == "b"  # not held up by "a"
    queue.done("b")
    queue.forget("a")
    assert queue.failures("a") == 0


async def test_shutting_down_wakes_the_workers_and_drops_what_waits() -> None:
    """Shut down: a waiting worker wakes with `ShutDown`, nothing more is handed out or added,
    delayed keys are dropped, and a key being worked may still be done."""
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    waiting = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    queue.add_after("b", 0.01)
    queue.add("a")  # touched while worked: would be queued again at its done
    queue.shut_down()
    with pytest.raises(queueing.ShutDown):
        await asyncio.wait_for(waiting, 1)
    queue.add("d")
    assert len(queue) == 0 and not queue.holds("d") and queue.shutting_down
    with pytest.raises(queueing.ShutDown):
        await queue.get()
    await asyncio.sleep(0.03)
    assert len(queue) == 0 and not queue.holds("b")
    queue.done("a")
    assert len(queue) == 0
    await asyncio.wait_for(queue.idle(), 1)


async def test_idle_waits_for_the_keys_being_worked() -> None:
    """`idle` is reached once nothing is queued or worked on (a delayed key aside)."""
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    queue.add("a")
    key = await queue.get()
    idle = asyncio.ensure_future(queue.idle())
    queue.add_after("z", 60)
    await asyncio.sleep(0.01)
    assert not idle.done()
    queue.done(key)
    await asyncio.wait_for(idle, 1)
    queue.shut_down()
