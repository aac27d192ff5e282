"""The handoff card tells the truth, over the real Recovery gRPC server, the HTTP API, real Redis,
the Kubernetes emulator and checkpoints in a local folder: after a restart on another worker
image a waiting seat is offered only fresh, a checkpoint without a conversation record is never
offered, resumed or resumed automatically (spec: "Choosing resume or fresh", "Configuration",
"Troubleshooting": the card offers only fresh)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.controller.api import http_api
from services.controller.state import reading
from tests.integration.api.test_decisions import still_waiting, wait_for_decision
from tests.support import controller_server as cs

E2, R2 = "example.eng-2.1", "example.eng-2.2"
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"
IMAGE_B = "registry.local/agent-worker:1.5.0"
NO_CHECKPOINT = "no complete compatible checkpoint to resume from"
RESUME, FRESH = types_pb2.CHOICE_RESUME, types_pb2.CHOICE_FRESH
ONLY_FRESH = ("", False, "", "oom_killed")


def choose(choice: types_pb2.Choice) -> pb.RestoreDecisionRequest:
    return pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=choice)


async def waiting(ctl: cs.Controller, *, automation: bool = False, **checkpoint: Any) -> None:
    """eng-2's first attempt reported session SESSION, one checkpoint (`checkpoint`: the options
    of `cs.put_checkpoint`) was stored, and it was OOM-killed; the pass decided to wait."""
    await ctl.apply(cs.document(automation=automation))
    await cs.wait_for_pod(ctl, "example.eng-1.1")
    await cs.wait_for_pod(ctl, E2)
    await ctl.stub.ReportCapture(
        pb.ReportCaptureRequest(native_session_id=SESSION, archive_watermark=400),
        metadata=cs.md(cs.worker_credential(ctl, E2)),
    )
    await cs.put_checkpoint(ctl.checkpoint_root, "eng-2", **checkpoint)
    ctl.fail(E2, cs.terminated("OOMKilled", 137))
    await wait_for_decision(ctl)


async def grpc_card(ctl: cs.Controller) -> tuple[str, bool, str, str]:
    card = await cs.card(ctl, "eng-2")
    assert card is not None and card.decision == "recovery_pending", card
    return card.checkpoint, card.resume_available, card.resume_label, card.reason


@contextlib.asynccontextmanager
async def http_status(ctl: cs.Controller) -> AsyncIterator[Any]:
    """A function reading eng-2's card from `GET /v1/swarms/example/status` (the JSON that
    `status --json` and the ledger page read), served by `ctl`'s Hub."""
    runner, port = await http_api.start_http(ctl.hub, "127.0.0.1:0")
    try:
        async with aiohttp.ClientSession() as session:

            async def read() -> dict[str, Any]:
                async with session.get(
                    f"http://127.0.0.1:{port}/v1/swarms/example/status",
                    headers={"Authorization": f"Bearer {cs.OPERATOR_TOKEN}"},
                ) as response:
                    assert response.status == 200
                    body = await response.json()
                return dict(next(c for c in body["handoffs"] if c["seat"] == "eng-2"))

            yield read
    finally:
        await runner.cleanup()


async def test_after_a_restart_on_another_worker_image_the_card_offers_only_fresh(
    controllers: cs.Controllers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec: checkpoints are offered only when they were captured under the same compatibility
    key as the controller's current worker image tag; the card offers only fresh when the worker
    image tag changed since the checkpoint was captured. A seat waiting with a native checkpoint
    captured under image A, after the controller restarted with AGENTIHOOKS_WORKER_IMAGE=B:
    GetSwarmStatus and the HTTP status show no resume and no label, the reason names no
    checkpoint, resume is refused with `no complete compatible checkpoint to resume from` and
    the seat keeps waiting; fresh still works."""
    first = await controllers.start()
    await waiting(first)
    assert await grpc_card(first) == (
        "ckpt-7",
        True,
        "Resume native",
        "oom_killed; native resume from ckpt-7 at record 412",
    )

    monkeypatch.setattr(cs, "IMAGE", IMAGE_B)  # the next controller's worker image
    second = await controllers.restart(first)
    assert second.hub.recoveries["example"].ctx.worker_image == IMAGE_B
    async with http_status(second) as http_card:
        for _ in range(2):  # as read first, and after a pass of the new controller
            assert await grpc_card(second) == ONLY_FRESH
            card = await http_card()
            assert (card["checkpoint"], card["resume_available"], card["resume_label"]) == (
                None,
                False,
                "",
            )
            assert (card["reason"], card["decision"]) == ("oom_killed", "recovery_pending")
            await second.reconcile()
        decision = await reading.decision(second.redis, "example", E2)
        assert decision is not None and (decision.offer, decision.offer_key) == (None, IMAGE_B)

        error = await cs.refusal(second.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR))
        assert (error.code(), error.details()) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            NO_CHECKPOINT,
        )
        await still_waiting(second)

        answer = await second.stub.RestoreDecision(choose(FRESH), metadata=cs.OPERATOR)
        assert answer.decision.replacement_execution_id == R2
        assert answer.decision.directive == types_pb2.RestoreDirective(
            recovery=types_pb2.CONTINUITY_FRESH
        )
        await cs.wait_for_pod(second, R2)
        card = await http_card()
        assert (card["decision"], card["checkpoint"], card["resume_label"], card["reason"]) == (
            "accepted",
            None,
            "",
            "oom_killed",
        )


@pytest.mark.parametrize(
    "checkpoint",
    [
        pytest.param({"session": None, "watermark": 0}, id="source-only"),
        pytest.param({"watermark": 0}, id="native-at-record-0"),
    ],
)
async def test_a_checkpoint_without_a_conversation_record_is_never_offered_or_resumed(
    controller: cs.Controller, checkpoint: dict[str, Any]
) -> None:
    """A restore never reports more continuity than it delivered. An attempt whose only
    checkpoint holds no conversation record (transcript watermark 0) is not resumed
    automatically although automation is on and it held a session; its card offers only fresh;
    resume is refused with `no complete compatible checkpoint to resume from` and the seat keeps
    waiting; fresh still works."""
    await waiting(controller, automation=True, **checkpoint)
    await still_waiting(controller)
    assert await grpc_card(controller) == ONLY_FRESH
    async with http_status(controller) as http_card:
        card = await http_card()
        assert (card["checkpoint"], card["resume_available"], card["resume_label"]) == (
            None,
            False,
            "",
        )
        assert card["reason"] == "oom_killed"
    error = await cs.refusal(controller.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR))
    assert (error.code(), error.details()) == (grpc.StatusCode.FAILED_PRECONDITION, NO_CHECKPOINT)
    await still_waiting(controller)
    answer = await controller.stub.RestoreDecision(choose(FRESH), metadata=cs.OPERATOR)
    assert answer.decision.replacement_execution_id == R2
    await cs.wait_for_pod(controller, R2)
