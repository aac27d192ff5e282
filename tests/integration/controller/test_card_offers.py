"""What a handoff card offers, through the real recovery pass and Redis: the offer follows the
controller's current worker image, a checkpoint without a conversation record offers nothing,
and a card never names a checkpoint it does not offer (spec: "Choosing resume or fresh",
"Configuration": checkpoints are offered only when they were captured under the same
compatibility key as the controller's current worker image tag; "Troubleshooting": the card
offers only fresh)."""

from __future__ import annotations

import json
import logging

import pytest
import redis.asyncio as aioredis

from services.common import directives, errors
from services.controller import deciding
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second

C = directives.Continuity
RESUME, FRESH = records.Choice.RESUME, records.Choice.FRESH
IMAGE_B = "registry.local/agent-worker:1.5.0"
NATIVE_CARD = (
    "ckpt-7",
    True,
    "Resume native",
    "oom_killed; native resume from ckpt-7 at record 412",
)
ONLY_FRESH = ("", False, "", "oom_killed")
E1 = first("eng-1")


async def waiting(
    redis_client: aioredis.Redis,
    *checkpoints: h.ckpt_records.Summary,
    session: str | None = "sess-1",
    automation: bool = False,
) -> h.Harness:
    """eng-1's first attempt held `session`, its `checkpoints` were captured, it was OOM-killed,
    and the pass decided (with automation off: to wait)."""
    hx = await h.start(redis_client, automation=automation)
    if session is not None:
        await hx.recovery.report_capture(
            await hx.worker(E1), native_session_id=session, archive_watermark=400
        )
    hx.checkpoints.by_execution[E1] = list(checkpoints)
    hx.runtime.fail(E1)
    await hx.recovery.reconcile()
    return hx


async def card_of(hx: h.Harness) -> tuple[str, bool, str, str]:
    """eng-1's card as (checkpoint, resume_available, resume_label, reason)."""
    [card] = [c for c in (await hx.recovery.status()).handoffs if c.seat == "eng-1"]
    return card.checkpoint, card.resume_available, card.resume_label, card.reason


async def decision_of(hx: h.Harness) -> records.Decision:
    d = await reading.decision(hx.client, SWARM, E1)
    assert d is not None
    return d


async def assert_still_waiting(hx: h.Harness) -> None:
    assert (await decision_of(hx)).state is records.DecisionState.RECOVERY_PENDING
    seat = await reading.seat(hx.client, SWARM, "eng-1")
    assert seat is not None and seat.state is records.SeatState.AWAITING_DECISION
    assert seat.current_execution_id == E1
    assert second("eng-1") not in hx.runtime.specs


async def reoffers(hx: h.Harness) -> list[dict[str, object]]:
    return [
        dict(e.detail)
        for e in await hx.recovery.events()
        if e.kind == "recovery" and e.detail.get("action") == "reoffer"
    ]


# The offer follows the controller's current worker image.


async def test_a_waiting_seat_is_offered_only_fresh_once_the_worker_image_changed(
    redis_client: aioredis.Redis,
) -> None:
    """Spec (Troubleshooting): the card offers only fresh when no complete checkpoint compatible
    with the current worker image exists, for example when the worker image tag changed since
    the checkpoint was captured. After a restart on another image the card no longer offers the
    old checkpoint, resume is refused with `no complete compatible checkpoint to resume from`,
    the seat keeps waiting and fresh still succeeds."""
    hx = await waiting(redis_client, h.summary("ckpt-7"))
    assert await card_of(hx) == NATIVE_CARD
    assert (await decision_of(hx)).offer_key == h.IMAGE

    await hx.restart(worker_image=IMAGE_B)
    # Read before any pass of the new controller: the card works the offer out itself.
    assert await card_of(hx) == ONLY_FRESH
    with pytest.raises(errors.Refused) as caught:
        await hx.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    assert caught.value.message == deciding.NO_CHECKPOINT
    await assert_still_waiting(hx)

    # The pass records the offer again under the new key, once, and decides nothing.
    for _ in range(3):
        report = await hx.recovery.reconcile()
        assert report.accepted == [] and report.launched == []
    d = await decision_of(hx)
    assert (d.state, d.offer, d.offer_key) == (
        records.DecisionState.RECOVERY_PENDING,
        None,
        IMAGE_B,
    )
    [event] = await reoffers(hx)
    assert event["previous_offer"] == {
        "checkpoint_id": "ckpt-7",
        "continuity": "native",
        "watermark": 412,
    }
    assert "offer" not in event and event["decision"] == records.RECOVERY_PENDING
    assert await card_of(hx) == ONLY_FRESH
    await assert_still_waiting(hx)

    r = await hx.recovery.restore_decision("eng-1", FRESH, None, records.Operator())
    assert r.decision.directive == directives.FRESH
    [card] = (await hx.recovery.status()).handoffs
    assert (card.decision, card.replacement_execution_id) == ("accepted", second("eng-1"))
    assert (card.checkpoint, card.resume_available, card.resume_label, card.reason) == ONLY_FRESH


async def test_back_on_the_checkpoints_image_the_checkpoint_is_offered_again(
    redis_client: aioredis.Redis,
) -> None:
    """The offer is worked out against the image the controller runs with now, both ways: back
    on the image the checkpoint was captured under, the card offers it again and resume picks
    it."""
    hx = await waiting(redis_client, h.summary("ckpt-7"))
    await hx.restart(worker_image=IMAGE_B)
    await hx.recovery.reconcile()
    assert await card_of(hx) == ONLY_FRESH

    await hx.restart(worker_image=h.IMAGE)
    assert await card_of(hx) == NATIVE_CARD  # before the pass
    await hx.recovery.reconcile()
    assert await card_of(hx) == NATIVE_CARD
    d = await decision_of(hx)
    assert (d.offer, d.offer_key) == (records.Offer("ckpt-7", C.NATIVE, 412), h.IMAGE)
    assert len(await reoffers(hx)) == 2
    r = await hx.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    assert r.decision.directive == directives.Directive("ckpt-7", C.NATIVE, "sess-1", 412)


async def test_an_offer_recorded_without_its_compatibility_key_is_worked_out_again(
    redis_client: aioredis.Redis,
) -> None:
    """A decision recorded before offers kept their key (here: offering a source-only checkpoint
    at record 0, as older controllers did) is not trusted: the card works the offer out under
    the current key, and the pass records it with its key."""
    source_only = h.summary("ckpt-1", native=False, watermark=0, sequence=1)
    hx = await waiting(redis_client, source_only, session=None)
    stale = {"checkpoint_id": "ckpt-1", "continuity": "reconstructed", "watermark": 0}
    decision_key = keys.decision(SWARM, E1)
    await redis_client.hset(decision_key, "offer", json.dumps(stale))
    await redis_client.hdel(decision_key, "offer_key")
    assert (await decision_of(hx)).offer_key is None

    assert await card_of(hx) == ONLY_FRESH
    await hx.recovery.reconcile()
    d = await decision_of(hx)
    assert (d.offer, d.offer_key) == (None, h.IMAGE)
    assert await card_of(hx) == ONLY_FRESH


async def test_a_card_read_while_the_store_cannot_be_listed_offers_only_fresh(
    redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A status read never fails on the checkpoint store: when an offer must be worked out again
    and the store cannot be listed, the card offers nothing it could not back (only fresh)."""
    hx = await waiting(redis_client, h.summary("ckpt-7"))
    await hx.restart(worker_image=IMAGE_B)

    async def unavailable(scope: records.AttemptScope, key: str):  # type: ignore[no-untyped-def]
        raise OSError("store unavailable")

    hx.checkpoints.newest_compatible = unavailable  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="services.controller.recovery"):
        assert await card_of(hx) == ONLY_FRESH
    assert any(r.getMessage() == "card_offer_unavailable" for r in caplog.records)


async def test_a_pass_that_cannot_list_the_store_records_the_offer_on_a_later_pass(
    redis_client: aioredis.Redis,
) -> None:
    """The pass's re-offer does not hold up the seat's other steps when the store cannot be
    listed: nothing is recorded, and the next pass records the offer under the new key."""
    hx = await waiting(redis_client, h.summary("ckpt-7"))
    await hx.restart(worker_image=IMAGE_B)
    listed = hx.checkpoints.newest_compatible

    async def unavailable(scope: records.AttemptScope, key: str):  # type: ignore[no-untyped-def]
        raise OSError("store unavailable")

    hx.checkpoints.newest_compatible = unavailable  # type: ignore[method-assign]
    report = await hx.recovery.reconcile()
    assert report.errors == []
    assert (await decision_of(hx)).offer_key == h.IMAGE
    assert await reoffers(hx) == []
    hx.checkpoints.newest_compatible = listed  # type: ignore[method-assign]
    await hx.recovery.reconcile()
    d = await decision_of(hx)
    assert (d.offer, d.offer_key) == (None, IMAGE_B)
    assert len(await reoffers(hx)) == 1


async def test_a_fresh_decision_after_a_native_offer_names_no_checkpoint(
    redis_client: aioredis.Redis,
) -> None:
    """A card's reason never names a checkpoint the card does not offer: once fresh was accepted
    the card names neither the checkpoint once offered nor a resume label."""
    hx = await waiting(redis_client, h.summary("ckpt-7"))
    await hx.recovery.restore_decision("eng-1", FRESH, None, records.Operator())
    [card] = (await hx.recovery.status()).handoffs
    assert card.decision == "accepted"
    assert (card.checkpoint, card.resume_available, card.resume_label, card.reason) == ONLY_FRESH


# A checkpoint whose transcript holds no conversation record offers no continuity.


@pytest.mark.parametrize(
    ("checkpoint", "session"),
    [
        pytest.param(
            h.summary("ckpt-1", native=False, watermark=0), None, id="source-only-no-session"
        ),
        pytest.param(h.summary("ckpt-1", native=False, watermark=0), "sess-1", id="source-only"),
        pytest.param(h.summary("ckpt-1", watermark=0), "sess-1", id="native-at-record-0"),
    ],
)
async def test_a_checkpoint_at_record_0_is_not_offered_resumed_or_auto_resumed(
    redis_client: aioredis.Redis, checkpoint: h.ckpt_records.Summary, session: str | None
) -> None:
    """A restore never reports more continuity than it delivered: a checkpoint whose transcript
    holds no record is not usable for resume (refused with `no complete compatible checkpoint to
    resume from`, the seat keeps waiting), never makes the automatic resume condition true (here
    automation is on), and the card offers only fresh; fresh still succeeds."""
    hx = await waiting(redis_client, checkpoint, session=session, automation=True)
    await assert_still_waiting(hx)
    assert (await decision_of(hx)).offer is None
    assert await card_of(hx) == ONLY_FRESH
    with pytest.raises(errors.Refused) as caught:
        await hx.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    assert caught.value.message == deciding.NO_CHECKPOINT
    await hx.recovery.reconcile()
    await assert_still_waiting(hx)
    r = await hx.recovery.restore_decision("eng-1", FRESH, None, records.Operator())
    assert r.decision.directive == directives.FRESH


async def test_resume_passes_over_a_newer_checkpoint_at_record_0(
    redis_client: aioredis.Redis,
) -> None:
    """Resume picks the newest complete, compatible checkpoint that holds at least one
    conversation record."""
    hx = await waiting(
        redis_client,
        h.summary("ckpt-8", native=False, watermark=0, sequence=8),
        h.summary("ckpt-7", native=False, watermark=300),
    )
    assert await card_of(hx) == (
        "ckpt-7",
        True,
        "Continue from context",
        "oom_killed; continuation from context from ckpt-7 at record 300",
    )
    r = await hx.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    assert r.decision.directive == directives.Directive("ckpt-7", C.RECONSTRUCTED, None, 300)
