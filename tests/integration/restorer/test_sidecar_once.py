"""One restore per sidecar life, its status and metrics, and what goes to the controller.

Restorer.Restore streams each step, then ready or refused; a second call returns the stored
result; GetRestoreStatus reports the state and Restorer.metrics (`restore_outcomes_by_type`,
refusals as `refused/<reason>`). With `checkpoint_remote: true` a refusal is reported too, and
an outcome the controller refuses stops the launch.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import grpc
import pytest
from agentihooks.swarm.v2 import restorer_pb2

from services.common import directives, settings
from services.restorer import launching
from tests.integration.restorer import sidecar_support as kit
from tests.support import store_server

json_logs = kit.json_logs  # the fixture, visible to this module

C = directives.Continuity
pytestmark = pytest.mark.usefixtures("usual_umask")


async def _prepared(tmp_path: pathlib.Path) -> tuple[kit.Scene, directives.Directive, pathlib.Path]:
    scene = kit.make_scene(tmp_path, existing=True)
    root = tmp_path / "checkpoints"
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root)})
    captured = await kit.capture(scene, storage)
    return scene, kit.directive_for(captured, C.NATIVE), root


async def test_a_second_restore_returns_the_stored_result(tmp_path: pathlib.Path) -> None:
    """Only one restore per sidecar life: a second Restore call gets the stored ready, even
    after the checkpoint vanished, and nothing is restored twice; status and metrics agree."""
    scene, directive, root = await _prepared(tmp_path)
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(scene.launch(directive)), CHECKPOINT_ROOT=str(root)
    )
    car, stop = await kit.start_sidecar(conf)
    try:
        idle = await car.stub.GetRestoreStatus(restorer_pb2.GetRestoreStatusRequest())
        assert idle.state == "idle"
        assert dict(idle.restore_outcomes_by_type) == {"native": 0, "reconstructed": 0, "fresh": 0}
        first = await car.restore(scene.worktree)
        kit.manifest_path(root, directive.checkpoint_id or "").unlink()
        second = await car.restore(scene.worktree)
    finally:
        await stop()
    assert first.ready == second.ready
    assert len(second.events) == 1
    assert second.status.state == "ready"
    assert second.status.ready == first.ready
    assert dict(second.status.restore_outcomes_by_type)["native"] == 1


async def test_concurrent_calls_see_one_restore_and_a_dropped_caller_does_not_stop_it(
    tmp_path: pathlib.Path,
) -> None:
    """An entry point that disconnects mid-stream does not cut the restore short; callers that
    arrive while it runs get its one result."""
    scene, directive, root = await _prepared(tmp_path)
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(scene.launch(directive)), CHECKPOINT_ROOT=str(root)
    )
    car, stop = await kit.start_sidecar(conf)
    try:
        call = car.stub.Restore(restorer_pb2.RestoreRequest(worktree=str(scene.worktree)))
        first = await call.read()
        assert first.step.step == "directive"
        call.cancel()
        results = await asyncio.gather(car.restore(scene.worktree), car.restore(scene.worktree))
    finally:
        await stop()
    assert results[0].ready == results[1].ready
    assert results[0].status.restore_outcomes_by_type["native"] == 1


async def test_a_relative_worktree_is_malformed_and_does_not_use_up_the_restore(
    tmp_path: pathlib.Path,
) -> None:
    """The request names the worktree; a relative one is INVALID_ARGUMENT and the one restore
    is still available."""
    scene, directive, root = await _prepared(tmp_path)
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(scene.launch(directive)), CHECKPOINT_ROOT=str(root)
    )
    car, stop = await kit.start_sidecar(conf)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in car.stub.Restore(restorer_pb2.RestoreRequest(worktree="relative/wt")):
                pass
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        run = await car.restore(scene.worktree)
    finally:
        await stop()
    assert run.last.HasField("ready")


async def test_a_remote_refusal_is_reported_and_logged_without_restore_verified(
    tmp_path: pathlib.Path, store_server: store_server.StoreServer, json_logs: kit.JsonLogs
) -> None:
    """With checkpoint_remote a refusal goes to the controller too (progress, then exactly one
    refusal), so the decision stays accepted; no restore_verified line is logged."""
    credential = kit.worker_credential()
    double, control, stop = await kit.start_recovery(credential)
    try:
        scene = kit.make_scene(tmp_path, existing=True)
        captured, grant = await kit.capture_remote(
            scene, store_server, credential=credential, control=control
        )
        wrong = directives.Directive(
            captured.checkpoint_id, C.NATIVE, "another", captured.watermark
        )
        launch = scene.launch(wrong, remote=True, store_addr=store_server.addr, restore_grant=grant)
        double.launch = kit.launch_pb(launch)
        before = scene.untouched()
        run = await kit.restore_once(
            scene.conf(CONTROL_ADDR=control, WORKER_CREDENTIAL=credential), scene.worktree
        )
    finally:
        await stop()
    assert run.reason == "conversation_mismatch"
    assert scene.untouched() == before
    (report,) = double.reports
    assert report[-1].refusal.reason == "conversation_mismatch"
    assert all(r.HasField("progress") for r in report[:-1])
    assert sum(r.HasField("refusal") or r.HasField("outcome") for r in report) == 1
    assert json_logs.events("restore_verified") == []
    (refused,) = json_logs.events("restore_refused")
    assert refused == {
        "event": "restore_refused",
        "execution_id": "e-43",
        "reason": "conversation_mismatch",
    }
    assert credential not in json_logs.text() and grant not in json_logs.text()


async def test_an_outcome_the_controller_refuses_stops_the_launch(
    tmp_path: pathlib.Path, json_logs: kit.JsonLogs
) -> None:
    """The controller accepts an outcome only while the replacement is the seat's current
    attempt: a refused report means this attempt must not start its harness."""
    scene = kit.make_scene(tmp_path, existing=True)
    credential = kit.worker_credential()
    double, control, stop = await kit.start_recovery(credential)
    double.refuse_outcome = "not_current_attempt"
    try:
        launch = scene.launch(directives.FRESH, remote=True)
        conf = scene.conf(
            LAUNCH_RECORD=scene.write_launch(launch),
            CONTROL_ADDR=control,
            WORKER_CREDENTIAL=credential,
        )
        run = await kit.restore_once(conf, scene.worktree)
    finally:
        await stop()
    assert double.reports[0][-1].HasField("outcome")
    assert run.reason == "controller: not_current_attempt"
    assert ("report", "skipped") in run.steps
    assert run.status.restore_outcomes_by_type["refused/controller"] == 1
    assert run.status.restore_outcomes_by_type["fresh"] == 0
    assert json_logs.events("restore_verified") == []


async def test_a_controller_that_cannot_be_reached_stops_the_launch(tmp_path: pathlib.Path) -> None:
    """A restore whose outcome cannot be reported is not started: the controller would keep
    the task recovery_pending while an unreported worker runs."""
    scene = kit.make_scene(tmp_path, existing=True)
    launch = scene.launch(directives.FRESH, remote=True)
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(launch),
        CONTROL_ADDR="127.0.0.1:1",
        WORKER_CREDENTIAL=kit.worker_credential(),
    )
    run = await kit.restore_once(conf, scene.worktree)
    assert run.reason == "controller unavailable: the outcome could not be reported"


async def test_an_unexpected_failure_still_ends_the_stream_with_a_refusal(
    tmp_path: pathlib.Path, json_logs: kit.JsonLogs
) -> None:
    """Every Restore stream ends in ready or refused: a failure nobody foresaw is a refusal
    (the entry point stops the launch), logged by exception type only."""
    scene = kit.make_scene(tmp_path, existing=True)

    async def broken() -> Any:
        raise RuntimeError("a message that may hold values: " + kit.CONVERSATION_SECRET)

    car, stop = await kit.start_sidecar(scene.conf(), load=broken)
    try:
        run = await car.restore(scene.worktree)
    finally:
        await stop()
    assert run.reason == "restorer: internal error"
    (line,) = json_logs.events("restore_failed")
    assert line["exception"] == "RuntimeError"
    assert kit.CONVERSATION_SECRET not in json_logs.text()


async def test_a_seats_first_attempt_reports_nothing_and_logs_restore_ready(
    tmp_path: pathlib.Path, json_logs: kit.JsonLogs
) -> None:
    """A worker launched with checkpoint_remote reports its outcome to the controller, which
    waits for the replacement of a fenced attempt: a seat's first attempt (generation 1)
    replaces nobody, so it calls no ReportRestore (the controller is up and would record it)
    and logs `restore_ready`, never `restore_verified`."""
    scene = kit.make_scene(tmp_path, existing=True)
    first = launching.Scope("example", "eng-2", "t-eng-2", 1, "e-41", 1)
    credential = kit.worker_credential("e-41", 1)
    double, control, stop = await kit.start_recovery(credential)
    try:
        launch = scene.launch(directives.FRESH, scope=first, remote=True)
        conf = scene.conf(
            LAUNCH_RECORD=scene.write_launch(launch),
            CONTROL_ADDR=control,
            WORKER_CREDENTIAL=credential,
        )
        run = await kit.restore_once(conf, scene.worktree)
    finally:
        await stop()
    assert list(run.ready.command) == list(scene.command())
    assert double.reports == [] and double.presented == []
    assert not any(step == "report" for step, _ in run.steps)
    assert json_logs.events("restore_verified") == []
    (ready,) = json_logs.events("restore_ready")
    assert ready == {
        "event": "restore_ready",
        "execution_id": "e-41",
        "recovery": "fresh",
        "checkpoint_id": None,
        "watermark": None,
    }
    assert credential not in json_logs.text()
