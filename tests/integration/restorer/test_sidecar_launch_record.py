"""The launch record fetched with the attempt's own worker credential (Recovery.GetLaunchRecord).

"It fetches its launch record with the attempt's own worker credential": the controller side is
a Recovery double over real gRPC that checks the bearer credential.
"""

from __future__ import annotations

import pathlib

import pytest

from services.common import directives, errors
from services.restorer import launching, retrying
from tests.integration.restorer import sidecar_support as kit
from tests.support import ports

C = directives.Continuity


async def test_fetch_presents_the_worker_credential(tmp_path: pathlib.Path) -> None:
    """The record comes back typed; the call carried exactly the attempt's credential."""
    scene = kit.make_scene(tmp_path)
    credential = kit.worker_credential()
    double, addr, stop = await kit.start_recovery(credential)
    want = scene.launch(directives.Directive("ckpt-7", C.RECONSTRUCTED, None, 9))
    double.launch = kit.launch_pb(want)
    try:
        got = await launching.fetch(addr, credential)
        with pytest.raises(errors.Refused) as refused:
            await launching.fetch(addr, kit.worker_credential("e-99", 9))
    finally:
        await stop()
    assert got == want
    assert double.presented[0] == credential
    assert refused.value.reason == "launch record refused: unauthenticated"


async def test_an_unreachable_controller_is_unavailable_after_the_retries() -> None:
    """Transport trouble is retried by the policy, then reported as unavailable."""
    with pytest.raises(errors.Unavailable):
        await launching.fetch(
            f"127.0.0.1:{ports.free_port()}", "token", retry=retrying.Retry(2, 0.01)
        )


async def test_a_malformed_fetched_directive_is_refused_and_reported(
    tmp_path: pathlib.Path,
) -> None:
    """A directive whose fields disagree, fetched from the controller, is refused before
    anything else happens, and (checkpoint_remote) the refusal is reported."""
    scene = kit.make_scene(tmp_path, existing=True)
    credential = kit.worker_credential()
    double, addr, stop = await kit.start_recovery(credential)
    message = kit.launch_pb(scene.launch(directives.FRESH, remote=True))
    message.directive.checkpoint_id = "ckpt-7"
    double.launch = message
    before = scene.untouched()
    try:
        run = await kit.restore_once(
            scene.conf(CONTROL_ADDR=addr, WORKER_CREDENTIAL=credential), scene.worktree
        )
    finally:
        await stop()
    assert run.reason == "malformed directive: a fresh directive names a checkpoint"
    assert run.steps[0] == ("directive", "started")
    assert double.reports[0][-1].refusal.reason == run.reason
    assert scene.untouched() == before


async def test_no_launch_record_at_all_is_refused(tmp_path: pathlib.Path) -> None:
    """Neither a mounted file nor a controller: nothing to restore from, the launch stops."""
    scene = kit.make_scene(tmp_path, existing=True)
    run = await kit.restore_once(scene.conf(), scene.worktree)
    assert run.reason == "launch record unavailable"
