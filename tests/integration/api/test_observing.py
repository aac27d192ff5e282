"""Observing recovery through the real controller: the WatchRecovery event stream, launch
records served only to the attempt's own credential, and the real `grpcurl` against the
server's reflection (spec: "What happens when a Pod fails" (telemetry), "How the replacement
restores", "Observing recovery"; DESIGN.md section 2)."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from agentihooks.swarm.v2 import checkpoint_store_pb2 as store_pb
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as store_grpc
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from tests.support import binaries, ports
from tests.support import controller_server as cs

E1, E2, R2 = "example.eng-1.1", "example.eng-2.1", "example.eng-2.2"
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"


async def launched(ctl: cs.Controller, doc: str | None = None) -> None:
    await ctl.apply(doc)
    await cs.wait_for_pod(ctl, E1)
    await cs.wait_for_pod(ctl, E2)


def detail(event: pb.RecoveryEvent) -> dict[str, object]:
    parsed: dict[str, object] = json.loads(event.detail_json)
    return parsed


def _order(event: pb.RecoveryEvent) -> tuple[int, int]:
    """A Redis stream id (`MILLISECONDS-SEQUENCE`) as something that sorts."""
    ms, seq = event.id.split("-")
    return int(ms), int(seq)


async def test_watch_streams_fence_and_recovery_events_with_generations_and_epoch(
    controller: cs.Controller, caplog: pytest.LogCaptureFixture
) -> None:
    """Spec: every fence and decision is recorded through the controller's telemetry as a fence
    or recovery event with the expected and observed generation and the controller epoch
    (and, issue 3, a JSON log line each). WatchRecovery streams them, and resumes after an id."""
    caplog.set_level(logging.INFO, logger="services.controller.telemetry")
    await launched(controller, cs.document(automation=False))
    await controller.stub.ReportCapture(
        pb.ReportCaptureRequest(native_session_id=SESSION, archive_watermark=400),
        metadata=cs.md(cs.worker_credential(controller, E2)),
    )
    controller.fail(E2, cs.terminated("OOMKilled", 137))
    seen = await cs.watch(controller, lambda events: len(events) >= 2)
    await controller.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_FRESH),
        metadata=cs.OPERATOR,
    )
    # A master of the swarm may watch too, resuming after the last event it saw.
    master = cs.md(cs.MASTER_SECRET)
    more = await cs.watch(
        controller, lambda events: bool(events), after=seen[-1].id, metadata=master
    )
    events = seen[:2] + more[:1]
    epoch = (await controller.status()).controller_epoch
    assert epoch >= 1

    fence, pending, accepted = events
    assert (fence.kind, fence.swarm, fence.seat, fence.execution_id) == (
        "fence",
        "example",
        "eng-2",
        E2,
    )
    assert (fence.expected_generation, fence.observed_generation) == (1, 1)
    assert detail(fence) == {
        "reason": "oom_killed",
        "native_session_id": SESSION,
        "archive_watermark": 400,
        "lost_tail": {"after_watermark": 400, "length": "unknown"},
    }
    assert (pending.kind, pending.execution_id) == ("recovery", E2)
    assert detail(pending)["decision"] == "recovery_pending"
    assert (accepted.kind, accepted.execution_id) == ("recovery", E2)
    assert {k: detail(accepted)[k] for k in ("decision", "choice", "source")} == {
        "decision": "accepted",
        "choice": "fresh",
        "source": "operator",
    }
    assert detail(accepted)["replacement_execution_id"] == R2
    for event in events:
        assert event.controller_epoch == epoch and event.at
        assert (event.expected_generation, event.observed_generation) == (1, 1)
    assert _order(fence) < _order(pending) < _order(accepted)

    logged = [r for r in caplog.records if r.name == "services.controller.telemetry"]
    fields = [getattr(r, "fields", {}) for r in logged]
    assert [(f["event"], f["execution_id"]) for f in fields] == [
        ("fence", E2),
        ("recovery", E2),
        ("recovery", E2),
    ]
    assert all(f["controller_epoch"] == epoch and "expected_generation" in f for f in fields)


async def test_watch_follows_new_events_live(controller: cs.Controller) -> None:
    """WatchRecovery is a server stream of events as they are written: a watch opened after
    the last event it saw receives a fence that happens while it is open, and nothing older."""
    await launched(controller)
    controller.fail(E2, cs.terminated("Error", 1))
    seen = await cs.watch(controller, lambda events: any(e.kind == "recovery" for e in events))
    call = controller.stub.WatchRecovery(
        pb.WatchRecoveryRequest(swarm="example", after=seen[-1].id), metadata=cs.OPERATOR
    )
    try:
        first = asyncio.ensure_future(anext(aiter(call)))
        done, _ = await asyncio.wait([first], timeout=0.2)
        assert not done, "nothing new happened, so nothing may arrive"
        controller.fail(E1, cs.terminated("OOMKilled", 137))
        event = await asyncio.wait_for(first, 120)
    finally:
        call.cancel()
    assert (event.kind, event.execution_id) == ("fence", E1)
    assert detail(event)["reason"] == "oom_killed"


async def test_only_operators_and_masters_of_the_swarm_may_watch(
    controller: cs.Controller,
) -> None:
    """DESIGN.md section 2: WatchRecovery is the operator's and the masters'; a worker
    credential is refused with forbidden_scope, no credential is unauthenticated."""
    await launched(controller)
    worker = cs.md(cs.worker_credential(controller, E1))
    for metadata, code in ((worker, grpc.StatusCode.PERMISSION_DENIED), ((), None)):
        call = controller.stub.WatchRecovery(
            pb.WatchRecoveryRequest(swarm="example", after="0-0"), metadata=metadata
        )
        error = await cs.refusal(anext(aiter(call)))
        assert error.code() == (code or grpc.StatusCode.UNAUTHENTICATED)


async def test_launch_record_returns_the_directive_and_grants_to_the_attempts_own_credential(
    controller: cs.Controller, store: store_grpc.CheckpointStoreStub
) -> None:
    """Spec: the replacement's launch record carries a restore directive (checkpoint_id,
    recovery, session_id, watermark); DESIGN.md: GetLaunchRecord answers the attempt's own
    worker credential only, with a read grant for the checkpoint the directive names and a
    write grant for its own checkpoints."""
    await launched(controller, cs.document(automation=False))
    first = await controller.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(controller, E2))
    )
    assert first.scope == types_pb2.AttemptScope(
        swarm="example",
        seat="eng-2",
        task_id="t-eng-2",
        task_generation=1,
        execution_id=E2,
        execution_generation=1,
    )
    assert first.directive == types_pb2.RestoreDirective(recovery=types_pb2.CONTINUITY_FRESH)
    assert first.capture_grant and not first.restore_grant
    assert (first.registration.worker_image, first.registration.harness) == (
        cs.IMAGE,
        "claude_code",
    )
    assert [(p.name, p.repository) for p in first.registration.projects] == [
        ("app", "https://git.example/app.git")
    ]
    assert list(first.command) == ["claude", "--print"]
    # The document sets no continuation prompt: the restorer's default applies.
    assert first.continuation_prompt == ""
    # Each attempt's credential gets its own record, never another's.
    other = await controller.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(controller, E1))
    )
    assert other.scope.execution_id == E1 and other.capture_grant != first.capture_grant

    await controller.stub.ReportCapture(
        pb.ReportCaptureRequest(native_session_id=SESSION, archive_watermark=400),
        metadata=cs.md(cs.worker_credential(controller, E2)),
    )
    await cs.put_checkpoint(controller.checkpoint_root, "eng-2")
    controller.fail(E2, cs.terminated("OOMKilled", 137))
    await ports.eventually(lambda: _decided(controller), timeout=10)
    await controller.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_RESUME),
        metadata=cs.OPERATOR,
    )
    await cs.wait_for_pod(controller, R2)
    own = cs.md(cs.worker_credential(controller, R2))
    record = await controller.stub.GetLaunchRecord(pb.GetLaunchRecordRequest(), metadata=own)
    assert record.directive == types_pb2.RestoreDirective(
        checkpoint_id="ckpt-7",
        recovery=types_pb2.CONTINUITY_NATIVE,
        session_id=SESSION,
        watermark=412,
    )
    assert (record.scope.execution_id, record.scope.execution_generation) == (R2, 2)
    assert record.restores_from_generation == 1
    # The restore grant reads the fenced attempt's checkpoint through a real store, and cannot
    # write; the capture grant is scoped to the replacement's own generation, so the fenced
    # attempt's checkpoint is not its to verify.
    restore, capture = cs.md(record.restore_grant), cs.md(record.capture_grant)
    verdict = await store.Verify(store_pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=restore)
    assert verdict.ok, verdict.reason
    verdict = await store.Verify(store_pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=capture)
    assert (verdict.ok, verdict.reason) == (False, "identity_mismatch")
    error = await cs.refusal(store.PutObject(_put(b"restored\n"), metadata=restore))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED

    refused = {
        "operator": cs.OPERATOR,
        "forged (same claims, another id)": cs.md(controller.worker_token(R2, 2, "eng-2")),
    }
    for who, metadata in refused.items():
        error = await cs.refusal(
            controller.stub.GetLaunchRecord(pb.GetLaunchRecordRequest(), metadata=metadata)
        )
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, who
    for who, metadata in {"no credential": (), "garbage": cs.md("eyJ.not.a-token")}.items():
        error = await cs.refusal(
            controller.stub.GetLaunchRecord(pb.GetLaunchRecordRequest(), metadata=metadata)
        )
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, who
    master = await cs.refusal(
        controller.stub.GetLaunchRecord(
            pb.GetLaunchRecordRequest(), metadata=cs.md(cs.MASTER_SECRET)
        )
    )
    assert master.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


async def test_launch_record_carries_the_swarms_continuation_prompt(
    controller: cs.Controller,
) -> None:
    """The swarm document's continuation prompt reaches every attempt's launch record; an empty
    or too long one is refused as malformed_document."""
    prompt = "The conversation was restored after a failure.\nContinue your task."
    doc = json.loads(cs.document())
    for bad in ("", "x" * 8193):
        error = await cs.refusal(controller.apply(json.dumps({**doc, "continuation_prompt": bad})))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert cs.reason_of(error) == "malformed_document"
        assert "continuation_prompt" in (error.details() or "")
    await launched(controller, json.dumps({**doc, "continuation_prompt": prompt}))
    for execution in (E1, E2):
        record = await controller.stub.GetLaunchRecord(
            pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(controller, execution))
        )
        assert record.continuation_prompt == prompt


async def _put(data: bytes) -> AsyncIterator[store_pb.PutObjectChunk]:
    header = store_pb.PutObjectHeader(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    yield store_pb.PutObjectChunk(header=header)
    yield store_pb.PutObjectChunk(data=data)


async def _decided(ctl: cs.Controller) -> None:
    card = await cs.card(ctl, "eng-2")
    assert card is not None and card.checkpoint == "ckpt-7", card


async def _grpcurl(*args: str) -> tuple[int, str, str]:
    exe = binaries.require("grpcurl")
    # The server runs on this event loop: the binary must not block it.
    proc = await asyncio.create_subprocess_exec(
        exe, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_grpcurl_lists_the_service_by_reflection_and_reads_the_status(
    controller: cs.Controller,
) -> None:
    """DESIGN.md section 2: every server serves server reflection, so `grpcurl -plaintext …
    list` works with no proto files; credentials travel as `authorization: Bearer …`."""
    await launched(controller)
    code, out, err = await _grpcurl("-plaintext", controller.addr, "list")
    assert code == 0, err
    services = out.split()
    assert "agentihooks.swarm.v2.Recovery" in services
    assert "grpc.health.v1.Health" in services
    code, out, err = await _grpcurl(
        "-plaintext", controller.addr, "list", "agentihooks.swarm.v2.Recovery"
    )
    assert code == 0 and "agentihooks.swarm.v2.Recovery.GetSwarmStatus" in out.split(), err

    code, out, err = await _grpcurl(
        "-plaintext",
        "-H",
        f"authorization: Bearer {cs.OPERATOR_TOKEN}",
        "-d",
        '{"swarm": "example"}',
        controller.addr,
        "agentihooks.swarm.v2.Recovery/GetSwarmStatus",
    )
    assert code == 0, err
    status = json.loads(out)
    assert status["swarm"] == "example" and status["runtime"] == "kubernetes"
    # grpcurl prints the proto's own field names.
    assert sorted(t["task_id"] for t in status["tasks"]) == ["t-eng-1", "t-eng-2"]
    assert status["restore_outcomes_by_type"] == {"fresh": "0", "native": "0", "reconstructed": "0"}
    assert cs.OPERATOR_TOKEN not in out

    code, out, err = await _grpcurl(
        "-plaintext",
        "-d",
        '{"swarm": "example"}',
        controller.addr,
        "agentihooks.swarm.v2.Recovery/GetSwarmStatus",
    )
    assert code != 0 and "Unauthenticated" in err


async def test_an_apply_logs_once_and_each_launch_once(
    controller: cs.Controller, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator reading the log sees one `swarm_applied` line per ApplySwarm and one
    `launched` line per attempt, however many passes (or the watch) looked at it meanwhile: a
    line says what this call recorded."""
    caplog.set_level(logging.INFO, logger="services")
    await launched(controller)
    for _ in range(3):
        await controller.hub.recoveries["example"].reconcile()
    fields = [getattr(r, "fields", {}) for r in caplog.records]
    applied = [f for f in fields if f.get("event") == "swarm_applied"]
    assert len(applied) == 1 and applied[0]["swarm"] == "example", applied
    launches = collections.Counter(
        f["execution_id"] for f in fields if f.get("event") == "launched"
    )
    assert launches == {E1: 1, E2: 1}, launches
