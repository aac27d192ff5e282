"""The store granted to this attempt: S3 (moto server) and the checkpoint-store service.

Spec (Configuration): `AGENTIHOOKS_CHECKPOINT_BUCKET` lists and fetches checkpoints from the
object storage bucket and takes precedence over a root folder; with `checkpoint_remote: true`
"the worker reads and writes checkpoints through the controller's scoped upload route and
reports its restore outcome". Each happy path captures with the real Capturer and restores
through a real sidecar; the remote one also reports to a Recovery double over real gRPC.
"""

from __future__ import annotations

import pathlib

import pytest

from services.common import directives, settings, tokens
from tests.integration.restorer import sidecar_support as kit
from tests.support import git_repos, store_server
from tests.support import s3 as s3_support

json_logs = kit.json_logs  # the fixture, visible to this module

C = directives.Continuity
# The moto S3 fixtures (tests/support/s3.py), made visible to this module.
moto_endpoint = s3_support.moto_endpoint
s3_bucket = s3_support.s3_bucket
pytestmark = pytest.mark.usefixtures("usual_umask")


def _s3_env(bucket: s3_support.S3Bucket) -> dict[str, str]:
    return {
        "CHECKPOINT_BUCKET": bucket.name,
        "S3_ENDPOINT_URL": bucket.endpoint_url,
    }


@pytest.mark.parametrize("kind", [C.NATIVE, C.RECONSTRUCTED])
async def test_s3_round_trip(
    tmp_path: pathlib.Path, s3_bucket: s3_support.S3Bucket, kind: directives.Continuity
) -> None:
    """A checkpoint captured into an S3 bucket restores from it (native and reconstructed);
    the bucket wins over a root folder that is also set (and stays empty)."""
    scene = kit.make_scene(tmp_path)
    root = tmp_path / "unused-root"
    env = {**_s3_env(s3_bucket), "CHECKPOINT_ROOT": str(root)}
    storage = settings.load_storage({f"AGENTIHOOKS_{k}": v for k, v in env.items()})
    captured = await kit.capture(scene, storage)
    stored = s3_bucket.keys()
    assert any(key.endswith(f"{captured.checkpoint_id}.json") for key in stored)
    launch = scene.launch(kit.directive_for(captured, kind))
    run = await kit.restore_once(
        scene.conf(LAUNCH_RECORD=scene.write_launch(launch), **env), scene.worktree
    )
    assert run.last.HasField("ready")
    assert git_repos.snapshot(scene.worktree) == git_repos.snapshot(
        scene.project.worktree, git_repos.IGNORED
    )
    assert not root.exists()


async def test_s3_corrupt_object_is_refused(
    tmp_path: pathlib.Path, s3_bucket: s3_support.S3Bucket
) -> None:
    """The Validator reads every object through the S3 store too: a changed object is
    `corrupt_object` and the harness home and worktree stay as they were."""
    import boto3

    scene = kit.make_scene(tmp_path)
    env = _s3_env(s3_bucket)
    storage = settings.load_storage({f"AGENTIHOOKS_{k}": v for k, v in env.items()})
    captured = await kit.capture(scene, storage)
    client = boto3.client("s3", endpoint_url=s3_bucket.endpoint_url)
    stored = s3_bucket.keys()
    keys = [k for k in stored if "/objects/" in k]
    body = client.get_object(Bucket=s3_bucket.name, Key=keys[0])["Body"].read()
    client.put_object(Bucket=s3_bucket.name, Key=keys[0], Body=b"y" * len(body))
    before = scene.untouched()
    launch = scene.launch(kit.directive_for(captured, C.NATIVE))
    run = await kit.restore_once(
        scene.conf(LAUNCH_RECORD=scene.write_launch(launch), **env), scene.worktree
    )
    assert run.reason == "corrupt_object"
    assert scene.untouched() == before


@pytest.mark.parametrize("kind", [C.NATIVE, C.RECONSTRUCTED])
async def test_checkpoint_store_service_round_trip_reports_the_outcome(
    tmp_path: pathlib.Path,
    store_server: store_server.StoreServer,
    json_logs: kit.JsonLogs,
    kind: directives.Continuity,
) -> None:
    """`checkpoint_remote: true`: the fenced attempt captures through the checkpoint-store
    service (objects first, record last, then verified) and reports its session id and archive
    watermark with ReportCapture; the replacement fetches its launch record with its own worker
    credential (GetLaunchRecord), restores through the service, reports progress then one
    outcome with ReportRestore, and logs exactly one restore_verified line."""
    fenced_credential = kit.worker_credential("e-42", 3)
    double, control, stop = await kit.start_recovery(fenced_credential)
    try:
        scene = kit.make_scene(tmp_path)
        captured, read_grant = await kit.capture_remote(
            scene, store_server, credential=fenced_credential, control=control
        )
        assert [
            (c.native_session_id, c.archive_watermark, c.checkpoint_id) for c in double.captures
        ] == [(kit.SESSION_ID, 3, captured.checkpoint_id)]
        assert list((store_server.root / "example" / "t-eng-2" / "1" / "records").iterdir())

        replacement_credential = kit.worker_credential()
        double.credential = replacement_credential
        launch = scene.launch(
            kit.directive_for(captured, kind),
            remote=True,
            store_addr=store_server.addr,
            restore_grant=read_grant,
        )
        double.launch = kit.launch_pb(launch)
        conf = scene.conf(CONTROL_ADDR=control, WORKER_CREDENTIAL=replacement_credential)
        run = await kit.restore_once(conf, scene.worktree)
    finally:
        await stop()

    assert run.last.HasField("ready")
    assert ("report", "done") in run.steps
    assert double.presented[-2:] == [replacement_credential, replacement_credential]
    (report,) = double.reports
    progress = [(r.progress.step, r.progress.status) for r in report[:-1]]
    assert all(r.HasField("progress") for r in report[:-1])
    assert ("verify", "done") in progress and ("report", "started") in progress
    outcome = report[-1].outcome
    assert outcome.execution_id == "e-43"
    assert outcome.checkpoint_id == captured.checkpoint_id
    assert outcome.watermark == 3
    assert outcome.session_id == (kit.SESSION_ID if kind is C.NATIVE else "")
    assert outcome.recovery == (1 if kind is C.NATIVE else 2)

    (line,) = json_logs.events("restore_verified")
    assert line == {
        "event": "restore_verified",
        "execution_id": "e-43",
        "recovery": kind.value,
        "checkpoint_id": captured.checkpoint_id,
        "watermark": 3,
    }
    text = json_logs.text()
    for secret in (replacement_credential, fenced_credential, read_grant, kit.CONVERSATION_SECRET):
        assert secret not in text
    assert "separator" not in text
    assert git_repos.snapshot(scene.worktree) == git_repos.snapshot(
        scene.project.worktree, git_repos.IGNORED
    )


async def test_a_revoked_restore_grant_stops_the_launch(
    tmp_path: pathlib.Path, store_server: store_server.StoreServer
) -> None:
    """A fenced worker keeps no grant: a restore grant that was revoked reads nothing, and
    the launch stops (the store is unavailable to it) with nothing written."""
    credential = kit.worker_credential()
    double, control, stop = await kit.start_recovery(credential)
    try:
        scene = kit.make_scene(tmp_path)
        captured, _ = await kit.capture_remote(
            scene, store_server, credential=credential, control=control
        )
        grant, read_grant = store_server.grant(tokens.Right.READ)
        await store_server.revoked.revoke(grant.swarm, grant.grant_id, grant.expires_at)
        launch = scene.launch(
            kit.directive_for(captured, C.NATIVE),
            remote=True,
            store_addr=store_server.addr,
            restore_grant=read_grant,
        )
        before = scene.untouched()
        conf = scene.conf(
            LAUNCH_RECORD=scene.write_launch(launch),
            CONTROL_ADDR=control,
            WORKER_CREDENTIAL=credential,
        )
        run = await kit.restore_once(conf, scene.worktree)
    finally:
        await stop()
    assert run.reason == "checkpoint store unavailable"
    assert scene.untouched() == before
    assert double.reports[-1][-1].refusal.reason == "checkpoint store unavailable"
