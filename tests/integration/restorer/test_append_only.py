"""Append-only checkpoints (schema version 3) through real stores, real git and a real sidecar.

Issue 21 (part 1): "a capture uploads only the bytes appended since the previous checkpoint of
the same attempt (found in the store, so a restarted sidecar or a one-shot `capture` also
uploads only the delta), and its record lists every segment. A file that was rewritten rather
than appended is stored whole again." A restore of a version 3 checkpoint gives byte-identical
session files, transcript and worktree (tests/integration/restorer/test_chained_restore.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from services.common import directives, settings
from services.common.checkpoints import backends, local, records, s3, storing
from services.restorer import captures, capturing
from tests.integration.restorer import sessions
from tests.integration.restorer import sidecar_support as kit
from tests.support import s3 as s3_support
from tests.support import store_server

moto_endpoint = s3_support.moto_endpoint
s3_bucket = s3_support.s3_bucket
REPO = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.usefixtures("usual_umask")


class Store:
    """Where the fenced attempt captures: its settings, the bytes its objects hold, and the
    bytes uploaded to it (each `put_object` call of the real backend, counted as it is made)."""

    def __init__(
        self,
        env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch,
        kind: Any,
        stored_bytes: Callable[[], int],
    ) -> None:
        self.env = env
        self.storage = settings.load_storage({f"AGENTIHOOKS_{k}": v for k, v in env.items()})
        self.stored_bytes = stored_bytes
        self.uploaded = 0
        original = kind.put_object

        async def counted(store: Any, chunks: Any, **kwargs: Any) -> Any:
            self.uploaded += kwargs["size"]
            return await original(store, chunks, **kwargs)

        monkeypatch.setattr(kind, "put_object", counted)

    async def record(self, checkpoint_id: str) -> dict[str, Any]:
        """The stored record of a checkpoint."""
        backend = backends.open_backend(
            self.env.get("CHECKPOINT_ROOT"),
            self.env.get("CHECKPOINT_BUCKET"),
            self.env.get("S3_ENDPOINT_URL"),
        )
        assert backend is not None
        try:
            scoped = backend.scoped(storing.StoreScope("example", "t-eng-2", 1))
            data = await scoped.get_manifest(checkpoint_id)
        finally:
            await backend.aclose()
        assert data is not None
        return records.decode_manifest(data)[0]


def _local(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    root = tmp / "checkpoints"

    def stored() -> int:
        return sum(
            p.stat().st_size for p in root.rglob("*") if p.is_file() and "objects" in p.parts
        )

    return Store({"CHECKPOINT_ROOT": str(root)}, monkeypatch, local.LocalStore, stored)


def _s3(bucket: s3_support.S3Bucket, monkeypatch: pytest.MonkeyPatch) -> Store:
    client = boto3.client("s3", endpoint_url=bucket.endpoint_url)

    def stored() -> int:
        listed = client.list_objects_v2(Bucket=bucket.name).get("Contents", [])
        return sum(int(o["Size"]) for o in listed if "/objects/" in o["Key"])

    env = {"CHECKPOINT_BUCKET": bucket.name, "S3_ENDPOINT_URL": bucket.endpoint_url}
    return Store(env, monkeypatch, s3.S3Store, stored)


@pytest.fixture(params=["local", "s3"])
def store(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Store:
    """A local checkpoint folder, or a bucket on a real (moto) S3 server."""
    if request.param == "local":
        return _local(tmp_path, monkeypatch)
    return _s3(request.getfixturevalue("s3_bucket"), monkeypatch)


def capturer_of(scene: kit.Scene, store: Store, **kwargs: Any) -> capturing.Capturer:
    """A new Capturer of the fenced attempt (a sidecar that starts, or starts again)."""
    return capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE),
        kit.fenced_attempt(scene),
        store.storage,
        **kwargs,
    )


async def test_a_capture_uploads_only_the_appended_bytes(
    tmp_path: pathlib.Path, store: Store
) -> None:
    """After the first checkpoint each capture uploads, and stores, exactly the bytes the
    session grew by: the transcript's new segment is the session's (the same bytes, one
    object); unchanged source, patch and untracked files are not sent again. Each record lists
    the whole chain."""
    scene = kit.make_scene(tmp_path)
    capturer = capturer_of(scene, store)
    await capturer.capture()
    for round_ in range(3):
        uploaded, stored = store.uploaded, store.stored_bytes()
        appended = sessions.grow(scene, 64 * 1024, f"round {round_}")
        captured = await capturer.capture()
        assert store.uploaded - uploaded == appended
        assert store.stored_bytes() - stored == appended
    record = await store.record(captured.checkpoint_id)
    assert record["schema_version"] == 3
    session = record["native"]["files"][0]
    assert len(session["segments"]) == 4
    assert record["transcript"]["same_as"] == session["path"]  # its segments, listed once
    assert session["size"] == sessions.session_path(scene).stat().st_size


async def test_a_rewritten_session_is_stored_whole_again(
    tmp_path: pathlib.Path, store: Store
) -> None:
    """A session whose first bytes changed (compacted) is not an append: its chain starts
    anew and holds the whole new file, none of the old segments."""
    scene = kit.make_scene(tmp_path)
    capturer = capturer_of(scene, store)
    sessions.grow(scene, 32 * 1024)
    first = await store.record((await capturer.capture()).checkpoint_id)
    compacted = json.dumps({"type": "summary", "text": "compacted " * 30}) + "\n"
    sessions.session_path(scene).write_text(compacted + json.dumps({"type": "user"}) + "\n")
    uploaded = store.uploaded
    second = await store.record((await capturer.capture()).checkpoint_id)
    size = sessions.session_path(scene).stat().st_size
    assert store.uploaded - uploaded == size
    old = {s["sha256"] for s in first["native"]["files"][0]["segments"]}
    new = second["native"]["files"][0]
    assert new["size"] == size and not old & {s["sha256"] for s in new["segments"]}


async def test_a_restarted_capturer_still_uploads_only_the_delta(
    tmp_path: pathlib.Path, store: Store
) -> None:
    """A new Capturer (a restarted sidecar) finds the attempt's previous checkpoint in the
    store and extends its chains: it uploads the appended bytes, nothing else."""
    scene = kit.make_scene(tmp_path)
    await capturer_of(scene, store).capture()
    appended = sessions.grow(scene, 48 * 1024)
    uploaded = store.uploaded
    captured = await capturer_of(scene, store).capture()
    assert captured.written and store.uploaded - uploaded == appended
    record = await store.record(captured.checkpoint_id)
    assert len(record["native"]["files"][0]["segments"]) == 2


async def test_a_one_shot_capture_process_uploads_only_the_delta(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agentihooks-restorer capture` in a new process: the checkpoint folder grows by the
    appended bytes only."""
    store = _local(tmp_path, monkeypatch)
    scene = kit.make_scene(tmp_path)
    await capturer_of(scene, store).capture()
    appended = sessions.grow(scene, 40 * 1024)
    stored = store.stored_bytes()
    fenced = scene.launch(directives.FRESH, scope=kit.SCOPE)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'services' / 'proto'}",
        "AGENTIHOOKS_LAUNCH_RECORD": scene.write_launch(fenced, "fenced.json"),
        "AGENTIHOOKS_CHECKPOINT_ROOT": store.env["CHECKPOINT_ROOT"],
        "AGENTIHOOKS_HARNESS_HOME": str(scene.fenced_home),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.restorer.main",
        "capture",
        "--worktree",
        str(scene.project.worktree),
        env=env,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert json.loads(out)["state"] == "captured"
    assert store.stored_bytes() - stored == appended


async def test_large_appends_are_split_at_the_segment_limit(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segment size is bounded by the store's object size limit: a large append is several
    segments, none larger than the limit, that add up to the file."""
    store = _local(tmp_path, monkeypatch)
    store.storage = settings.load_storage(
        {
            "AGENTIHOOKS_CHECKPOINT_ROOT": store.env["CHECKPOINT_ROOT"],
            "AGENTIHOOKS_MAX_OBJECT_BYTES": str(16 * 1024),
        }
    )
    scene = kit.make_scene(tmp_path)
    capturer = capturer_of(scene, store)
    await capturer.capture()
    sessions.grow(scene, 70 * 1024)
    record = await store.record((await capturer.capture()).checkpoint_id)
    sizes = [s["size"] for s in record["native"]["files"][0]["segments"]]
    assert len(sizes) >= 6 and max(sizes) <= 16 * 1024
    assert sum(sizes) == record["transcript"]["size"] == sessions.session_path(scene).stat().st_size


async def test_through_the_checkpoint_store_service_only_the_delta_goes_up(
    tmp_path: pathlib.Path, store_server: store_server.StoreServer
) -> None:
    """With `checkpoint_remote` each capture goes through the checkpoint-store service; a new
    capture (a new Capturer each time: the previous checkpoint is found by listing through
    the service) stores only the appended bytes, and the replacement restores the chained
    session byte for byte through the service."""
    credential = kit.worker_credential("e-42", 3)
    replacement_credential = kit.worker_credential()
    double, control, stop = await kit.start_recovery(credential)
    scene = kit.make_scene(tmp_path)

    def stored() -> int:
        found = store_server.root.rglob("*")
        return sum(p.stat().st_size for p in found if p.is_file() and "objects" in p.parts)

    try:
        captured, _ = await kit.capture_remote(
            scene, store_server, credential=credential, control=control
        )
        for round_ in range(2):
            before = stored()
            appended = sessions.grow(scene, 24 * 1024, f"remote {round_}")
            captured, read_grant = await kit.capture_remote(
                scene, store_server, credential=credential, control=control
            )
            assert stored() - before == appended
        double.credential = replacement_credential
        launch = scene.launch(
            kit.directive_for(captured, directives.Continuity.NATIVE),
            remote=True,
            store_addr=store_server.addr,
            restore_grant=read_grant,
        )
        conf = scene.conf(
            LAUNCH_RECORD=scene.write_launch(launch),
            CONTROL_ADDR=control,
            WORKER_CREDENTIAL=replacement_credential,
        )
        run = await kit.restore_once(conf, scene.worktree)
    finally:
        await stop()
    assert run.last.HasField("ready"), run.events
    restored = next((scene.home / ".claude" / "projects").rglob("*.jsonl"))
    assert restored.read_bytes() == sessions.session_path(scene).read_bytes()


async def test_a_damaged_chain_is_not_extended_twice(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture verifies what it wrote: when the chain it extended holds a segment the store
    damaged, the next full verification refuses that checkpoint (`corrupt_object`), and the
    next capture stores the session whole again as a new chain, which verifies. (Here every
    capture verifies in full, `full_verify_s=0`; between full verifications a capturer reads
    back only what it wrote: test_capture_verification.py.)"""
    store = _local(tmp_path, monkeypatch)
    scene = kit.make_scene(tmp_path)
    capturer = capturer_of(scene, store, full_verify_s=0)
    first = await store.record((await capturer.capture()).checkpoint_id)
    damaged = first["native"]["files"][0]["segments"][0]["sha256"]
    path = kit.object_path(pathlib.Path(store.env["CHECKPOINT_ROOT"]), damaged)
    path.write_bytes(b"x" * path.stat().st_size)
    sessions.grow(scene, 8 * 1024)
    with pytest.raises(captures.CaptureError, match="corrupt_object"):
        await capturer.capture()
    sessions.grow(scene, 1024)
    again = await store.record((await capturer.capture()).checkpoint_id)
    segments = again["native"]["files"][0]["segments"]
    assert len(segments) == 1 and segments[0]["size"] == sessions.session_path(scene).stat().st_size
