"""Acknowledge only what is durable: what each answered write leaves in Redis, confirmed by
`state.durable` before its caller is told it was accepted.

The acknowledged calls are a decision (`RestoreDecision`, the HTTP restore-decision), a pause or
unpause, an accepted outcome (`ReportRestore`) and an admission (`ApplySwarm`); and the events a
watcher is shown (`WatchRecovery`), which is how the CLI learns that the pass applied a recorded
decision request. Each names the facts its write left, so the confirming master is known to
hold them (see `durable`). With the default settings nothing waits and nothing is read.
"""

from __future__ import annotations

from services.controller import swarms
from services.controller.state import durable, keys, records


async def decided(acks: durable.Durability, swarm: str, decision: records.Decision) -> None:
    """A decision accepted now or before: the decision and its replacement."""
    e = decision.execution_id
    facts = [durable.Fact.field_is(keys.decision(swarm, e), "state", decision.state.value)]
    if decision.choice is not None:
        facts.append(
            durable.Fact.field_is(keys.decision(swarm, e), "choice", decision.choice.value)
        )
    replacement = decision.replacement_execution_id
    if replacement:
        facts.append(
            durable.Fact.field_is(keys.execution(swarm, replacement), "execution_id", replacement)
        )
    await acks.confirm(keys.acks(swarm), facts)


async def paused(acks: durable.Durability, swarm: str, paused: bool) -> None:
    """The swarm's recovery-paused switch as just set or cleared."""
    key = keys.paused(swarm)
    fact = durable.Fact.is_set(key) if paused else durable.Fact.is_unset(key)
    await acks.confirm(keys.acks(swarm), [fact])


async def reported(acks: durable.Durability, swarm: str, outcome: records.Outcome) -> None:
    """A verified outcome stored now or before."""
    key = keys.outcome(swarm, outcome.execution_id)
    await acks.confirm(
        keys.acks(swarm),
        [
            durable.Fact.field_is(key, "execution_id", outcome.execution_id),
            durable.Fact.field_is(key, "recovery", outcome.recovery.value),
        ],
    )


async def admitted(acks: durable.Durability, document: swarms.SwarmDocument) -> None:
    """A swarm declared or updated: its config, masters and accounts as the document has them,
    each seat with its task and text, and the swarm in the index of swarm names (on a slot of
    its own, so confirmed on its own master)."""
    s, config = document.swarm, document.config
    facts = [durable.Fact.field_is(keys.config(s), k, v) for k, v in config.to_hash().items()]
    tables = ((keys.masters(s), document.masters), (keys.accounts(s), document.accounts))
    for table, fields in tables:
        facts.append(durable.Fact.length_is(table, len(fields)))
        facts += [durable.Fact.field_is(table, k, str(v)) for k, v in fields.items()]
    for seat in document.seats:
        facts.append(durable.Fact.field_is(keys.seat(s, seat.seat), "task_id", seat.task_id))
        facts.append(durable.Fact.field_is(keys.task(s, seat.task_id), "text", seat.text))
    await acks.confirm(keys.acks(s), facts)
    await acks.confirm(keys.SWARMS_ACKS, [durable.Fact.has_member(keys.SWARMS, s)])


async def shown(acks: durable.Durability, swarm: str, last_event_id: str) -> None:
    """Events about to be shown to a watcher, up to `last_event_id`."""
    await acks.confirm(
        keys.acks(swarm), [durable.Fact.has_entry(keys.events(swarm), last_event_id)]
    )
