"""Recovery end to end on the Kubernetes runtime, with worker Pods whose containers really run.

See tests/e2e/kube_cluster.py for the cluster: the controller (Kubernetes runtime, real Redis),
the checkpoint store on S3 (moto server), the Kubernetes API emulator and its kubelet, which runs
every Pod the controller creates as processes, exactly as its spec says.
"""

from __future__ import annotations

import json

import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2
from kubernetes_asyncio import client as k8s_client

from services.controller.pods import classifying
from services.controller.state import reading
from tests.e2e.kube_cluster import (
    FIRST,
    SEAT,
    SECOND,
    SWARM,
    WAIT_S,
    Cluster,
    _document,
    _pending,
    _pod_exists,
    _s3,
    _terminated,
    cluster,
)
from tests.support import controller_server as cs
from tests.support import ports

pytestmark = pytest.mark.slow
__all__ = ["cluster"]


async def test_an_oom_killed_worker_is_resumed_natively_in_a_pod_that_really_runs(
    cluster: Cluster,
) -> None:
    """The worker grows past its memory limit and the kernel kills it; the controller fences
    it `oom_killed` from the real container status and resumes it natively without asking; the
    replacement Pod's sidecar fetches its launch record, verifies and restores the checkpoint
    from S3, reports `native` and logs `restore_verified`; the harness resumes the conversation
    in the restored worktree."""
    await cluster.ctl.apply(_document(cluster))
    killed = await _terminated(cluster, FIRST, classifying.WORKER_CONTAINER)
    assert (killed["reason"], killed["exitCode"]) == ("OOMKilled", 137), (
        killed,
        cluster.logs(FIRST, classifying.WORKER_CONTAINER)[-3000:],
        cluster.logs(FIRST, classifying.RESTORER_CONTAINER)[-3000:],
    )

    async def fenced() -> None:
        fence = await reading.fence(cluster.ctl.redis, SWARM, FIRST)
        assert fence is not None and fence.reason == "oom_killed"

    await ports.eventually(fenced, timeout=WAIT_S)

    async def accepted() -> None:
        decision = await reading.decision(cluster.ctl.redis, SWARM, FIRST)
        assert decision is not None and decision.state.value == "accepted", decision
        assert decision.source.value == "automatic" and decision.replacement_execution_id == SECOND

    await ports.eventually(accepted, timeout=WAIT_S)
    done = await _terminated(cluster, SECOND, classifying.WORKER_CONTAINER)
    worker_log = cluster.logs(SECOND, classifying.WORKER_CONTAINER)
    assert done["exitCode"] == 0, worker_log[-3000:]

    async def verified() -> None:
        status = await cluster.ctl.status()
        [card] = [h for h in status.handoffs if h.execution_id == FIRST] or [None]
        assert card is not None and card.continuity == "native", status.handoffs

    await ports.eventually(verified, timeout=WAIT_S)
    sidecar_log = cluster.logs(SECOND, classifying.RESTORER_CONTAINER)
    lines = [json.loads(line) for line in sidecar_log.splitlines() if line.startswith("{")]
    [line] = [x for x in lines if x.get("event") == "restore_verified"]
    assert line["execution_id"] == SECOND and line["recovery"] == "native"
    worktree = cluster.volume(SECOND, "work") / "app"
    assert (worktree / "notes.md").read_text() == "# progress\n- step 1 done\n"
    resumed = (worktree / "RESUMED").read_text()
    assert "with the prompt" in resumed and "restored after the worker" in resumed
    assert "Write the progress notes" not in sidecar_log  # no conversation content in logs
    assert cs.GRANT_KEY not in sidecar_log and cs.OPERATOR_TOKEN not in sidecar_log
    keys = _s3(cluster).list_objects_v2(Bucket=cluster.bucket.name)
    assert keys.get("KeyCount", 0) > 0, "the checkpoint was not stored in the bucket"


@pytest.mark.worker_failure("crash")
async def test_a_refused_restore_holds_the_seat_and_the_harness_never_starts(
    cluster: Cluster,
) -> None:
    """A checkpoint whose objects were corrupted in the bucket after the operator's resume was
    accepted: the replacement's sidecar refuses the restore with `corrupt_object`, the worker
    entry point stops without starting the harness, and the seat is held `restore_refused`.
    (Corrupted before, the controller itself refuses the resume: `no complete compatible
    checkpoint to resume from`.)"""
    await cluster.ctl.apply(_document(cluster, automation=False))
    crashed = await _terminated(cluster, FIRST, classifying.WORKER_CONTAINER)
    assert crashed["exitCode"] == 1
    card = await _pending(cluster)
    assert card.failure == "application_exit" and card.resume_label == "Resume native"
    # The node is cordoned while the decision is accepted (the checkpoint verifies then), and
    # the checkpoint's objects are corrupted before the replacement can start.
    api = k8s_client.CoreV1Api(cluster.emulator.api_client)
    await api.patch_node("node-1", {"spec": {"unschedulable": True}})
    answer = await cluster.ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm=SWARM, seat=SEAT, choice=types_pb2.CHOICE_RESUME),
        metadata=cs.OPERATOR,
    )
    assert answer.decision.replacement_execution_id == SECOND
    await ports.eventually(_pod_exists(cluster, SECOND), timeout=WAIT_S)
    client = _s3(cluster)
    listed = client.list_objects_v2(Bucket=cluster.bucket.name)["Contents"]
    objects = [item["Key"] for item in listed if "/objects/" in item["Key"]]
    assert objects
    for key in objects:
        client.put_object(Bucket=cluster.bucket.name, Key=key, Body=b"tampered with")
    await api.patch_node("node-1", {"spec": {"unschedulable": False}})
    stopped = await _terminated(cluster, SECOND, classifying.WORKER_CONTAINER)
    worker_log = cluster.logs(SECOND, classifying.WORKER_CONTAINER)
    assert stopped["exitCode"] != 0 and "corrupt_object" in worker_log, worker_log[-2000:]
    assert "demo agent" not in worker_log, "the harness ran after a refused restore"
    assert not (cluster.volume(SECOND, "work") / "app" / "RESUMED").exists()

    async def held() -> None:
        seat = await reading.seat(cluster.ctl.redis, SWARM, SEAT)
        assert seat is not None and seat.state.value == "restore_refused", seat

    await ports.eventually(held, timeout=WAIT_S)
    sidecar_log = cluster.logs(SECOND, classifying.RESTORER_CONTAINER)
    assert '"restore_refused"' in sidecar_log and '"corrupt_object"' in sidecar_log
    assert '"restore_verified"' not in sidecar_log


@pytest.mark.worker_failure("none")
async def test_a_worker_pod_deleted_by_someone_is_fenced_and_replaced(cluster: Cluster) -> None:
    """Someone deletes a running worker's Pod: the kubelet stops its containers (SIGTERM),
    the controller fences the attempt from the last state it saw (`application_exit`, the
    worker never finished) and, as it holds a native checkpoint, resumes it natively; the
    replacement runs and resumes the conversation."""
    await cluster.ctl.apply(_document(cluster))

    async def captured() -> None:
        execution = await reading.execution(cluster.ctl.redis, SWARM, FIRST)
        assert execution is not None and execution.native_session_id, execution

    await ports.eventually(captured, timeout=WAIT_S)
    cluster.emulator.delete("pods", cluster.pod_name(FIRST), cs.NAMESPACE)

    async def fenced() -> None:
        fence = await reading.fence(cluster.ctl.redis, SWARM, FIRST)
        assert fence is not None and fence.reason == "application_exit", fence

    await ports.eventually(fenced, timeout=WAIT_S)
    done = await _terminated(cluster, SECOND, classifying.WORKER_CONTAINER)
    assert done["exitCode"] == 0, cluster.logs(SECOND, classifying.WORKER_CONTAINER)[-2000:]
    assert (cluster.volume(SECOND, "work") / "app" / "RESUMED").exists()


@pytest.mark.worker_failure("none")
async def test_a_stopped_node_is_node_lost(cluster: Cluster) -> None:
    """The node running a worker stops (its processes frozen, its Ready condition Unknown):
    the controller fences the attempt `node_lost` from the Node, releases it, and admits its
    replacement, which waits for a ready node (this cluster has no other)."""
    await cluster.ctl.apply(_document(cluster))

    async def captured() -> None:
        execution = await reading.execution(cluster.ctl.redis, SWARM, FIRST)
        assert execution is not None and execution.native_session_id, execution

    await ports.eventually(captured, timeout=WAIT_S)
    await cluster.node.stop()

    async def fenced() -> None:
        fence = await reading.fence(cluster.ctl.redis, SWARM, FIRST)
        assert fence is not None and fence.reason == "node_lost", fence

    await ports.eventually(fenced, timeout=WAIT_S)
    replacement = await ports.eventually(_pod_exists(cluster, SECOND), timeout=WAIT_S)
    assert replacement["spec"].get("nodeName") in (None, "")
