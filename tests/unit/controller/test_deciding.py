"""The Decide step and the two choices, as pure functions (spec: "What happens when a Pod
fails" → Decide; "Choosing resume or fresh")."""

from __future__ import annotations

import dataclasses

import pytest

from services.common import directives, errors
from services.common.checkpoints import records as ckpt
from services.controller import deciding
from services.controller.state import records

C = directives.Continuity
A = deciding.Action


def fence(*, reason: str = "oom_killed", session: str | None = "sess-1") -> records.Fence:
    return records.Fence(
        execution_id=records.ExecutionId("example.eng-2.1"),
        swarm="example",
        generation=1,
        seat=records.SeatName("eng-2"),
        reason=reason,
        controller_epoch=3,
        native_session_id=session,
        archive_watermark=400,
        fenced_at="2026-12-02T15:00:00Z",
        task_id="t-eng-2",
        task_generation=1,
        releases=(),
    )


def checkpoint(
    cid: str = "ckpt-7",
    *,
    native: bool = True,
    watermark: int | None = 412,
    session: str = "sess-1",
) -> ckpt.Summary:
    return ckpt.Summary(
        cid,
        "native" if native else "context_only",
        "img:1",
        session if native else None,
        watermark,
        7,
        "2026-12-02T15:00:00Z",
        1,
        1,
        "app",
    )


ON = deciding.Switches(automation=True, paused=False, legacy_spawn=False)


def test_all_four_conditions_resume_natively_without_asking() -> None:
    """Spec: resumes natively without asking when automation is on and not paused, the reason
    is not image_pull, the attempt held a native session id and the newest complete compatible
    checkpoint is a native one."""
    plan = deciding.decide(fence(), [checkpoint()], ON)
    assert plan.action is A.RESUME
    assert plan.source is records.DecisionSource.AUTOMATIC
    assert plan.directive == directives.Directive("ckpt-7", C.NATIVE, "sess-1", 412)


@pytest.mark.parametrize(
    ("why", "the_fence", "found", "switches"),
    [
        ("automation off", fence(), [checkpoint()], dataclasses.replace(ON, automation=False)),
        ("paused", fence(), [checkpoint()], dataclasses.replace(ON, paused=True)),
        ("image_pull", fence(reason="image_pull"), [checkpoint()], ON),
        ("no native session held", fence(session=None), [checkpoint()], ON),
        (
            "newest checkpoint context only",
            fence(),
            [checkpoint("ckpt-8", native=False), checkpoint("ckpt-7")],
            ON,
        ),
        ("no checkpoint at all", fence(), [], ON),
    ],
)
def test_each_condition_failing_on_its_own_waits(
    why: str, the_fence: records.Fence, found: list[ckpt.Summary], switches: deciding.Switches
) -> None:
    """Spec: otherwise the seat's attempt moves to awaiting-decision (one condition at a time)."""
    plan = deciding.decide(the_fence, found, switches)
    assert plan.action is A.WAIT, why
    assert plan.directive is None


@pytest.mark.parametrize("reason", ["oom_killed", "evicted", "node_lost", "application_exit"])
def test_every_reason_but_image_pull_can_resume(reason: str) -> None:
    """Spec: the reason is not image_pull (the other four reasons resume)."""
    assert deciding.decide(fence(reason=reason), [checkpoint()], ON).action is A.RESUME


@pytest.mark.parametrize(
    ("switches", "action"),
    [
        (dataclasses.replace(ON, legacy_spawn=True), A.FRESH),
        (dataclasses.replace(ON, legacy_spawn=True, paused=True), A.WAIT),
        (dataclasses.replace(ON, legacy_spawn=True, automation=False), A.WAIT),
    ],
)
def test_legacy_spawn_is_replaced_fresh_only_while_automation_runs(
    switches: deciding.Switches, action: deciding.Action
) -> None:
    """Spec (Limitations): a superseded legacy spawn is replaced fresh without a choice while
    automation is on and not paused; with automation off or paused it waits like any other."""
    plan = deciding.decide(fence(), [checkpoint()], switches)
    assert plan.action is action
    if action is A.FRESH:
        assert plan.directive == directives.FRESH
        assert plan.source is records.DecisionSource.LEGACY_SPAWN


def test_resume_picks_native_when_checkpoint_native_and_session_held() -> None:
    """Spec: native continuity is chosen when that checkpoint is native and the attempt held a
    session id; the directive names the session the fenced attempt held."""
    d = deciding.resume_plan(fence(), [checkpoint(session="other")])
    assert d == directives.Directive("ckpt-7", C.NATIVE, "sess-1", 412)


@pytest.mark.parametrize(
    ("the_fence", "found"),
    [(fence(), [checkpoint(native=False)]), (fence(session=None), [checkpoint()])],
)
def test_resume_otherwise_reconstructs_from_context(
    the_fence: records.Fence, found: list[ckpt.Summary]
) -> None:
    """Spec: otherwise the replacement is reconstructed from context (no session named)."""
    assert deciding.resume_plan(the_fence, found) == directives.Directive(
        "ckpt-7", C.RECONSTRUCTED, None, 412
    )


def test_resume_without_usable_checkpoint_is_refused_with_the_spec_message() -> None:
    """Spec: with no usable checkpoint the request is refused with `no complete compatible
    checkpoint to resume from`."""
    for found in ([], [checkpoint(watermark=None)]):
        with pytest.raises(errors.Refused) as caught:
            deciding.resume_plan(fence(), found)
        assert caught.value.message == "no complete compatible checkpoint to resume from"


def test_resume_uses_the_newest_checkpoint() -> None:
    """Spec: resume picks the newest complete, compatible checkpoint (listed newest first)."""
    d = deciding.resume_plan(fence(), [checkpoint("ckpt-9", watermark=500), checkpoint()])
    assert (d.checkpoint_id, d.watermark) == ("ckpt-9", 500)


def test_fresh_names_no_checkpoint() -> None:
    """Spec: fresh admits a replacement with no checkpoint."""
    assert deciding.fresh_plan() == directives.Directive(None, C.FRESH, None, None)
    assert directives.problem(deciding.fresh_plan()) is None


@pytest.mark.parametrize(
    ("found", "the_fence", "reason", "label"),
    [
        (
            [checkpoint()],
            fence(),
            "oom_killed; native resume from ckpt-7 at record 412",
            "Resume native",
        ),
        (
            [checkpoint(native=False)],
            fence(),
            "oom_killed; continuation from context from ckpt-7 at record 412",
            "Continue from context",
        ),
        (
            [checkpoint()],
            fence(session=None),
            "oom_killed; continuation from context from ckpt-7 at record 412",
            "Continue from context",
        ),
        ([], fence(), "oom_killed", "Continue from context"),
    ],
)
def test_card_reason_and_resume_label(
    found: list[ckpt.Summary], the_fence: records.Fence, reason: str, label: str
) -> None:
    """Spec: the card's reason names the failure and, when a verified checkpoint exists, how it
    would continue and from which record (`oom_killed; native resume from ckpt-7 at record
    412`); the control reads Resume native only for a native checkpoint and a held session."""
    offer = deciding.offer(the_fence, found)
    assert deciding.card_reason(the_fence.reason, offer) == reason
    assert deciding.resume_label(offer) == label


def test_rules_table_reads_in_spec_order() -> None:
    """The decision table is data: the rule names are the spec's conditions."""
    assert [name for name, _, _ in deciding.RULES] == [
        "automation off",
        "paused",
        "legacy spawn",
        "image pull",
        "no native session",
        "newest checkpoint native",
    ]
