"""Validator.verify of chained checkpoints through each real backend and each way it reads.

Issue 21: "`Validator.verify` checks every segment and the chain with the spec's reason codes:
a missing segment is `missing_object`, a changed one `corrupt_object`, a chain that disagrees
with the inventory `inventory_mismatch`." A local folder answers a small checkpoint in a few
worker-thread calls and a large one chain by chain; S3 is read object by object. Each must
give the same verdict for the same damage.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from services.common import directives, settings
from services.common.checkpoints import backends, records, storing, validation
from services.restorer import capturing
from tests.integration.restorer import sessions
from tests.integration.restorer import sidecar_support as kit
from tests.support import s3 as s3_support

moto_endpoint = s3_support.moto_endpoint
s3_bucket = s3_support.s3_bucket
pytestmark = pytest.mark.usefixtures("usual_umask")
SCOPE = storing.StoreScope("example", "t-eng-2", 1)


class Backend:
    """Where the checkpoint is, and how a test damages one of its objects."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.storage = settings.load_storage({f"AGENTIHOOKS_{k}": v for k, v in env.items()})
        self.remove: Callable[[str], None] = lambda sha256: None
        self.overwrite: Callable[[str], None] = lambda sha256: None

    def open(self) -> storing.Backend:
        backend = backends.open_backend(
            self.env.get("CHECKPOINT_ROOT"),
            self.env.get("CHECKPOINT_BUCKET"),
            self.env.get("S3_ENDPOINT_URL"),
        )
        assert backend is not None
        return backend


@pytest.fixture(params=["local-small", "local-large", "s3"])
def backend(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Backend:
    """A local folder read in batches (small checkpoint) or chain by chain (large), or S3."""
    if request.param.startswith("local"):
        root = tmp_path / "checkpoints"
        found = Backend({"CHECKPOINT_ROOT": str(root)})
        found.remove = lambda sha: kit.object_path(root, sha).unlink()

        def overwrite(sha: str) -> None:
            path = kit.object_path(root, sha)
            path.write_bytes(b"x" * path.stat().st_size)

        found.overwrite = overwrite
        if request.param == "local-large":
            monkeypatch.setattr(validation, "BATCH_BYTES", -1)
        return found
    bucket: s3_support.S3Bucket = request.getfixturevalue("s3_bucket")
    found = Backend({"CHECKPOINT_BUCKET": bucket.name, "S3_ENDPOINT_URL": bucket.endpoint_url})
    client = boto3.client("s3", endpoint_url=bucket.endpoint_url)

    def key(sha: str) -> str:
        return f"{SCOPE.prefix}/objects/{sha[:2]}/{sha}"

    def remove(sha: str) -> None:
        client.delete_object(Bucket=bucket.name, Key=key(sha))

    def overwrite_s3(sha: str) -> None:
        size = len(client.get_object(Bucket=bucket.name, Key=key(sha))["Body"].read())
        client.put_object(Bucket=bucket.name, Key=key(sha), Body=b"x" * size)

    found.remove, found.overwrite = remove, overwrite_s3
    return found


async def _captured(tmp_path: pathlib.Path, backend: Backend) -> str:
    """Four captures of a growing session: a chain of four segments."""
    scene = kit.make_scene(tmp_path)
    capturer = capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE), kit.fenced_attempt(scene), backend.storage
    )
    await capturer.capture()
    for step in range(3):
        sessions.grow(scene, 6000, f"step {step}")
        captured = await capturer.capture()
    return captured.checkpoint_id


def _session(record: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = record["native"]["files"][0]
    return item


def _swap(record: dict[str, Any]) -> None:
    segments = _session(record)["segments"]
    segments[1], segments[2] = segments[2], segments[1]


def _rotate(record: dict[str, Any]) -> None:
    segments = _session(record)["segments"]
    segments.append(segments.pop(0))


def _drop(record: dict[str, Any]) -> None:
    del _session(record)["segments"][1]


def _oversize(record: dict[str, Any]) -> None:
    _session(record)["segments"][0]["size"] = 64 * 1024 * 1024 + 1


REWRITES = {
    "swapped": (_swap, "inventory_mismatch"),
    "reordered": (_rotate, "inventory_mismatch"),
    "dropped": (_drop, "inventory_mismatch"),
    "over-the-size-limit": (_oversize, "invalid_record"),
}


@pytest.mark.parametrize("damage", [*sorted(REWRITES), "missing", "changed", "intact"])
async def test_each_backend_gives_the_same_verdict(
    tmp_path: pathlib.Path, backend: Backend, damage: str
) -> None:
    """The same hostile chain or damaged segment is refused with the same reason whichever
    backend holds it and however it is read; an intact chain verifies."""
    checkpoint_id = await _captured(tmp_path, backend)
    opened = backend.open()
    try:
        store = opened.scoped(SCOPE)
        data = await store.get_manifest(checkpoint_id)
        assert data is not None
        segment = _session(records.decode_manifest(data)[0])["segments"][2]["sha256"]
        expected = "ok"
        if damage in REWRITES:
            change, expected = REWRITES[damage]
            await kit.rewrite_record(store, checkpoint_id, change)
        elif damage == "missing":
            backend.remove(segment)
            expected = "missing_object"
        elif damage == "changed":
            backend.overwrite(segment)
            expected = "corrupt_object"
        verdict = await validation.Validator(store).verify(validation.Expectation(checkpoint_id, 3))
    finally:
        await opened.aclose()
    assert (verdict.reason.value if verdict.reason else "ok") == expected
