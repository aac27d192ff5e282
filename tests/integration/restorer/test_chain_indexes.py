"""Long chains through real stores: index objects written by the real Capturer, verified by the
Validator and read by a real sidecar's restore, in a local folder and in S3 (moto server).

Issue 21 (build points 1 and 4, long chains): with a capture about once a second a session has
thousands of small segments; a record names them through content-addressed index objects
(`chain_indexes`), so it grows with the logarithm of the captures. A restore reassembles the
session byte for byte; a missing index object is `missing_object`, a changed one
`corrupt_object`, a forged one `inventory_mismatch` (or `invalid_record` when it is no index
object), and nothing is written ("A checkpoint that does not verify stops the launch").
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from services.common import directives, settings
from services.common.checkpoints import (
    backends,
    chain_indexes,
    chains,
    index_reading,
    records,
    storing,
    validation,
)
from services.restorer import captures, capturing, transcripts
from services.restorer.harness import claude_code
from tests.integration.restorer import sessions
from tests.integration.restorer import sidecar_support as kit
from tests.support import s3 as s3_support
from tests.support import store_server

moto_endpoint = s3_support.moto_endpoint
s3_bucket = s3_support.s3_bucket
pytestmark = pytest.mark.usefixtures("usual_umask")
C = directives.Continuity
SCOPE = storing.StoreScope("example", "t-eng-2", 1)
CAPTURES = 2 * chain_indexes.LEAF_SEGMENTS + 2
"""Enough captures of one small append each for two level 1 runs merged into a level 2 run."""


class Place:
    """Where the fenced attempt captures: its settings, its environment for the sidecar, and
    how a test removes or changes one object, or adds bytes under their own hash."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.storage = settings.load_storage({f"AGENTIHOOKS_{k}": v for k, v in env.items()})
        self.remove: Callable[[str], None] = lambda sha256: None
        self.overwrite: Callable[[str], None] = lambda sha256: None
        self.uploaded = 0

    def open(self) -> storing.Backend:
        backend = backends.open_backend(
            self.env.get("CHECKPOINT_ROOT"),
            self.env.get("CHECKPOINT_BUCKET"),
            self.env.get("S3_ENDPOINT_URL"),
        )
        assert backend is not None
        return backend


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Place:
    """A local checkpoint folder, or a bucket on a real (moto) S3 server."""
    if request.param == "local":
        root = tmp_path / "checkpoints"
        found = Place({"CHECKPOINT_ROOT": str(root)})
        found.remove = lambda sha: kit.object_path(root, sha).unlink()

        def overwrite(sha: str) -> None:
            path = kit.object_path(root, sha)
            data = bytearray(path.read_bytes())
            data[-1] ^= 1
            path.write_bytes(bytes(data))

        found.overwrite = overwrite
        return found
    bucket: s3_support.S3Bucket = request.getfixturevalue("s3_bucket")
    found = Place({"CHECKPOINT_BUCKET": bucket.name, "S3_ENDPOINT_URL": bucket.endpoint_url})
    client = boto3.client("s3", endpoint_url=bucket.endpoint_url)

    def key(sha: str) -> str:
        return f"{SCOPE.prefix}/objects/{sha[:2]}/{sha}"

    def remove(sha: str) -> None:
        client.delete_object(Bucket=bucket.name, Key=key(sha))

    def overwrite_s3(sha: str) -> None:
        data = bytearray(client.get_object(Bucket=bucket.name, Key=key(sha))["Body"].read())
        data[-1] ^= 1
        client.put_object(Bucket=bucket.name, Key=key(sha), Body=bytes(data))

    found.remove, found.overwrite = remove, overwrite_s3
    return found


async def _long_session(scene: kit.Scene, place: Place) -> captures.Captured:
    """`CAPTURES` captures, each after one small append (as continuous capture leaves them)."""
    capturer = capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE), kit.fenced_attempt(scene), place.storage
    )
    captured = await capturer.capture()
    for step in range(CAPTURES - 1):
        sessions.grow(scene, 300, f"step {step}")
        captured = await capturer.capture()
    return captured


async def _record(place: Place, checkpoint_id: str) -> dict[str, Any]:
    opened = place.open()
    try:
        data = await opened.scoped(SCOPE).get_manifest(checkpoint_id)
    finally:
        await opened.aclose()
    assert data is not None
    return records.decode_manifest(data)[0]


async def _restore(scene: kit.Scene, place: Place, captured: captures.Captured, kind: C) -> kit.Run:
    launch = scene.launch(kit.directive_for(captured, kind))
    conf = scene.conf(LAUNCH_RECORD=scene.write_launch(launch), **place.env)
    return await kit.restore_once(conf, scene.worktree)


def _restored_session(scene: kit.Scene) -> pathlib.Path:
    folder = scene.home / ".claude" / "projects" / claude_code.project_key(scene.worktree)
    return folder / f"{kit.SESSION_ID}.jsonl"


def _session(record: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = record["native"]["files"][0]
    return item


@pytest.mark.parametrize("kind", [C.NATIVE, C.RECONSTRUCTED])
async def test_a_long_chain_is_kept_in_index_objects_and_restores_byte_for_byte(
    tmp_path: pathlib.Path, place: Place, kind: C
) -> None:
    """The record names one run per level and a few inline segments, not every segment; the
    Validator passes it; the replacement gets the session file (native) or every archived
    record (reconstructed) byte for byte."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, place)
    record = await _record(place, captured.checkpoint_id)
    item = _session(record)
    assert [r["level"] for r in item["index"]] == [2]
    assert len(item.get("segments", ())) == CAPTURES - 2 * chain_indexes.LEAF_SEGMENTS
    assert record["transcript"]["same_as"] == item["path"]
    run = await _restore(scene, place, captured, kind)
    assert run.last.HasField("ready"), run.events
    session = sessions.session_path(scene).read_bytes()
    if kind is C.NATIVE:
        assert _restored_session(scene).read_bytes() == session
    else:
        text = (scene.attempt_dir / "continuation.txt").read_text(encoding="utf-8")
        assert text == f"{transcripts.OPENING_LINE}\n{session.decode()}"


async def test_a_restarted_capturer_extends_the_indexed_chain(
    tmp_path: pathlib.Path, place: Place
) -> None:
    """A new Capturer (a restarted sidecar) finds the previous record in the store and keeps
    its runs: the next record names the same index objects, and verifies."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, place)
    before = _session(await _record(place, captured.checkpoint_id))
    sessions.grow(scene, 300, "after a restart")
    again = await capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE), kit.fenced_attempt(scene), place.storage
    ).capture()
    after = _session(await _record(place, again.checkpoint_id))
    assert after["index"] == before["index"]
    assert len(after["segments"]) == len(before.get("segments", ())) + 1
    opened = place.open()
    try:
        verdict = await validation.Validator(opened.scoped(SCOPE)).verify(
            validation.Expectation(again.checkpoint_id, 3)
        )
    finally:
        await opened.aclose()
    assert verdict.ok


async def _index_names(place: Place, record: dict[str, Any]) -> tuple[str, str, list[str]]:
    """The record's top index object, a level 1 one under it, and that one's segments."""
    ref = _session(record)["index"][0]
    opened = place.open()
    try:
        store = opened.scoped(SCOPE)
        chunks = [c async for c in store.read_object(ref["sha256"])]
        runs = chain_indexes.parse(b"".join(chunks), ref["level"])
        leaf = runs[0].sha256
        chunks = [c async for c in store.read_object(leaf)]
        segments = chain_indexes.parse(b"".join(chunks), 1)
    finally:
        await opened.aclose()
    return ref["sha256"], leaf, [s.sha256 for s in segments if isinstance(s, chains.Segment)]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("top index missing", "missing_object"),
        ("leaf index missing", "missing_object"),
        ("top index changed", "corrupt_object"),
        ("leaf index changed", "corrupt_object"),
        ("indexed segment missing", "missing_object"),
        ("indexed segment changed", "corrupt_object"),
    ],
)
async def test_a_damaged_index_or_indexed_segment_is_refused_and_nothing_is_written(
    tmp_path: pathlib.Path, place: Place, damage: str, reason: str
) -> None:
    """Every index object and every segment it lists is read and hashed through the granted
    store: the spec's reason, and the worktree and harness home stay as they were."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, place)
    top, leaf, segments = await _index_names(place, await _record(place, captured.checkpoint_id))
    target = {"top": top, "leaf": leaf, "indexed": segments[1]}[damage.split()[0]]
    (place.remove if damage.endswith("missing") else place.overwrite)(target)
    before = scene.untouched()
    run = await _restore(scene, place, captured, C.NATIVE)
    assert run.reason == reason
    assert scene.untouched() == before


async def _forge(place: Place, checkpoint_id: str, data: bytes, level: int) -> None:
    """Store `data` under its own hash (so it reads intact) and make the record's first run
    name it, its byte count kept."""
    opened = place.open()
    try:
        store = opened.scoped(SCOPE)
        sha256 = records.Blob.of(data).sha256

        async def one() -> Any:
            yield data

        await store.put_object(one(), sha256=sha256, size=len(data), max_size=len(data))

        def change(record: dict[str, Any]) -> None:
            _session(record)["index"][0].update(sha256=sha256, size=len(data), level=level)

        await kit.rewrite_record(store, checkpoint_id, change)
    finally:
        await opened.aclose()


async def test_a_forged_index_object_is_refused_and_nothing_is_written(
    tmp_path: pathlib.Path, place: Place
) -> None:
    """A forged level 1 index object listing the chain's own segments with two swapped (its
    sizes add up, every segment intact) is `inventory_mismatch`; an intact object that is no
    index object is `invalid_record`; in neither case is anything written."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, place)
    record = await _record(place, captured.checkpoint_id)
    opened = place.open()
    try:
        expanded = await index_reading.expand(opened.scoped(SCOPE), record)
    finally:
        await opened.aclose()
    assert not isinstance(expanded, index_reading.Reason)
    indexed = 2 * chain_indexes.LEAF_SEGMENTS
    listed = [chains.Segment(s["sha256"], s["size"]) for s in _session(dict(expanded))["segments"]]
    listed[0], listed[1] = listed[1], listed[0]
    await _forge(place, captured.checkpoint_id, chain_indexes.encode_segments(listed[:indexed]), 1)
    before = scene.untouched()
    run = await _restore(scene, place, captured, C.NATIVE)
    assert run.reason == "inventory_mismatch"
    assert scene.untouched() == before
    await _forge(place, captured.checkpoint_id, b"no index object, but intact", 1)
    run = await _restore(scene, place, captured, C.RECONSTRUCTED)
    assert run.reason == "invalid_record"
    assert scene.untouched() == before
    assert not (scene.attempt_dir / "continuation.txt").exists()


async def test_through_the_checkpoint_store_service_a_long_chain_restores(
    tmp_path: pathlib.Path, store_server: store_server.StoreServer
) -> None:
    """With `checkpoint_remote` (a new Capturer each time, finding the previous checkpoint by
    listing through the service) the index objects are uploaded and committed like any
    object, and the replacement restores the session byte for byte through the service."""
    credential = kit.worker_credential("e-42", 3)
    replacement_credential = kit.worker_credential()
    double, control, stop = await kit.start_recovery(credential)
    scene = kit.make_scene(tmp_path)
    try:
        for step in range(CAPTURES):
            if step:
                sessions.grow(scene, 300, f"remote {step}")
            captured, read_grant = await kit.capture_remote(
                scene, store_server, credential=credential, control=control
            )
        stored = kit.local_store(store_server.root)
        data = await stored.get_manifest(captured.checkpoint_id)
        assert data is not None
        assert "index" in _session(records.decode_manifest(data)[0])
        double.credential = replacement_credential
        launch = scene.launch(
            kit.directive_for(captured, C.NATIVE),
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
    assert _restored_session(scene).read_bytes() == sessions.session_path(scene).read_bytes()
