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
        ([], fence(), "oom_killed", ""),
    ],
)
def test_card_reason_and_resume_label(
    found: list[ckpt.Summary], the_fence: records.Fence, reason: str, label: str
) -> None:
    """Spec: the card's reason names the failure and, when a verified checkpoint exists, how it
    would continue and from which record (`oom_killed; native resume from ckpt-7 at record
    412`); the control reads Resume native only for a native checkpoint and a held session.
    Without a resume to offer there is no label."""
    offer = deciding.offer(the_fence, found)
    assert deciding.card_reason(the_fence.reason, offer) == reason
    assert deciding.resume_label(offer) == label


# A checkpoint whose transcript holds no conversation record offers no continuity.


@pytest.mark.parametrize(
    "found",
    [
        pytest.param([checkpoint(native=False, watermark=0)], id="source-only-at-record-0"),
        pytest.param([checkpoint(watermark=0)], id="native-at-record-0"),
        pytest.param(
            [checkpoint("ckpt-8", native=False, watermark=0), checkpoint(watermark=None)],
            id="record-0-and-no-watermark",
        ),
    ],
)
def test_a_checkpoint_without_a_conversation_record_is_not_usable(
    found: list[ckpt.Summary],
) -> None:
    """A restore never reports more continuity than it delivered: a checkpoint whose transcript
    holds no record (watermark 0) is not a usable checkpoint for resume (refused with the spec
    message), offers nothing on the card, and never makes the automatic resume condition true."""
    assert deciding.usable(found) is None
    assert deciding.offer(fence(), found) is None
    with pytest.raises(errors.Refused) as caught:
        deciding.resume_plan(fence(), found)
    assert caught.value.message == deciding.NO_CHECKPOINT
    plan = deciding.decide(fence(), found, ON)
    assert (plan.action, plan.offer) == (A.WAIT, None)
    view = deciding.card_view("oom_killed", None, deciding.offer(fence(), found))
    assert view == deciding.CardView("oom_killed", "", False, "")


def test_resume_passes_over_newer_checkpoints_without_a_conversation_record() -> None:
    """Resume picks the newest complete, compatible checkpoint that holds at least one
    conversation record."""
    found = [checkpoint("ckpt-9", native=False, watermark=0), checkpoint("ckpt-7", watermark=412)]
    assert deciding.resume_plan(fence(), found) == directives.Directive(
        "ckpt-7", C.NATIVE, "sess-1", 412
    )
    assert deciding.decide(fence(), found, ON).action is A.RESUME


@pytest.mark.parametrize(
    ("watermark", "holds"), [(None, False), (0, False), (1, True), (412, True)]
)
def test_holds_conversation_counts_records(watermark: int | None, holds: bool) -> None:
    """The watermark is the number of conversation records archived (checkpoint schema)."""
    assert deciding.holds_conversation(watermark) is holds


# What a card offers.

NATIVE_OFFER = records.Offer("ckpt-7", C.NATIVE, 412)
CONTEXT_OFFER = records.Offer("ckpt-3", C.RECONSTRUCTED, 300)


def pending(
    offer: records.Offer | None = NATIVE_OFFER, key: str | None = "img:1"
) -> records.Decision:
    return records.Decision(
        execution_id=records.ExecutionId("example.eng-2.1"),
        state=records.DecisionState.RECOVERY_PENDING,
        offer=offer,
        controller_epoch=3,
        offer_key=key,
    )


def accepted(
    directive: directives.Directive, offer: records.Offer | None = NATIVE_OFFER
) -> records.Decision:
    return dataclasses.replace(
        pending(offer),
        state=records.DecisionState.ACCEPTED,
        choice=(records.Choice.FRESH if directive.recovery is C.FRESH else records.Choice.RESUME),
        directive=directive,
        replacement_execution_id=records.ExecutionId("example.eng-2.2"),
    )


@pytest.mark.parametrize(
    ("decision", "current", "view"),
    [
        pytest.param(
            pending(),
            NATIVE_OFFER,
            deciding.CardView(
                "oom_killed; native resume from ckpt-7 at record 412",
                "ckpt-7",
                True,
                "Resume native",
            ),
            id="pending-native",
        ),
        pytest.param(
            pending(CONTEXT_OFFER),
            CONTEXT_OFFER,
            deciding.CardView(
                "oom_killed; continuation from context from ckpt-3 at record 300",
                "ckpt-3",
                True,
                "Continue from context",
            ),
            id="pending-context",
        ),
        pytest.param(
            pending(),
            None,
            deciding.CardView("oom_killed", "", False, ""),
            id="pending-nothing-under-the-current-key",
        ),
        pytest.param(
            None,
            None,
            deciding.CardView("oom_killed", "", False, ""),
            id="no-decision-yet",
        ),
        pytest.param(
            pending(records.Offer("ckpt-1", C.RECONSTRUCTED, 0)),
            records.Offer("ckpt-1", C.RECONSTRUCTED, 0),
            deciding.CardView("oom_killed", "", False, ""),
            id="recorded-offer-at-record-0",
        ),
        pytest.param(
            accepted(directives.Directive("ckpt-7", C.NATIVE, "sess-1", 412)),
            NATIVE_OFFER,
            deciding.CardView(
                "oom_killed; native resume from ckpt-7 at record 412", "ckpt-7", False, ""
            ),
            id="accepted-native",
        ),
        pytest.param(
            accepted(directives.Directive("ckpt-7", C.RECONSTRUCTED, None, 412)),
            NATIVE_OFFER,
            deciding.CardView(
                "oom_killed; continuation from context from ckpt-7 at record 412",
                "ckpt-7",
                False,
                "",
            ),
            id="accepted-reconstructed",
        ),
        pytest.param(
            accepted(directives.FRESH),
            NATIVE_OFFER,
            deciding.CardView("oom_killed", "", False, ""),
            id="accepted-fresh-after-a-native-offer",
        ),
    ],
)
def test_card_view(
    decision: records.Decision | None, current: records.Offer | None, view: deciding.CardView
) -> None:
    """Spec ("Choosing resume or fresh"): a pending card offers what resume would pick, with
    its label and a reason naming that checkpoint; a card with no resume available carries no
    label, and its reason never names a checkpoint the card does not offer (once accepted, only
    the checkpoint the accepted directive restores from)."""
    assert deciding.card_view("oom_killed", decision, current) == view


@pytest.mark.parametrize(
    ("decision", "current"),
    [
        (pending(key="img:1"), True),
        (pending(key="img:0"), False),
        (pending(key=None), False),
        (None, False),
    ],
)
def test_an_offer_is_current_only_under_the_controllers_compatibility_key(
    decision: records.Decision | None, current: bool
) -> None:
    """Spec: checkpoints are offered only when they were captured under the same compatibility
    key as the controller's current worker image tag; an offer recorded under another key (or
    without one) is worked out again."""
    assert deciding.offer_is_current(decision, "img:1") is current


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
