"""A zombie: the fenced attempt keeps running on a partitioned node after its replacement is
admitted, and keeps calling with what it held. The real controller and a real checkpoint-store
server refuse everything, and nothing it sent is stored (spec: "Release": a fenced worker keeps
no claim, grant or account authority; issue 3, the zombie test)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator

import grpc
from agentihooks.swarm.v2 import checkpoint_store_pb2 as store_pb
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as store_grpc
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.common.checkpoints import local, storing
from services.common.checkpoints import records as ckpt_records
from services.controller.pods import classifying
from services.controller.state import keys, reading
from tests.support import controller_server as cs
from tests.support import ports

E2, R2 = "example.eng-2.1", "example.eng-2.2"
BEFORE = b"captured before the fence\n"
AFTER = b"uploaded by the zombie after the fence\n"

# A node partition: the node controller marked the Pod for deletion by the taint manager, while
# the Pod's own status (written by a kubelet that can no longer report) still says running.
PARTITIONED = {
    "phase": "Running",
    "startTime": "2026-12-02T10:00:00Z",
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "NodeStatusUnknown"},
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"},
    ],
    "containerStatuses": [
        {
            "name": classifying.WORKER_CONTAINER,
            "image": cs.IMAGE,
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": "2026-12-02T10:00:05Z"}},
        }
    ],
}


def put(data: bytes) -> AsyncIterator[store_pb.PutObjectChunk]:
    async def chunks() -> AsyncIterator[store_pb.PutObjectChunk]:
        header = store_pb.PutObjectHeader(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        yield store_pb.PutObjectChunk(header=header)
        yield store_pb.PutObjectChunk(data=data)

    return chunks()


async def test_a_fenced_attempt_that_keeps_running_is_refused_everything(
    controller: cs.Controller, store: store_grpc.CheckpointStoreStub
) -> None:
    """Spec: the fenced attempt's launch grant is revoked …; a fenced worker keeps no claim,
    grant or account authority. Issue 3: the fence works on credentials, not on the Pod's
    death: a fenced attempt still running (a partitioned node) can no longer upload a
    checkpoint, report a capture or an outcome, or fetch its launch record; every call is
    refused and nothing it sent is stored."""
    await controller.apply()
    await cs.wait_for_pod(controller, "example.eng-1.1")
    await cs.wait_for_pod(controller, E2)
    token = cs.worker_credential(controller, E2)
    zombie = cs.md(token)
    record = await controller.stub.GetLaunchRecord(pb.GetLaunchRecordRequest(), metadata=zombie)
    grant = cs.md(record.capture_grant)
    assert record.scope.execution_id == E2 and record.capture_grant

    # Before the fence the attempt's credential and grant work.
    await controller.stub.ReportCapture(
        pb.ReportCaptureRequest(native_session_id="session-before", archive_watermark=5),
        metadata=zombie,
    )
    stored = await store.PutObject(put(BEFORE), metadata=grant)
    assert not stored.existed

    controller.fail(E2, PARTITIONED)

    async def waiting() -> None:
        decision = await reading.decision(controller.redis, "example", E2)
        assert decision is not None, "not decided yet"

    await ports.eventually(waiting, timeout=10)
    fence = await reading.fence(controller.redis, "example", E2)
    assert fence is not None and fence.reason == "node_lost"
    assert {r.kind.value for r in fence.releases} >= {"launch_grant", "store_grants"}
    answer = await controller.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_FRESH),
        metadata=cs.OPERATOR,
    )
    assert answer.decision.replacement_execution_id == R2
    await cs.wait_for_pod(controller, R2)
    await controller.reconcile()
    watched = [
        keys.execution("example", E2),
        keys.execution("example", R2),
        keys.fence("example", E2),
        keys.decision("example", E2),
        keys.task("example", "t-eng-2"),
        keys.seat("example", "eng-2"),
        keys.slots("example"),
    ]
    before = [await controller.redis.hgetall(k) for k in watched]

    # The zombie keeps going with what it held.
    calls = {
        "GetLaunchRecord": controller.stub.GetLaunchRecord(
            pb.GetLaunchRecordRequest(), metadata=zombie
        ),
        "ReportCapture": controller.stub.ReportCapture(
            pb.ReportCaptureRequest(
                native_session_id="session-after", archive_watermark=999, checkpoint_id="ckpt-z"
            ),
            metadata=zombie,
        ),
        "ReportRestore outcome": controller.stub.ReportRestore(
            iter(
                [
                    pb.RestoreReport(
                        outcome=types_pb2.RestoreOutcome(
                            execution_id=E2, recovery=types_pb2.CONTINUITY_FRESH
                        )
                    )
                ]
            ),
            metadata=zombie,
        ),
        "ReportRestore refusal": controller.stub.ReportRestore(
            iter([pb.RestoreReport(refusal=pb.RestoreRefusal(reason="corrupt_object"))]),
            metadata=zombie,
        ),
        "RestoreDecision": controller.stub.RestoreDecision(
            pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_FRESH),
            metadata=zombie,
        ),
    }
    for name, call in calls.items():
        error = await cs.refusal(call)
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, name
        assert cs.reason_of(error) == "forbidden_scope", name

    checkpoint = ckpt_records.new_record(
        checkpoint_id="ckpt-z",
        sequence=99,
        authority=ckpt_records.Authority("example", "eng-2", "t-eng-2", 1, E2, 1),
        project="app",
        compatibility_key=cs.IMAGE,
        transcript=ckpt_records.Blob.of(BEFORE),
        watermark=1,
    )
    store_calls = {
        "PutObject": store.PutObject(put(AFTER), metadata=grant),
        "CommitCheckpoint": store.CommitCheckpoint(
            store_pb.CommitCheckpointRequest(record_json=json.dumps(checkpoint)), metadata=grant
        ),
    }
    for name, call in store_calls.items():
        error = await cs.refusal(call)
        # The store knows the grant only as revoked: it is refused before anything is read.
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, name
        assert error.details() == "credential revoked", name

    # Nothing it sent is stored.
    assert [await controller.redis.hgetall(k) for k in watched] == before
    held = await reading.execution(controller.redis, "example", E2)
    assert held is not None
    assert (held.native_session_id, held.archive_watermark) == ("session-before", 5)
    assert held.captured_checkpoint_id is None
    for eid in (E2, R2):
        assert await reading.outcome(controller.redis, "example", eid) is None
        assert await reading.refusal(controller.redis, "example", eid) is None
    folder = local.LocalFolderBackend(controller.checkpoint_root).scoped(
        storing.StoreScope("example", "t-eng-2", 1)
    )
    assert await folder.object_exists(hashlib.sha256(BEFORE).hexdigest())
    assert not await folder.object_exists(hashlib.sha256(AFTER).hexdigest())
    assert await folder.list_checkpoint_ids() == []
    assert await reading.requests(controller.redis, "example") == []
    # Its account slot ended with the fence; the replacement holds the only one of the seat.
    slots = await reading.slots(controller.redis, "example")
    assert E2 not in slots and R2 in slots
    # And the replacement's own credential still works.
    own = await controller.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(controller, R2))
    )
    assert own.scope.execution_id == R2
