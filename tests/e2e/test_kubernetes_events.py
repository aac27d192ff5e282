"""`kubectl describe pod` and `kubectl get events` tell a recovery, end to end (issue 24, part 2).

The cluster of tests/e2e/kube_cluster.py (the controller on the Kubernetes runtime, real Redis,
the store on S3, the API emulator whose kubelet runs every Pod as processes) and the real kubectl:
a worker really crashes, the controller fences it and waits for a decision, the operator chooses
to resume, the replacement's sidecar restores natively and reports; the controller posted each
step as an `events.k8s.io/v1` Event, and kubectl reads them through core v1 as on a cluster.
"""

from __future__ import annotations

import pathlib
import re

import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

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
    _terminated,
    cluster,
)
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.kube import kubectl

pytestmark = pytest.mark.slow
__all__ = ["cluster"]


def event_rows(described: str) -> dict[str, str]:
    """The rows of `kubectl describe`'s Events section, by reason."""
    _, _, section = described.partition("\nEvents:\n")
    rows = {}
    for line in section.splitlines()[2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 5:
            rows[cells[1]] = line
    return rows


def listed_rows(listed: str) -> dict[tuple[str, str], list[str]]:
    """The rows of `kubectl get events` (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE), by reason
    and object."""
    lines = listed.splitlines()
    assert lines, "no Events (kubectl says so on stderr)"
    header = re.split(r"\s{2,}", lines[0].strip())
    assert header == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], listed
    rows = [re.split(r"\s{2,}", line.strip(), maxsplit=4) for line in lines[1:]]
    return {(row[2], row[3]): row for row in rows}


@pytest.mark.worker_failure("crash")
async def test_kubectl_describe_pod_and_get_events_tell_the_recovery(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    """Issue 24: after the worker's crash, `kubectl get events` shows `Fenced` (with the
    failure) and `AwaitingDecision` (with the offer) on its Pod, which the fence removed; after
    the operator's resume, `kubectl describe pod` on the replacement shows, from
    `agentihooks.io/controller`, why it exists (`DecisionAccepted`), `ReplacementLaunched` and
    `OutcomeVerified` (native, with the checkpoint), and `kubectl get events` lists every step
    on its Pod. No credential, session id or task text appears anywhere."""
    env = kubectl.environment(tmp_path, cluster.emulator.url)
    if cluster.emulator.get("namespaces", cs.NAMESPACE) is None:  # kubectl describe reads it
        cluster.emulator.create("namespaces", {"metadata": {"name": cs.NAMESPACE}})
    first, second = cluster.pod_name(FIRST), cluster.pod_name(SECOND)

    async def run(command: str) -> str:
        return await kubectl.succeed(f"kubectl -n {cs.NAMESPACE} {command}", cwd=tmp_path, env=env)

    await cluster.ctl.apply(_document(cluster, automation=False))
    crashed = await _terminated(cluster, FIRST, classifying.WORKER_CONTAINER)
    assert crashed["exitCode"] == 1, cluster.logs(FIRST, classifying.WORKER_CONTAINER)[-2000:]
    card = await _pending(cluster)
    assert card.resume_label == "Resume native"

    async def told_first() -> dict[tuple[str, str], list[str]]:
        rows = listed_rows(await run(f"get events --field-selector involvedObject.name={first}"))
        assert {("Fenced", f"pod/{first}"), ("AwaitingDecision", f"pod/{first}")} <= set(rows)
        return rows

    rows = await ports.eventually(told_first, timeout=WAIT_S, every=0.5)
    fenced, waiting = rows["Fenced", f"pod/{first}"], rows["AwaitingDecision", f"pod/{first}"]
    assert fenced[1] == "Warning" and fenced[4].startswith(f"Fenced {FIRST} (generation 1): ")
    assert "application_exit; archive watermark" in fenced[4]
    offer = f"offer: native resume from {card.checkpoint} at record"
    assert waiting[1] == "Warning" and offer in waiting[4]

    answer = await cluster.ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm=SWARM, seat=SEAT, choice=types_pb2.CHOICE_RESUME),
        metadata=cs.OPERATOR,
    )
    assert answer.decision.replacement_execution_id == SECOND
    done = await _terminated(cluster, SECOND, classifying.WORKER_CONTAINER)
    assert done["exitCode"] == 0, cluster.logs(SECOND, classifying.WORKER_CONTAINER)[-2000:]

    told = ("DecisionAccepted", "ReplacementLaunched", "OutcomeVerified")

    async def told_second() -> dict[str, str]:
        rows = event_rows(await run(f"describe pod {second}"))
        assert set(told) <= set(rows), rows
        return rows

    described = await ports.eventually(told_second, timeout=WAIT_S, every=0.5)
    for reason in told:
        assert re.search(rf"Normal +{reason} .* agentihooks\.io/controller +", described[reason])
    accepted = f"resume accepted for {FIRST} (generation 1) (operator): native from"
    assert accepted in described["DecisionAccepted"]
    assert f"replacement {SECOND} (generation 2)" in described["DecisionAccepted"]
    launched = f"Launched replacement {SECOND} (generation 2) on seat {SEAT}"
    assert launched in described["ReplacementLaunched"]
    restored = f"{SECOND} (generation 2) restored native from {card.checkpoint} at record"
    assert restored in described["OutcomeVerified"]

    listed = await run("get events")
    assert set(listed_rows(listed)) == {
        ("Fenced", f"pod/{first}"),
        ("AwaitingDecision", f"pod/{first}"),
        ("DecisionAccepted", f"pod/{first}"),
        ("DecisionAccepted", f"pod/{second}"),
        ("ReplacementLaunched", f"pod/{second}"),
        ("OutcomeVerified", f"pod/{second}"),
    }, listed

    fence = await reading.fence(cluster.ctl.redis, SWARM, FIRST)
    assert fence is not None and fence.native_session_id
    shown = listed + await run("get events -o wide") + await run("get events -o yaml")
    credential = cs.worker_credential(cluster.ctl, SECOND)
    for secret in (cs.GRANT_KEY, cs.OPERATOR_TOKEN, credential, fence.native_session_id):
        assert secret not in shown
    assert "Write the progress notes" not in shown
