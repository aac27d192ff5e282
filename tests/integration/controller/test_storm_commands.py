"""Redis commands per replacement on a real redis-server (issue 10 item 5: fewer Redis round
trips per replacement). Counts, not times: INFO commandstats around one recovery pass."""

from __future__ import annotations

import asyncio
import collections

import redis.asyncio as aioredis

from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second

SEATS = ("eng-1", "eng-2")

MAX_COMMANDS_PER_REPLACEMENT = 80
"""Every command Redis ran per automatic fresh replacement in a listing pass over two failed
seats (scripts and the commands they run, the controller's reads): 74 now (the pass
shares Redis with its seat's other helpers, so one or two more may land in the window). A
guard against a replacement growing a read per seat or per checkpoint, not a measure of the
last single command saved."""


async def commands(client: aioredis.Redis) -> collections.Counter[str]:
    stats = await client.info("commandstats")
    return collections.Counter(
        {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    )


async def test_a_replacement_costs_a_bounded_number_of_redis_commands(
    redis_client: aioredis.Redis,
) -> None:
    """Spec, "Replace": a decision to start fresh admits one replacement on the same seat; the
    pass that fences, releases, decides, launches and removes the lost Pod runs at most
    `MAX_COMMANDS_PER_REPLACEMENT` Redis commands per replacement, and the fence keeps every
    release (recorded without being read back)."""
    hx = await h.start(redis_client, legacy=True, seats=SEATS)
    await hx.recovery.reconcile()  # a quiet pass first: connections and scripts are loaded
    for seat in SEATS:
        hx.runtime.fail(first(seat))
    before = await commands(redis_client)
    report = await hx.recovery.reconcile()
    spent = await commands(redis_client) - before
    for one_off in ("info", "hello", "script|load", "client|setinfo"):
        spent.pop(one_off, None)  # the count's own, and a connection's or script's first use
    assert sorted(report.launched) == sorted(second(s) for s in SEATS), report
    per_replacement = sum(spent.values()) / len(SEATS)
    assert per_replacement <= MAX_COMMANDS_PER_REPLACEMENT, (per_replacement, spent)
    for seat in SEATS:
        fence = await reading.fence(redis_client, SWARM, first(seat))
        assert fence is not None and {r.kind for r in fence.releases} == set(records.ReleaseKind)


async def test_a_pass_over_seats_awaiting_their_outcome_reads_them_in_one_round_trip(
    redis_client: aioredis.Redis,
) -> None:
    """After a storm most seats only wait for their replacement's report: a listing pass then
    checks them all in the one read-only script it starts with (no other read from the
    controller, no write) and does nothing else for them; a seat with work left (its
    replacement not launched) still gets it."""
    seats = ("eng-1", "eng-2", "eng-3")  # as many as the accounts have slots
    hx = await h.start(redis_client, legacy=True, seats=seats)
    for seat in seats:
        hx.runtime.fail(first(seat))
    report = await hx.recovery.reconcile()
    assert sorted(report.launched) == sorted(second(s) for s in seats), report
    await hx.recovery.reconcile()  # whatever the first pass left settled (none expected)
    before = await commands(redis_client)
    report = await hx.recovery.reconcile()
    spent = await commands(redis_client) - before
    spent.pop("info", None)
    assert not report.launched and not report.fenced, report
    # One script call; inside it, per seat: the seat's hash, its fence's releases, its
    # decision's state, its replacement's state (no read of the whole fence or config). The
    # expected hash, the attention set, the recorded requests and whether the swarm's config
    # exists (issue 23: a swarm whose records Redis lost) besides, in the same script: nothing
    # else at all.
    assert spent["evalsha"] == 1, spent
    assert spent["hmget"] == 2 * len(seats), spent
    assert spent["hget"] == len(seats), spent
    assert spent["hgetall"] == len(seats) + 2, spent
    assert spent["smembers"] == 1, spent
    assert spent["exists"] == 1, spent
    assert sum(spent.values()) == 1 + 4 * len(seats) + 4, spent
    # One replacement recorded as not launched (a relaunch, as after a refusal) is launched
    # again by the next pass: the quick check does not hide work.
    await redis_client.hset(keys.execution(SWARM, second("eng-3")), "launched", "0")
    hx.runtime.attempts.pop(second("eng-3"), None)
    report = await hx.recovery.reconcile()
    assert report.launched == [second("eng-3")], report


async def test_a_decision_answers_with_what_the_accept_script_returned(
    redis_client: aioredis.Redis,
) -> None:
    """Issue 22: the accept script is the one check of a repeat or a conflict and returns the
    decision it stored, the replacement and the seat, so a decision call never reads the
    decision (neither before its script nor after), and the seat's worker launches the
    replacement from what the script returned: nothing is read between the accept script and
    the launch's script."""
    hx = await h.start(redis_client, automation=False)
    hx.runtime.fail(first("eng-1"))
    await hx.recovery.reconcile()
    decision_key = keys.decision(h.SWARM, first("eng-1"))
    seen: list[list[str]] = []
    async with redis_client.monitor() as monitor:

        async def record() -> None:
            async for command in monitor.listen():
                if command.get("client_type") != "lua":  # the scripts' own calls aside
                    seen.append(str(command.get("command", "")).split())

        recorder = asyncio.create_task(record())
        answer = await hx.recovery.restore_decision(
            first("eng-1"), records.Choice.FRESH, None, records.Operator()
        )
        await redis_client.ping()
        await asyncio.sleep(0.2)
        recorder.cancel()
        await asyncio.gather(recorder, return_exceptions=True)
    stored = await reading.decision(redis_client, h.SWARM, first("eng-1"))
    assert answer.decision == stored and not answer.repeated
    read = [c for c in seen if decision_key in c and c[0] != "EVALSHA"]
    assert not read, seen  # only the accept script touches the decision
    accept = max(i for i, c in enumerate(seen) if c[:1] == ["EVALSHA"] and decision_key in c)
    launched = keys.execution(h.SWARM, second("eng-1"))
    assert seen[accept + 1][0] == "EVALSHA" and launched in seen[accept + 1], seen
