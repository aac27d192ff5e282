"""Between the controller's records and the protobuf messages of the contract.

The JSON surfaces use the spec's lowercase words; the wire uses the proto enums. This module is
the one place that maps one to the other.
"""

from __future__ import annotations

import json

from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.common import directives, errors
from services.controller import launch_records
from services.controller.state import records, swarm_status

CONTINUITY_PB = {
    directives.Continuity.NATIVE: types_pb2.CONTINUITY_NATIVE,
    directives.Continuity.RECONSTRUCTED: types_pb2.CONTINUITY_RECONSTRUCTED,
    directives.Continuity.FRESH: types_pb2.CONTINUITY_FRESH,
}
CONTINUITY_OF: dict[int, directives.Continuity] = {v: k for k, v in CONTINUITY_PB.items()}
CHOICE_PB = {
    records.Choice.RESUME: types_pb2.CHOICE_RESUME,
    records.Choice.FRESH: types_pb2.CHOICE_FRESH,
}
CHOICE_OF: dict[int, records.Choice] = {v: k for k, v in CHOICE_PB.items()}
STATE_PB = {
    records.DecisionState.RECOVERY_PENDING: types_pb2.DECISION_STATE_RECOVERY_PENDING,
    records.DecisionState.ACCEPTED: types_pb2.DECISION_STATE_ACCEPTED,
}
SOURCE_PB = {
    records.DecisionSource.AUTOMATIC: types_pb2.DECISION_SOURCE_AUTOMATIC,
    records.DecisionSource.OPERATOR: types_pb2.DECISION_SOURCE_OPERATOR,
    records.DecisionSource.MASTER: types_pb2.DECISION_SOURCE_MASTER,
    records.DecisionSource.LEGACY_SPAWN: types_pb2.DECISION_SOURCE_LEGACY_SPAWN,
}


def choice(value: int) -> records.Choice:
    """The request's choice, or a malformed-request refusal."""
    found = CHOICE_OF.get(value)
    if found is None:
        raise errors.Malformed("malformed", "choice must be resume or fresh")
    return found


def continuity(value: int) -> directives.Continuity:
    """A reported continuity, or a malformed-request refusal."""
    found = CONTINUITY_OF.get(value)
    if found is None:
        raise errors.Malformed("malformed", "recovery must be native, reconstructed or fresh")
    return found


def directive(d: directives.Directive | None) -> types_pb2.RestoreDirective:
    if d is None:
        return types_pb2.RestoreDirective()
    out = types_pb2.RestoreDirective(
        checkpoint_id=d.checkpoint_id or "",
        recovery=CONTINUITY_PB[d.recovery],
        session_id=d.session_id or "",
    )
    if d.watermark is not None:
        out.watermark = d.watermark
    return out


def decision(d: records.Decision) -> types_pb2.Decision:
    out = types_pb2.Decision(
        execution_id=d.execution_id,
        state=STATE_PB[d.state],
        agent=d.agent or "",
        directive=directive(d.directive),
        replacement_execution_id=d.replacement_execution_id or "",
        replacement_generation=d.replacement_generation or 0,
        controller_epoch=d.controller_epoch,
        decided_at=d.decided_at or "",
    )
    if d.choice is not None:
        out.choice = CHOICE_PB[d.choice]
    if d.source is not None:
        out.source = SOURCE_PB[d.source]
    return out


def outcome(o: records.Outcome) -> types_pb2.RestoreOutcome:
    out = types_pb2.RestoreOutcome(
        execution_id=o.execution_id,
        recovery=CONTINUITY_PB[o.recovery],
        checkpoint_id=o.checkpoint_id or "",
        session_id=o.session_id or "",
        verified=o.verified,
        reported_at=o.reported_at,
    )
    if o.watermark is not None:
        out.watermark = o.watermark
    if o.archive_watermark is not None:
        out.archive_watermark = o.archive_watermark
    return out


def status(s: swarm_status.SwarmStatus, runtime: str) -> pb.SwarmStatus:
    return pb.SwarmStatus(
        swarm=s.swarm,
        paused=s.paused,
        automation=s.automation,
        tasks=[
            pb.Task(
                task_id=t.task_id,
                seat=t.seat,
                text=t.text,
                awaiting=t.awaiting,
                recovery_json=json.dumps(dict(t.recovery), sort_keys=True) if t.recovery else "",
                task_generation=t.task_generation,
            )
            for t in s.tasks
        ],
        seats=[
            pb.Seat(
                seat=seat.seat,
                current_execution_id=seat.current_execution_id,
                generation=seat.generation,
                state=seat.state.value,
            )
            for seat in s.seats
        ],
        handoffs=[
            pb.HandoffCard(
                seat=c.seat,
                execution_id=c.execution_id,
                failure=c.failure,
                reason=c.reason,
                checkpoint=c.checkpoint,
                resume_available=c.resume_available,
                resume_label=c.resume_label,
                continuity=c.continuity,
                decision=c.decision,
                replacement_execution_id=c.replacement_execution_id,
            )
            for c in s.handoffs
        ],
        restore_outcomes_by_type=s.restore_outcomes_by_type,
        controller_epoch=s.controller_epoch,
        runtime=runtime,
    )


def launch_record(r: launch_records.LaunchRecord) -> pb.LaunchRecord:
    return pb.LaunchRecord(
        scope=types_pb2.AttemptScope(
            swarm=r.scope.swarm,
            seat=r.scope.seat,
            task_id=r.scope.task_id,
            task_generation=r.scope.task_generation,
            execution_id=r.scope.execution_id,
            execution_generation=r.scope.execution_generation,
        ),
        directive=directive(r.directive),
        registration=types_pb2.Registration(
            projects=[types_pb2.Project(name=p.name, repository=p.repository) for p in r.projects],
            worker_image=r.worker_image,
            harness=r.harness,
        ),
        restores_from_generation=r.restores_from_generation,
        restore_grant=r.restore_grant or "",
        capture_grant=r.capture_grant,
        command=list(r.command),
        checkpoint_remote=r.checkpoint_remote,
        store_addr=r.store_addr or "",
        continuation_prompt=r.continuation_prompt,
    )
