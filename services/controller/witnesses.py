"""The decision a replacement's Pod carries: the cluster's second witness of recovery state.

Redis replication is asynchronous, so a failover can lose a decision Redis acknowledged. The
replacement that decision admitted keeps running, and its Pod carries, in one JSON annotation
(`pods.ANNOTATION_DECISION`, ``agentihooks.io/decision``), what admitted it: the choice, who
chose, the directive (continuity, checkpoint id, session id, watermark), the fence it answered
(reason, epoch, the session and watermark the fenced attempt held), the seat and generation it
replaces, and the ids its credential and grants were minted under. When Redis no longer knows
the Pod's generation, the controller writes that record back (`restore.lua`).

What it holds: names, words, numbers and token *ids*. Ids are the handles revocations use;
a token cannot be made from one without the controller's signing key, and the worker's
credential itself stays in its Secret. No conversation content: no task text, no transcript.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from services.common import directives
from services.controller import pod_identities
from services.controller.pods import runtime as pods
from services.controller.state import records

VERSION = 1
"""The annotation's format; a Pod carrying another version is not read."""


def pod_annotations(execution: records.Execution) -> dict[str, str]:
    """The annotations a replacement's worker carries: the decision that admitted it.

    Args:
        execution: The attempt being launched.

    Returns:
        ``{agentihooks.io/decision: JSON}`` for a replacement admitted by a decision, or
        nothing (a seat's first attempt).
    """
    if execution.admission is None or execution.restores_from_execution is None:
        return {}
    return {pods.ANNOTATION_DECISION: encode(execution)}


def to_json(execution: records.Execution) -> dict[str, Any]:
    """The witness of a replacement as a JSON object (see `pod_annotations`).

    Raises:
        ValueError: the attempt is no replacement admitted by a decision.
    """
    admitted = execution.admission
    if admitted is None or execution.restores_from_execution is None:
        raise ValueError("the attempt was admitted by no decision")
    directive = execution.directive
    fence: dict[str, Any] = {
        "reason": admitted.fence_reason,
        "epoch": admitted.fence_epoch,
        "fenced_at": admitted.fenced_at,
        "native_session_id": admitted.native_session_id,
        "archive_watermark": admitted.archive_watermark,
        "final_capture": admitted.final_capture,
    }
    out: dict[str, Any] = {
        "version": VERSION,
        "swarm": execution.swarm,
        "seat": execution.seat,
        "execution_id": execution.execution_id,
        "generation": execution.generation,
        "replaces": {
            "execution_id": execution.restores_from_execution,
            "generation": execution.restores_from_generation,
        },
        "task": {"id": execution.task_id, "generation": execution.task_generation},
        "choice": admitted.choice.value,
        "source": admitted.source.value,
        "agent": admitted.agent,
        "continuity": directive.recovery.value,
        "checkpoint_id": directive.checkpoint_id,
        "session_id": directive.session_id,
        "watermark": directive.watermark,
        "decided_at": admitted.decided_at,
        "decision_epoch": admitted.decision_epoch,
        "fence": {k: v for k, v in fence.items() if v is not None},
        "admitted_at": execution.admitted_at,
        "image": execution.image,
        "account": execution.account,
        "token_ids": pod_identities.TokenIds.of(execution).to_json(),
    }
    return {k: v for k, v in out.items() if v is not None}


def encode(execution: records.Execution) -> str:
    """`to_json` as compact JSON, keys sorted: the same text for the same attempt."""
    return json.dumps(to_json(execution), sort_keys=True, separators=(",", ":"))


def decode(text: str) -> records.Execution | None:
    """The replacement a witness names, as Redis recorded it when it was launched (running,
    launched; its task text is read from the ledger when it is written back), or None when
    the text is not a witness of this version or its fields disagree.

    Args:
        text: The annotation's value.
    """
    try:
        raw = json.loads(text)
        if not isinstance(raw, Mapping) or raw.get("version") != VERSION:
            return None
        return _execution(raw)
    except (KeyError, ValueError, TypeError):
        return None


def _execution(raw: Mapping[str, Any]) -> records.Execution:
    fence, replaces, task, ids = raw["fence"], raw["replaces"], raw["task"], raw["token_ids"]
    directive = directives.checked(
        directives.Directive(
            checkpoint_id=pod_identities.text(raw.get("checkpoint_id")),
            recovery=directives.Continuity(raw["continuity"]),
            session_id=pod_identities.text(raw.get("session_id")),
            watermark=pod_identities.number(raw.get("watermark")),
        )
    )
    admission = records.Admitted.from_json(
        {
            "choice": raw["choice"],
            "source": raw["source"],
            "agent": raw.get("agent"),
            "decided_at": raw["decided_at"],
            "decision_epoch": raw["decision_epoch"],
            "fence_reason": fence["reason"],
            "fence_epoch": fence["epoch"],
            "fenced_at": fence.get("fenced_at") or "",
            "native_session_id": fence.get("native_session_id"),
            "archive_watermark": fence.get("archive_watermark"),
            "final_capture": fence.get("final_capture") is True,
        }
    )
    generation = pod_identities.required_number(raw["generation"])
    replaced = pod_identities.required_number(replaces["generation"])
    if generation < 2 or replaced != generation - 1:
        raise ValueError("a replacement follows the generation it replaces")
    replacement = records.Execution(
        execution_id=records.ExecutionId(pod_identities.required_text(raw["execution_id"])),
        swarm=pod_identities.required_text(raw["swarm"]),
        seat=records.SeatName(pod_identities.required_text(raw["seat"])),
        generation=generation,
        task_id=pod_identities.required_text(task["id"]),
        task_generation=pod_identities.required_number(task["generation"]),
        image=pod_identities.text(raw.get("image")) or "",
        state=records.ExecutionState.RUNNING,
        directive=directive,
        credential_id="",
        credential_issued_at=0,
        capture_grant_id="",
        restore_grant_id=None,
        restores_from_execution=records.ExecutionId(
            pod_identities.required_text(replaces["execution_id"])
        ),
        restores_from_generation=replaced,
        legacy_spawn=False,
        account=pod_identities.text(raw.get("account")),
        native_session_id=None,
        archive_watermark=None,
        captured_checkpoint_id=None,
        launched=True,
        admitted_at=pod_identities.text(raw.get("admitted_at")) or "",
        admission=admission,
    )
    return pod_identities.TokenIds.from_json(ids).applied_to(replacement)


def fence_fields(replacement: records.Execution) -> dict[str, str]:
    """The fence record of the attempt a witnessed replacement replaced, as the fence script
    wrote it (`decode` gave the replacement)."""
    admitted, replaced = replacement.admission, replacement.restores_from_execution
    if admitted is None or replaced is None:
        raise ValueError("the attempt was admitted by no decision")
    out = {
        "execution_id": replaced,
        "swarm": replacement.swarm,
        "generation": str(replacement.restores_from_generation),
        "seat": replacement.seat,
        "reason": admitted.fence_reason,
        "controller_epoch": str(admitted.fence_epoch),
        "fenced_at": admitted.fenced_at,
        "task_id": replacement.task_id,
        "task_generation": str(replacement.task_generation),
    }
    if admitted.native_session_id:
        out["native_session_id"] = admitted.native_session_id
    if admitted.archive_watermark is not None:
        out["archive_watermark"] = str(admitted.archive_watermark)
    if admitted.final_capture:
        out["lost_tail"] = records.NO_LOST_TAIL
    return out


def decision_fields(replacement: records.Execution) -> dict[str, str]:
    """The accepted decision record a witnessed replacement names, as the accept script wrote
    it."""
    admitted, replaced = replacement.admission, replacement.restores_from_execution
    if admitted is None or replaced is None:
        raise ValueError("the attempt was admitted by no decision")
    out = {
        "execution_id": replaced,
        "state": records.DecisionState.ACCEPTED.value,
        "controller_epoch": str(admitted.decision_epoch),
        "choice": admitted.choice.value,
        "source": admitted.source.value,
        "decided_at": admitted.decided_at,
        "replacement": replacement.execution_id,
        "replacement_generation": str(replacement.generation),
        **records.directive_fields(replacement.directive),
    }
    if admitted.agent:
        out["agent"] = admitted.agent
    return out


def replaced_fence(replacement: records.Execution) -> records.Fence:
    """The fence a witnessed replacement answered, as a record (no release recorded)."""
    return records.Fence.from_hash(fence_fields(replacement))
