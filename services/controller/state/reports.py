"""The writes of what a running attempt reports with its own credential: its captures, its
verified restore outcome, a restore refusal. Each script is the one check, under the lease,
that the credential is the attempt's own (its id and generation) and that the attempt is still
its seat's current, unfenced one: `forbidden` otherwise, and nothing is written."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from services.common import tokens
from services.controller.state import guarded, keys, records, transitions


@dataclasses.dataclass(frozen=True)
class Stored:
    """The answer of `Reports.outcome`: when `mismatch`, the field that differs."""

    status: transitions.OutcomeStatus
    field: str | None = None


class Reports(guarded.Guarded):
    """What attempts report (part of `writing.Writer`)."""

    def _reported(
        self, execution: records.Execution, credential: tokens.WorkerCredential
    ) -> dict[str, Any]:
        """What every report passes (`transitions.Reported`): the credential's id and
        generation, which the script compares with the attempt's record."""
        return {
            "seat": keys.seat(self.swarm, execution.seat),
            "execution": keys.execution(self.swarm, execution.execution_id),
            "execution_id": execution.execution_id,
            "credential_id": credential.credential_id,
            "generation": credential.execution_generation,
        }

    async def capture(
        self,
        execution: records.Execution,
        credential: tokens.WorkerCredential,
        session_id: str | None,
        archive_watermark: int | None,
        checkpoint_id: str | None,
        final: bool = False,
    ) -> transitions.CaptureStatus:
        """Store a running attempt's capture report (`final`: the sidecar's last, taken once
        the worker stopped): `captured` or `forbidden`."""
        reply = await self._run(
            transitions.Capture(
                **self._reported(execution, credential),
                session_id=session_id,
                archive_watermark=archive_watermark,
                checkpoint_id=checkpoint_id,
                at=self.now(),
                final=final,
            )
        )
        return reply.status

    async def outcome(
        self,
        execution: records.Execution,
        task_id: str,
        credential: tokens.WorkerCredential,
        outcome: records.Outcome,
        task_recovery: Mapping[str, Any],
        detail: str,
    ) -> Stored:
        """Store a verified outcome: `stored`, `repeated`, `conflict`, `mismatch` (with the
        `field`), `forbidden` or `not_replacement`."""
        s, e = self.swarm, execution.execution_id
        reply = await self._run(
            transitions.Outcome(
                **self._reported(execution, credential),
                outcome=keys.outcome(s, e),
                task=keys.task(s, task_id),
                counters=keys.outcomes_by_type(s),
                events=keys.events(s),
                refusal=keys.refusal(s, e),
                attention=keys.attention(s),
                fence=keys.fence(s, execution.restores_from_execution or e),
                outcome_fields=outcome.to_hash(),
                task_recovery=dict(task_recovery),
                at=outcome.reported_at,
                swarm=s,
                detail=detail,
            )
        )
        return Stored(reply.status, reply.fields.get("field"))

    async def refusal(
        self,
        execution: records.Execution,
        credential: tokens.WorkerCredential,
        reason: str,
        detail: str,
    ) -> transitions.RefusalStatus:
        """Keep a reported restore refusal, which holds the attempt: `stored`, `forbidden`,
        `not_replacement` or `conflict` (a verified outcome is stored already)."""
        s, e = self.swarm, execution.execution_id
        reply = await self._run(
            transitions.Refusal(
                **self._reported(execution, credential),
                refusal=keys.refusal(s, e),
                events=keys.events(s),
                outcome=keys.outcome(s, e),
                reason=reason,
                at=self.now(),
                swarm=s,
                detail=detail,
            )
        )
        return reply.status
