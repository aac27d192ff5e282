"""When Redis lost what it had acknowledged: telling it from what the worker Pods say.

Redis replication is asynchronous and a Redis without persistence restarts empty, so the
recovery state can come back older than it was, or not at all. The worker Pods outlive that:
each carries the lease epoch it was launched under (`pod_identities`). A resync compares the
two before it writes anything:

- **records_missing**: the swarm's config is gone while its workers run. Nothing can be
  recovered for the swarm from Redis, and the Pods do not hold the swarm's document (seats,
  masters, accounts): the controller stops working the swarm and says so until the operator
  applies the swarm again (`agentihooks swarm apply`), which adopts the running workers
  (`swarms.apply`) and writes back the decisions their Pods carry (`witnessing`).
- **epoch_behind**: a worker was launched under a newer epoch than the lease now holds, so
  Redis came back older than that launch. The controller takes the lease again past that epoch
  (`leasing.Lease.acquire`'s floor) and goes on; what Redis lost of each seat is written back
  from its Pods (`witnessing`).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from services.controller import pod_identities
from services.controller.pods import runtime as pods

REASON = "state_lost"
"""The reason readiness, health, status and the metric give."""


class Kind(enum.StrEnum):
    RECORDS_MISSING = "records_missing"
    EPOCH_BEHIND = "epoch_behind"


@dataclasses.dataclass(frozen=True)
class Loss:
    """What a resync found Redis lost of one swarm.

    Attributes:
        swarm: The swarm.
        kind: What was lost.
        pods: How many of the swarm's workers run.
        newest_epoch: The newest epoch a worker was launched under (0: none says).
        epoch: The lease's epoch now.
    """

    swarm: str
    kind: Kind
    pods: int
    newest_epoch: int
    epoch: int

    @property
    def message(self) -> str:
        """What an operator reads (status, readiness, the log): what happened and what to do."""
        if self.kind is Kind.RECORDS_MISSING:
            return (
                f"the recovery state of swarm {self.swarm} was lost (Redis came back without it)"
                f" while {self.pods} of its workers run; recovery is stopped for the swarm:"
                " apply the swarm's document again (agentihooks swarm apply FILE) to adopt them"
            )
        return (
            f"the recovery state of swarm {self.swarm} came back older (epoch {self.epoch},"
            f" a worker was launched under epoch {self.newest_epoch}); the controller takes"
            " the lease again past it and writes back what the workers carry"
        )


class StateLost(Exception):
    """A resync found that Redis lost the swarm's state; it wrote nothing. `listed` is what
    the runtime listed of the swarm's workers."""

    def __init__(self, loss: Loss, listed: Iterable[pods.Attempt] = ()) -> None:
        super().__init__(loss.kind.value)
        self.loss = loss
        self.listed = tuple(listed)


def detect(swarm: str, *, known: bool, listed: Iterable[pods.Attempt], epoch: int) -> Loss | None:
    """What Redis lost of `swarm`, from a resync's reads and list, or None.

    Args:
        swarm: The swarm.
        known: Whether its config exists in Redis.
        listed: What the runtime lists of its workers.
        epoch: The epoch the lease holds now.
    """
    listed = list(listed)
    running = sum(1 for a in listed if not a.departed and a.alive)
    newest = pod_identities.newest_epoch(a for a in listed if not a.departed)
    if not known and running:
        return Loss(swarm, Kind.RECORDS_MISSING, running, newest, epoch)
    if newest > epoch:
        return Loss(swarm, Kind.EPOCH_BEHIND, running, newest, epoch)
    return None
