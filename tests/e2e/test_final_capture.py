"""The sidecar's final capture end to end, with worker Pods whose containers really run.

Issue 21: "When the worker container exits or is killed, and on SIGTERM, the sidecar captures
everything complete that the worker wrote, reports it as final, and only then ends ... The fence
then states its lost tail truthfully: none after a final capture, `unknown` only when the
sidecar died with the worker (node lost, Pod killed)."

The cluster is tests/e2e/kube_cluster.py's. Its `claude` is replaced by
`tests/support/record_writer.py`, a stand-in that keeps appending session records (one line in
two writes) until it is killed, and keeps a witness of what it wrote outside the Pod (the Pod's
volumes go with it): `written-1.jsonl`, every record whose whole line reached the session file
(so it lags the file by at most the one record being written), and `restored-2.jsonl`, what
the replacement's `--resume` found in its session file before it added its own turn.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import shlex
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s_client

from services.controller.pods import classifying, templates
from services.controller.state import keys, reading
from services.restorer import serving
from tests.e2e.kube_cluster import (
    FAIL_NOW,
    FIRST,
    SECOND,
    SWARM,
    WAIT_S,
    Cluster,
    _document,
    _terminated,
    cluster,
)
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.kube import objects

pytestmark = pytest.mark.slow
__all__ = ["cluster"]

WRITER = pathlib.Path(__file__).resolve().parents[1] / "support" / "record_writer.py"
SESSIONS = pathlib.Path(".claude") / "projects" / "-work-app"
"""Where Claude Code keeps the sessions of the worktree /work/app, under the harness home."""


def _install_writer(cluster: Cluster, failure: str) -> pathlib.Path:
    """Make the image's `claude` the record writer; returns its witness folder."""
    witness = cluster.image / "witness"
    witness.mkdir()
    witness.chmod(0o777)
    settings = {
        "WRITER_WITNESS_DIR": str(witness),
        "WRITER_FAILURE": failure,
        "WRITER_FAIL_AFTER_FILE": str(cluster.image / FAIL_NOW),
        "WRITER_INTERVAL_S": "0.1",
        "WRITER_RECORD_S": "0.02",
    }
    assigned = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    # -P: the writer's folder (tests/support) is not put first on sys.path.
    (cluster.image / "bin" / "claude").write_text(
        f'#!/bin/sh\n{assigned} exec python3 -P {shlex.quote(str(WRITER))} "$@"\n'
    )
    return witness


def _lines(path: pathlib.Path) -> list[bytes]:
    """The complete lines of a file (a record still being written is not one)."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)


async def _fence(cluster: Cluster) -> Any:
    async def fenced() -> Any:
        fence = await reading.fence(cluster.ctl.redis, SWARM, FIRST)
        assert fence is not None
        return fence

    return await ports.eventually(fenced, timeout=WAIT_S)


async def _fence_event(cluster: Cluster) -> dict[str, Any]:
    raw = await cluster.ctl.redis.xrange(keys.events(SWARM))
    [detail] = [
        json.loads(f[b"detail"])
        for _, f in raw
        if f[b"kind"] == b"fence" and f[b"execution_id"] == FIRST.encode()
    ]
    return dict(detail)


async def _accepted(cluster: Cluster) -> Any:
    async def accepted() -> Any:
        decision = await reading.decision(cluster.ctl.redis, SWARM, FIRST)
        assert decision is not None and decision.state.value == "accepted", decision
        assert decision.replacement_execution_id == SECOND, decision
        return decision

    return await ports.eventually(accepted, timeout=WAIT_S)


async def _restored(cluster: Cluster, witness: pathlib.Path) -> list[bytes]:
    """What the replacement's harness found in its session file when it resumed."""
    done = await _terminated(cluster, SECOND, classifying.WORKER_CONTAINER)
    worker_log = cluster.logs(SECOND, classifying.WORKER_CONTAINER)
    assert done["exitCode"] == 0, worker_log[-3000:]
    restored = witness / "restored-2.jsonl"
    assert restored.exists(), worker_log[-3000:]
    data = restored.read_bytes()
    assert data.endswith(b"\n"), "the restore delivered a record cut short"
    return data.splitlines(keepends=True)


async def _until_deleted(watch: aiohttp.ClientResponse) -> dict[str, Any]:
    """Read a Pod watch until the Pod is deleted; returns it with its last status."""
    while True:
        line = await watch.content.readline()
        assert line, "the watch ended before the Pod was deleted"
        event = json.loads(line)
        if event["type"] == "DELETED":
            return dict(event["object"])


def _final_reports(cluster: Cluster, execution: str) -> list[dict[str, Any]]:
    log = cluster.logs(execution, classifying.RESTORER_CONTAINER)
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [x for x in lines if x.get("event") == "capture_reported" and x.get("final")]


async def test_an_oom_killed_worker_loses_no_complete_record(cluster: Cluster) -> None:
    """Issue 21, must show: "a worker OOM-killed by its cgroup mid-session; the final capture;
    the fence's lost tail empty; the replacement restores every complete record". The stand-in
    writes records while it grows past its memory limit; the kernel kills it at any moment of
    that, half way through a record too. The sidecar, alive, archives everything complete and
    reports it as final; the fence (record and event) names no lost tail after that watermark;
    the native replacement finds every record the worker completed, in order, and nothing cut
    short."""
    witness = _install_writer(cluster, "oom")
    await cluster.ctl.apply(_document(cluster))
    killed = await _terminated(cluster, FIRST, classifying.WORKER_CONTAINER)
    assert (killed["reason"], killed["exitCode"]) == ("OOMKilled", 137), (
        killed,
        cluster.logs(FIRST, classifying.WORKER_CONTAINER)[-3000:],
    )
    fence = await _fence(cluster)
    assert fence.reason == "oom_killed"
    [final] = _final_reports(cluster, FIRST)
    watermark = final["watermark"]
    # "none after a final capture": the record, its JSON surface and the fence event.
    assert fence.archive_watermark == watermark
    assert fence.lost_tail == {"after_watermark": watermark, "length": "none"}
    assert fence.to_json()["lost_tail"] == {"after_watermark": watermark, "length": "none"}
    event = await _fence_event(cluster)
    assert event["lost_tail"] == {"after_watermark": watermark, "length": "none"}
    decision = await _accepted(cluster)
    assert decision.directive is not None and decision.directive.recovery.value == "native"
    assert decision.directive.watermark == watermark
    written = _lines(witness / "written-1.jsonl")
    restored = await _restored(cluster, witness)
    # Every complete record, in order; at most the one record whose line was whole in the
    # session file but not yet in the witness when the kernel killed the writer.
    assert restored[: len(written)] == written
    assert len(written) <= len(restored) <= len(written) + 1
    assert len(restored) == watermark
    assert len(written) > 4, "the worker died before it wrote anything after its first turn"


@pytest.mark.worker_failure("none")
async def test_a_graceful_eviction_loses_no_record(cluster: Cluster) -> None:
    """Issue 21: "and on SIGTERM, the sidecar captures everything complete that the worker
    wrote, reports it as final, and only then ends", and "Worker Pod templates give the grace
    period this needs": the Pod is deleted with its template's grace period (an eviction, a
    drain), which covers the final capture's bound; the kubelet sends the worker SIGTERM
    (exit 143, not a SIGKILL), then the sidecar, which takes its final capture within the
    grace period and exits 0; the fence names no lost tail and the replacement restores every
    record written."""
    witness = _install_writer(cluster, "none")
    await cluster.ctl.apply(_document(cluster))

    async def working() -> None:
        execution = await reading.execution(cluster.ctl.redis, SWARM, FIRST)
        assert execution is not None and execution.native_session_id, execution
        assert len(_lines(witness / "written-1.jsonl")) > 8

    await ports.eventually(working, timeout=WAIT_S)
    api = k8s_client.CoreV1Api(cluster.emulator.api_client)
    name = cluster.pod_name(FIRST)
    url = f"{cluster.emulator.url}/api/v1/namespaces/{cs.NAMESPACE}/pods"
    watching = {"watch": "true", "fieldSelector": f"metadata.name={name}"}
    # Opened before the deletion: the Pod's last status is in the DELETED event.
    async with aiohttp.ClientSession() as http, http.get(url, params=watching) as watch:
        # No grace period asked for: the Pod's own (the worker template's), as a drain does.
        await api.delete_namespaced_pod(name, cs.NAMESPACE)
        async with asyncio.timeout(WAIT_S):
            last = await _until_deleted(watch)
    grace = last["metadata"]["deletionGracePeriodSeconds"]
    assert grace == templates.default_pod_template()["spec"]["terminationGracePeriodSeconds"]
    assert grace >= serving.FINAL_CAPTURE_S
    stopped = objects.container_status(last, classifying.WORKER_CONTAINER)["state"]
    assert stopped["terminated"]["exitCode"] == 143, stopped  # SIGTERM's, not SIGKILL's 137
    sidecar = objects.container_status(last, classifying.RESTORER_CONTAINER)["state"]
    assert sidecar["terminated"]["exitCode"] == 0, sidecar  # done within the grace period
    fence = await _fence(cluster)
    [final] = _final_reports(cluster, FIRST)
    watermark = final["watermark"]
    assert fence.lost_tail == {"after_watermark": watermark, "length": "none"}
    event = await _fence_event(cluster)
    assert event["lost_tail"] == {"after_watermark": watermark, "length": "none"}
    written = _lines(witness / "written-1.jsonl")
    await _accepted(cluster)
    restored = await _restored(cluster, witness)
    assert restored[: len(written)] == written, "records were lost"
    assert len(written) <= len(restored) <= len(written) + 1
    assert len(restored) == watermark


@pytest.mark.worker_failure("none")
async def test_a_pod_lost_whole_names_an_unknown_tail_and_loses_only_what_followed_the_last_capture(
    cluster: Cluster,
) -> None:
    """Issue 21: "`unknown` only when the sidecar died with the worker (node lost, Pod
    killed)", and "a Pod killed whole (lag-bounded loss, `unknown`)". The node stops with the
    worker and its sidecar on it (both frozen: neither can act again); the fence names the
    lost tail `unknown` after the last reported watermark. Once a node is ready, the
    replacement restores the last checkpoint: the records the worker wrote up to it, in
    order, and loses only those written after it."""
    witness = _install_writer(cluster, "none")
    await cluster.ctl.apply(_document(cluster))

    async def captured() -> str:
        execution = await reading.execution(cluster.ctl.redis, SWARM, FIRST)
        assert execution is not None and execution.native_session_id, execution
        assert (execution.archive_watermark or 0) > 8, execution
        return execution.native_session_id

    session = await ports.eventually(captured, timeout=WAIT_S)
    await cluster.node.stop()
    session_file = cluster.volume(FIRST, "home") / SESSIONS / f"{session}.jsonl"
    written = _lines(session_file)  # frozen: nothing more is written
    fence = await _fence(cluster)
    assert fence.reason == "node_lost"
    assert fence.lost_tail == {"after_watermark": fence.archive_watermark, "length": "unknown"}
    event = await _fence_event(cluster)
    assert event["lost_tail"]["length"] == "unknown"
    assert not _final_reports(cluster, FIRST)
    decision = await _accepted(cluster)
    await cluster.node.start()
    restored = await _restored(cluster, witness)
    assert decision.directive is not None
    last_capture = decision.directive.watermark
    assert last_capture is not None and last_capture >= (fence.archive_watermark or 0)
    # The restore is exactly the worker's records up to the last capture; what is lost is
    # only what it wrote after that capture.
    assert len(restored) == last_capture
    assert restored == written[:last_capture]
