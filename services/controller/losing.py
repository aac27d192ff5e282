"""Saying that Redis lost a swarm's recovery state, and that it is back (see `losses`).

A loss is loud: one `state_lost` line (error) naming what was lost and what to do, the swarm's
`Recovery.loss` (which readiness, gRPC health and `agentihooks_state_lost` read), a marker in
Redis that `status` answers from on every replica, and a Kubernetes Event (`StateLost`) on
each running worker of the swarm, whose failures are not recovered meanwhile. When the state is
back (the swarm applied again, the lease taken past the Pods' epoch), one `state_recovered`
line and the marker goes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from services.common import errors, logs
from services.controller import losses, pod_identities
from services.controller.pods import notices
from services.controller.pods import runtime as pods
from services.controller.state import keys

if TYPE_CHECKING:
    from services.controller import recovering

log = logging.getLogger("services.controller.recovery")


async def lost(
    recovery: recovering.Recovery, loss: losses.Loss, listed: Iterable[pods.Attempt]
) -> None:
    """Record `loss` on the recovery and say it, once per kind of loss: first the marker
    (under the lease) that `status` answers from, then readiness and health, then the line."""
    before = recovery.loss
    if before is not None and before.kind is loss.kind:
        recovery.loss = loss
        return
    marker = {**dataclasses.asdict(loss), "kind": loss.kind.value, "message": loss.message}
    await recovery.writer.mark_state_lost(json.dumps(marker, sort_keys=True))
    recovery.loss = loss
    if recovery.on_loss is not None:
        await recovery.on_loss()
    logs.event(
        log,
        losses.REASON,
        logging.ERROR,
        swarm=loss.swarm,
        kind=loss.kind.value,
        pods=loss.pods,
        newest_epoch=loss.newest_epoch,
        epoch=loss.epoch,
        message=loss.message,
    )
    runtime = recovery.runtime
    if isinstance(runtime, pods.Recording):
        for attempt in listed:
            if attempt.alive and not attempt.departed:
                identity = pod_identities.read(attempt.identity)
                runtime.record(
                    notices.state_lost(
                        attempt.swarm,
                        attempt.seat,
                        attempt.execution_id,
                        loss.kind.value,
                        identity.epoch if identity is not None else 0,
                    )
                )


async def handle(recovery: recovering.Recovery, found: losses.StateLost) -> None:
    """What a pass does on finding its swarm's state lost: say it; when Redis came back older
    than a worker's launch, take the lease again past that epoch and go on (what each seat
    lost is written back from its Pods by the next resync); when the swarm's records are gone,
    nothing more until they are back."""
    loss = found.loss
    await lost(recovery, loss, found.listed)
    if loss.kind is losses.Kind.EPOCH_BEHIND and await recovery.lease.acquire(loss.newest_epoch):
        await recovered(recovery)


async def recovered(recovery: recovering.Recovery) -> None:
    """The swarm's state is back: say it once and clear the marker (under the lease)."""
    loss = recovery.loss
    if loss is None:
        return
    await recovery.writer.mark_state_lost("")
    recovery.loss = None
    if recovery.on_loss is not None:
        await recovery.on_loss()
    logs.event(
        log,
        "state_recovered",
        logging.WARNING,
        swarm=loss.swarm,
        kind=loss.kind.value,
        epoch=recovery.lease.epoch,
    )


async def let_go(recovery: recovering.Recovery) -> None:
    """This replica no longer holds the swarm's lease: the loss is its holder's to say and
    clear (the marker stays for `status`); this replica's readiness no longer counts it."""
    if recovery.loss is None:
        return
    recovery.loss = None
    if recovery.on_loss is not None:
        await recovery.on_loss()


async def refuse_if_lost(recovery: recovering.Recovery) -> None:
    """Refuse a read of the swarm's status while its state is marked lost (by whichever
    replica holds it): an empty or older status would look like the truth.

    Raises:
        errors.Unavailable: `state_lost`, with what was lost and what to do.
    """
    marker = await recovery.client.get(keys.state_lost(recovery.swarm))
    if marker is None:
        return
    try:
        message = str(json.loads(marker)["message"])
    except (ValueError, KeyError, TypeError):
        message = f"the recovery state of swarm {recovery.swarm} was lost"
    raise errors.Unavailable(losses.REASON, message)
