"""The decision a replacement's Pod carries (issue 23, point 2: "Every replacement Pod carries, in
its annotations, the decision that admitted it"): its format, what it leaves out, and that the
controller can read back exactly what it wrote."""

from __future__ import annotations

import dataclasses
import json

import pytest

from services.common import directives
from services.controller import observations, replacing, witnesses
from services.controller.pods import classifying, runtime, templates
from services.controller.state import records

TASK_TEXT = "refactor the secret payroll module"
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"


def fence(generation: int = 1, *, session: str | None = SESSION) -> records.Fence:
    """The fence of eng-2's attempt of `generation`."""
    return records.Fence(
        execution_id=records.ExecutionId(f"example.eng-2.{generation}"),
        swarm="example",
        generation=generation,
        seat=records.SeatName("eng-2"),
        reason="oom_killed",
        controller_epoch=3,
        native_session_id=session,
        archive_watermark=400 if session else None,
        fenced_at="2026-12-06T08:00:00Z",
        task_id="t-eng-2",
        task_generation=1,
        releases=(),
    )


def replacement(
    *,
    choice: records.Choice = records.Choice.RESUME,
    source: records.DecisionSource = records.DecisionSource.OPERATOR,
    directive: directives.Directive | None = None,
) -> records.Execution:
    fenced = fence()
    execution = replacing.new_execution(
        swarm="example",
        seat="eng-2",
        generation=2,
        task_id="t-eng-2",
        task_generation=1,
        image="registry.local/agent-worker:1.4.2",
        directive=directive
        or directives.Directive("ckpt-7", directives.Continuity.NATIVE, SESSION, 412),
        restores_from=fenced,
        legacy_spawn=False,
        now=1_765_000_000.0,
        admission=records.Admitted(
            choice=choice,
            source=source,
            agent="master@example-1" if source is records.DecisionSource.MASTER else None,
            decided_at="2026-12-06T08:01:00Z",
            decision_epoch=4,
            fence_reason=fenced.reason,
            fence_epoch=fenced.controller_epoch,
            fenced_at=fenced.fenced_at,
            native_session_id=fenced.native_session_id,
            archive_watermark=fenced.archive_watermark,
        ),
    )
    return dataclasses.replace(execution, account="acct-a", task_text=TASK_TEXT)


def test_a_replacement_carries_its_decision_in_one_annotation() -> None:
    """Issue 23: the choice, who chose, continuity, checkpoint, session id, watermark, the
    fence's reason and epoch, and the seat and generation it replaces."""
    execution = replacement(source=records.DecisionSource.MASTER)
    [(key, value)] = witnesses.pod_annotations(execution).items()
    assert key == runtime.ANNOTATION_DECISION == "agentihooks.io/decision"
    witness = json.loads(value)
    assert witness == {
        "version": 1,
        "swarm": "example",
        "seat": "eng-2",
        "execution_id": "example.eng-2.2",
        "generation": 2,
        "replaces": {"execution_id": "example.eng-2.1", "generation": 1},
        "task": {"id": "t-eng-2", "generation": 1},
        "choice": "resume",
        "source": "master",
        "agent": "master@example-1",
        "continuity": "native",
        "checkpoint_id": "ckpt-7",
        "session_id": SESSION,
        "watermark": 412,
        "decided_at": "2026-12-06T08:01:00Z",
        "decision_epoch": 4,
        "fence": {
            "reason": "oom_killed",
            "epoch": 3,
            "fenced_at": "2026-12-06T08:00:00Z",
            "native_session_id": SESSION,
            "archive_watermark": 400,
            "final_capture": False,
        },
        "admitted_at": execution.admitted_at,
        "image": "registry.local/agent-worker:1.4.2",
        "account": "acct-a",
        "token_ids": {
            "credential": execution.credential_id,
            "credential_issued_at": execution.credential_issued_at,
            "capture_grant": execution.capture_grant_id,
            "restore_grant": execution.restore_grant_id,
        },
    }


def test_the_witness_holds_no_token_and_no_conversation() -> None:
    """Issue 23: no secret, no token, no conversation content: the worker credential stays in
    its Secret and the task text on the ledger."""
    execution = replacement()
    text = witnesses.encode(execution)
    token = replacing.worker_token("k" * 48, execution)
    assert token not in text and TASK_TEXT not in text
    assert "text" not in json.loads(text)["task"]


def test_a_fresh_decision_names_no_checkpoint() -> None:
    fresh = directives.Directive(None, directives.Continuity.FRESH, None, None)
    execution = replacement(choice=records.Choice.FRESH, directive=fresh)
    witness = json.loads(witnesses.encode(execution))
    assert (witness["choice"], witness["continuity"]) == ("fresh", "fresh")
    assert {"checkpoint_id", "session_id", "watermark"}.isdisjoint(witness)
    assert "restore_grant" not in witness["token_ids"]


def test_a_first_attempt_carries_no_decision() -> None:
    first = dataclasses.replace(replacement(), restores_from_execution=None, admission=None)
    assert witnesses.pod_annotations(first) == {}


def test_the_controller_reads_back_the_replacement_it_launched() -> None:
    """What the Pod carries is enough to write the replacement's record back (running,
    launched); its task text is read from the ledger then, never from the Pod."""
    execution = replacement()
    read = witnesses.decode(witnesses.encode(execution))
    expected = dataclasses.replace(execution, launched=True, task_text="")
    assert read == expected


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps({"version": 2}),
        # A generation that does not follow the one it replaces.
        witnesses.encode(replacement()).replace('"generation":2', '"generation":5'),
        # A directive whose fields disagree.
        witnesses.encode(replacement()).replace('"continuity":"native"', '"continuity":"fresh"'),
        witnesses.encode(replacement()).replace('"choice":"resume"', '"choice":"maybe"'),
    ],
)
def test_a_malformed_witness_is_not_read(text: str) -> None:
    assert witnesses.decode(text) is None


def test_the_pod_and_the_execution_record_carry_the_same_witness() -> None:
    """The Pod rendered for the replacement carries the annotation beside its image; the
    execution record round-trips the decision that admitted it."""
    execution = replacement()
    spec = runtime.LaunchSpec(
        swarm="example",
        seat="eng-2",
        execution_id=execution.execution_id,
        generation=2,
        image=execution.image,
        command=("agentihooks-restorer", "entry"),
        worker_credential="wk-secret",
        annotations=witnesses.pod_annotations(execution),
    )
    pod = templates.render_pod(templates.default_pod_template(), spec, namespace="agents")
    annotations = pod["metadata"]["annotations"]
    assert annotations[runtime.ANNOTATION_IMAGE] == execution.image
    assert annotations[runtime.ANNOTATION_DECISION] == witnesses.encode(execution)
    assert records.Execution.from_hash(execution.to_hash()) == execution


def attempt(
    generation: int,
    *,
    witness: bool = True,
    alive: bool = True,
    seat: str = "eng-2",
    failure: classifying.FailureReason | None = None,
) -> runtime.Attempt:
    return runtime.Attempt(
        swarm="example",
        seat=seat,
        execution_id=f"example.{seat}.{generation}",
        generation=generation,
        failure=failure,
        alive=alive,
        witness="{}" if witness else None,
    )


def test_a_listed_pod_newer_than_the_records_expect_is_brought_with_its_witness() -> None:
    """Issue 23: "a running labelled Pod of a generation Redis does not know". A witnessed
    Pod the records expect, an older one, one without a witness, a finished one and a failed
    one (a fenced replacement's Pod waiting for removal) are not."""
    listed = [
        attempt(2),
        attempt(3, seat="eng-1"),
        attempt(1, seat="eng-3", witness=False),
        attempt(2, seat="eng-4", alive=False),
        attempt(2, seat="eng-5", failure=classifying.FailureReason.OOM_KILLED),
    ]
    found = observations.unexpected_witnesses(
        "example", listed, ["example.eng-2.1", "example.eng-1.3"]
    )
    assert found == {"eng-2": listed[0]}


def test_the_newest_witness_of_a_seat_is_kept_when_seen_twice() -> None:
    seen = observations.Seen(witnessed=attempt(2))
    seen.merge(observations.Seen(witnessed=attempt(3)))
    assert seen.witnessed is not None and seen.witnessed.generation == 3
    assert seen.needs_read and seen.retry().witnessed == seen.witnessed
    assert not seen.covers(observations.Seen(witnessed=attempt(4)))
    assert seen.covers(observations.Seen(witnessed=attempt(3)))
