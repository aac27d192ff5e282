"""One contract for every checkpoint backend: the local folder and S3 (moto) through aioboto3.

"Backends: a local folder (AGENTIHOOKS_CHECKPOINT_ROOT, absolute only) and S3
(AGENTIHOOKS_CHECKPOINT_BUCKET ...); the bucket wins when both are set. The same contract test
suite runs against both."
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import pathlib
from collections.abc import AsyncIterator, Callable

import boto3
import pytest

from services.common.checkpoints import backends, local, reasons, records, s3, storing, validation
from tests.support import s3 as s3_support

SCOPE = storing.StoreScope("example", "t-eng-2", 1)
LIMIT = 64 * 1024 * 1024
BIG = 2 * s3.PART_SIZE + 12345  # three multipart parts on S3


@dataclasses.dataclass
class Harness:
    """A backend under test and a side door to its raw storage."""

    kind: str
    backend: storing.Backend
    stored: Callable[[], list[str]]
    plant: Callable[[str, bytes], None]
    raw_root: pathlib.Path | None = None


@pytest.fixture(params=["local", "s3"])
async def harness(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Harness]:
    """The backend of the parameter's kind, empty, closed after the test."""
    if request.param == "local":
        root = tmp_path / "checkpoints"

        def stored() -> list[str]:
            if not root.exists():
                return []
            return sorted(
                str(pathlib.Path(d, f).relative_to(root)) for d, _, fs in os.walk(root) for f in fs
            )

        def plant(key: str, data: bytes) -> None:
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        made = Harness("local", local.LocalFolderBackend(root), stored, plant, root)
    else:
        bucket: s3_support.S3Bucket = request.getfixturevalue("s3_bucket")
        raw = boto3.client(
            "s3",
            endpoint_url=bucket.endpoint_url,
            aws_access_key_id=s3_support.ACCESS_KEY,
            aws_secret_access_key=s3_support.SECRET_KEY,
            region_name=s3_support.REGION,
        )
        backend = s3.S3Backend(bucket.name, bucket.endpoint_url, session=bucket.session())

        def plant_s3(key: str, data: bytes) -> None:
            raw.put_object(Bucket=bucket.name, Key=key, Body=data)

        made = Harness("s3", backend, lambda: sorted(bucket.keys()), plant_s3)
    try:
        yield made
    finally:
        await made.backend.aclose()


async def chunks_of(data: bytes, size: int = 1024 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def put(store: storing.ArtifactStore, data: bytes) -> storing.ObjectRef:
    digest = hashlib.sha256(data).hexdigest()
    return await store.put_object(chunks_of(data), sha256=digest, size=len(data), max_size=LIMIT)


async def read_all(store: storing.ArtifactStore, sha256: str, chunk_size: int) -> bytes:
    out = bytearray()
    async for chunk in store.read_object(sha256, chunk_size=chunk_size):
        assert 0 < len(chunk) <= chunk_size
        out += chunk
    return bytes(out)


@pytest.mark.parametrize("size", [0, 1000, BIG], ids=["empty", "small", "multipart"])
async def test_put_then_exists_digest_and_read(harness: Harness, size: int) -> None:
    """Objects are content-addressed by SHA-256: what is put is what is read and digested."""
    store = harness.backend.scoped(SCOPE)
    data = os.urandom(size)
    digest = hashlib.sha256(data).hexdigest()
    assert not await store.object_exists(digest)
    assert await store.digest_object(digest) is None
    ref = await put(store, data)
    assert ref == storing.ObjectRef(digest, size, existed=False)
    assert await store.object_exists(digest)
    assert await store.digest_object(digest) == (digest, size)
    assert await read_all(store, digest, 3 * 1024 * 1024) == data
    assert harness.stored() == [f"{SCOPE.prefix}/objects/{digest[:2]}/{digest}"]


async def test_reading_an_absent_object_raises_object_missing(harness: Harness) -> None:
    """read_object raises ObjectMissing when the object is absent."""
    store = harness.backend.scoped(SCOPE)
    with pytest.raises(storing.ObjectMissing):
        await read_all(store, "0" * 64, 1024)


@pytest.mark.parametrize("size", [1000, BIG], ids=["small", "multipart"])
async def test_a_wrong_hash_keeps_nothing(harness: Harness, size: int) -> None:
    """A wrong hash is refused and nothing is kept, not even a temporary file or part."""
    store = harness.backend.scoped(SCOPE)
    data = os.urandom(size)
    claimed = hashlib.sha256(data + b"!").hexdigest()
    with pytest.raises(storing.ObjectCorrupt):
        await store.put_object(chunks_of(data), sha256=claimed, size=size, max_size=LIMIT)
    assert not await store.object_exists(claimed)
    assert harness.stored() == []
    assert _folders(harness) == []


@pytest.mark.parametrize("delta", [-1, 1], ids=["short", "long"])
async def test_a_wrong_size_keeps_nothing(harness: Harness, delta: int) -> None:
    """A stream shorter or longer than its declared size is refused and nothing is kept."""
    store = harness.backend.scoped(SCOPE)
    data = os.urandom(BIG)
    digest = hashlib.sha256(data).hexdigest()
    with pytest.raises(storing.ObjectCorrupt):
        await store.put_object(chunks_of(data), sha256=digest, size=BIG + delta, max_size=LIMIT)
    assert harness.stored() == []
    assert _folders(harness) == []


def _folders(harness: Harness) -> list[str]:
    """Folders a local store holds below its root (an object store has none)."""
    if harness.raw_root is None or not harness.raw_root.exists():
        return []
    return sorted(str(p.relative_to(harness.raw_root)) for p in harness.raw_root.rglob("*"))


async def test_a_refused_upload_leaves_folders_other_uploads_made(harness: Harness) -> None:
    """Only the folders a refused upload created go: an object already stored under the same
    prefix keeps its folder, and the store keeps working."""
    store = harness.backend.scoped(SCOPE)
    kept = await put(store, b"kept object")
    data = b"refused object"
    with pytest.raises(storing.ObjectCorrupt):
        await store.put_object(chunks_of(data), sha256=kept.sha256, size=len(data), max_size=LIMIT)
    assert harness.stored() == [f"{SCOPE.prefix}/objects/{kept.sha256[:2]}/{kept.sha256}"]
    assert await read_all(store, kept.sha256, 1024) == b"kept object"


async def test_an_oversize_object_is_refused_before_reading(harness: Harness) -> None:
    """An object over the size limit is refused and nothing is kept or even read."""
    store = harness.backend.scoped(SCOPE)
    consumed = False

    async def stream() -> AsyncIterator[bytes]:
        nonlocal consumed
        consumed = True
        yield b"x" * 10

    digest = hashlib.sha256(b"x" * 10).hexdigest()
    with pytest.raises(storing.ObjectTooLarge):
        await store.put_object(stream(), sha256=digest, size=10, max_size=9)
    assert not consumed
    assert harness.stored() == []


async def test_an_interrupted_upload_keeps_nothing(harness: Harness) -> None:
    """An upload whose stream fails midway leaves nothing behind."""
    store = harness.backend.scoped(SCOPE)
    data = os.urandom(BIG)

    async def failing() -> AsyncIterator[bytes]:
        async for chunk in chunks_of(data[: s3.PART_SIZE + 1024]):
            yield chunk
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        await store.put_object(
            failing(), sha256=hashlib.sha256(data).hexdigest(), size=BIG, max_size=LIMIT
        )
    assert harness.stored() == []


async def test_an_existing_object_is_not_rewritten(harness: Harness) -> None:
    """An object already stored is not rewritten; the upload still checks its stream."""
    store = harness.backend.scoped(SCOPE)
    data = b"the real content"
    digest = hashlib.sha256(data).hexdigest()
    # Whatever sits under the name stays: the store never replaces an existing object.
    harness.plant(f"{SCOPE.prefix}/objects/{digest[:2]}/{digest}", b"planted")
    ref = await put(store, data)
    assert ref == storing.ObjectRef(digest, len(data), existed=True)
    assert await store.digest_object(digest) == (hashlib.sha256(b"planted").hexdigest(), 7)
    with pytest.raises(storing.ObjectCorrupt):
        await store.put_object(chunks_of(b"lies"), sha256=digest, size=4, max_size=LIMIT)


@pytest.mark.parametrize("size", [1000, BIG], ids=["small", "multipart"])
async def test_an_object_stored_meanwhile_is_not_replaced(harness: Harness, size: int) -> None:
    """When another writer stores the object while an upload streams, neither replaces it."""
    store = harness.backend.scoped(SCOPE)
    data = os.urandom(size)
    digest = hashlib.sha256(data).hexdigest()

    async def racing() -> AsyncIterator[bytes]:
        async for chunk in chunks_of(data):
            yield chunk
        harness.plant(f"{SCOPE.prefix}/objects/{digest[:2]}/{digest}", b"first")

    ref = await store.put_object(racing(), sha256=digest, size=size, max_size=LIMIT)
    assert ref.existed
    assert await store.digest_object(digest) == (hashlib.sha256(b"first").hexdigest(), 5)
    assert harness.stored() == [f"{SCOPE.prefix}/objects/{digest[:2]}/{digest}"]


async def test_manifests_are_written_atomically(harness: Harness) -> None:
    """A record is one file written whole: a reader sees the old or the new one, never half."""
    store = harness.backend.scoped(SCOPE)
    assert await store.get_manifest("ckpt-7") is None
    old, new = b"{" + b"a" * 2_000_000 + b"}", b"{" + b"b" * 2_000_000 + b"}"
    await store.put_manifest("ckpt-7", old)
    assert await store.get_manifest("ckpt-7") == old

    async def writer() -> None:
        for index in range(6):
            await store.put_manifest("ckpt-7", new if index % 2 == 0 else old)

    async def reader() -> set[bytes | None]:
        seen = set()
        for _ in range(12):
            seen.add(await store.get_manifest("ckpt-7"))
        return seen

    _, seen = await asyncio.gather(writer(), reader())
    assert seen <= {old, new}
    assert await store.get_manifest("ckpt-7") == old
    assert harness.stored() == [f"{SCOPE.prefix}/records/ckpt-7.json"]


async def test_an_oversize_manifest_is_refused(harness: Harness) -> None:
    """A manifest over the limit is neither written nor read into memory."""
    store = harness.backend.scoped(SCOPE)
    with pytest.raises(storing.ObjectTooLarge):
        await store.put_manifest("ckpt-7", b"x" * (storing.MAX_MANIFEST_BYTES + 1))
    assert harness.stored() == []
    harness.plant(f"{SCOPE.prefix}/records/ckpt-8.json", b"x" * (storing.MAX_MANIFEST_BYTES + 1))
    with pytest.raises(storing.ObjectTooLarge):
        await store.get_manifest("ckpt-8")


async def test_checkpoint_ids_are_listed(harness: Harness) -> None:
    """The store lists the ids of its manifests, sorted, and nothing else."""
    store = harness.backend.scoped(SCOPE)
    assert await store.list_checkpoint_ids() == []
    for checkpoint_id in ("ckpt-9", "ckpt-10", "a.b_c-d"):
        await store.put_manifest(checkpoint_id, b"{}")
    harness.plant(f"{SCOPE.prefix}/records/.tmp-123.json", b"{}")
    harness.plant(f"{SCOPE.prefix}/records/notes.txt", b"{}")
    assert await store.list_checkpoint_ids() == ["a.b_c-d", "ckpt-10", "ckpt-9"]


PATH_LIKE = ["../x", "a/b", "/etc/passwd", "..", ".hidden", "x\n", "", "a" * 129]


async def test_path_like_names_are_refused_and_nothing_is_created(harness: Harness) -> None:
    """A path-like object name or checkpoint id raises InvalidName and touches no storage."""
    store = harness.backend.scoped(SCOPE)
    sha_like = ["../" + "a" * 61, "A" * 64, "a" * 63, "a" * 64 + "/x", "a" * 32 + "/" + "a" * 31]
    for name in sha_like:
        with pytest.raises(storing.InvalidName):
            await store.put_object(chunks_of(b"x"), sha256=name, size=1, max_size=LIMIT)
        with pytest.raises(storing.InvalidName):
            await store.object_exists(name)
        with pytest.raises(storing.InvalidName):
            await store.digest_object(name)
        with pytest.raises(storing.InvalidName):
            store.read_object(name)
    for name in PATH_LIKE:
        with pytest.raises(storing.InvalidName):
            await store.put_manifest(name, b"{}")
        with pytest.raises(storing.InvalidName):
            await store.get_manifest(name)
    assert harness.stored() == []
    if harness.raw_root is not None:
        assert not harness.raw_root.exists()


async def test_scopes_are_isolated(harness: Harness) -> None:
    """The grant scopes storage paths: another task or task generation sees nothing."""
    store = harness.backend.scoped(SCOPE)
    ref = await put(store, b"shared bytes")
    await store.put_manifest("ckpt-7", b"{}")
    for other in (
        storing.StoreScope("example", "t-eng-2", 2),
        storing.StoreScope("example", "t-eng-3", 1),
        storing.StoreScope("other", "t-eng-2", 1),
    ):
        neighbour = harness.backend.scoped(other)
        assert neighbour.scope == other
        assert not await neighbour.object_exists(ref.sha256)
        assert await neighbour.digest_object(ref.sha256) is None
        assert await neighbour.get_manifest("ckpt-7") is None
        assert await neighbour.list_checkpoint_ids() == []


async def test_the_validator_verifies_through_the_backend(harness: Harness) -> None:
    """Validator.verify reads every object through the attempt's granted store."""
    store = harness.backend.scoped(SCOPE)
    transcript, session = b'{"n":1}\n' * 1000, os.urandom(BIG)
    for data in (transcript, session):
        await put(store, data)
    record = records.new_record(
        checkpoint_id="ckpt-7",
        sequence=7,
        authority=records.Authority("example", "eng-2", "t-eng-2", 1, "e-42", 3),
        project="app",
        compatibility_key="registry.local/agent-worker:1.4.2",
        transcript=records.Blob.of(transcript),
        watermark=1000,
        native=records.Native(
            "claude_code",
            "2.1.3",
            "s-1",
            (records.NativeFile("s.jsonl", records.Blob.of(session)),),
        ),
    )
    await store.put_manifest("ckpt-7", records.encode_manifest(record))
    validator = validation.Validator(store)
    expectation = validation.Expectation("ckpt-7", 3)
    assert (await validator.verify(expectation)).ok
    listed = await validation.list_checkpoints(
        store, "registry.local/agent-worker:1.4.2", 3, verified_only=True
    )
    assert [s.checkpoint_id for s in listed] == ["ckpt-7"]

    digest = hashlib.sha256(session).hexdigest()
    harness.plant(f"{SCOPE.prefix}/objects/{digest[:2]}/{digest}", session[:-1] + b"\x00")
    verdict = await validator.verify(expectation)
    assert verdict.reason is reasons.Reason.CORRUPT_OBJECT


def test_a_relative_root_is_refused() -> None:
    """AGENTIHOOKS_CHECKPOINT_ROOT is an absolute path; a relative path is refused."""
    with pytest.raises(ValueError, match="AGENTIHOOKS_CHECKPOINT_ROOT"):
        local.LocalFolderBackend(pathlib.Path("relative/checkpoints"))
    with pytest.raises(ValueError, match="AGENTIHOOKS_CHECKPOINT_ROOT"):
        backends.open_backend("checkpoints", None, None)


def test_the_bucket_takes_precedence_over_the_root(tmp_path: pathlib.Path) -> None:
    """AGENTIHOOKS_CHECKPOINT_BUCKET takes precedence over a root folder."""
    chosen = backends.open_backend(str(tmp_path), "agentihooks-checkpoints", "http://127.0.0.1:1")
    assert isinstance(chosen, s3.S3Backend)
    assert (chosen.bucket, chosen.endpoint_url) == ("agentihooks-checkpoints", "http://127.0.0.1:1")
    rooted = backends.open_backend(str(tmp_path), None, None)
    assert isinstance(rooted, local.LocalFolderBackend) and rooted.root == tmp_path


def test_no_store_configured_means_no_backend() -> None:
    """With no checkpoint store configured, the controller lists no checkpoints."""
    assert backends.open_backend(None, None, None) is None
    assert backends.open_backend("", "", "") is None


@pytest.mark.parametrize(
    ("bucket", "endpoint", "variable"),
    [
        ("Bad_Bucket", None, "AGENTIHOOKS_CHECKPOINT_BUCKET"),
        ("b", None, "AGENTIHOOKS_CHECKPOINT_BUCKET"),
        ("good-bucket", "ftp://x", "AGENTIHOOKS_S3_ENDPOINT_URL"),
        ("good-bucket", "localhost:9000", "AGENTIHOOKS_S3_ENDPOINT_URL"),
    ],
)
def test_bad_bucket_settings_name_their_variable(
    bucket: str, endpoint: str | None, variable: str
) -> None:
    """A bad value is refused at start with a message naming the variable."""
    with pytest.raises(ValueError, match=variable):
        backends.open_backend(None, bucket, endpoint)


async def test_the_local_store_never_follows_a_link(tmp_path: pathlib.Path) -> None:
    """The local store refuses links inside itself instead of following them out of it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_bytes(b"{}")
    root = tmp_path / "checkpoints"
    store = local.LocalFolderBackend(root).scoped(SCOPE)
    await store.put_manifest("ckpt-1", b"{}")
    records_dir = root / SCOPE.prefix / "records"
    (records_dir / "ckpt-2.json").symlink_to(outside / "secret.json")
    with pytest.raises(storing.UnsafePath):
        await store.get_manifest("ckpt-2")

    data = b"object"
    digest = hashlib.sha256(data).hexdigest()
    fan = root / SCOPE.prefix / "objects" / digest[:2]
    fan.mkdir(parents=True)
    (fan / digest).symlink_to(outside / "secret.json")
    assert await store.object_exists(digest)
    with pytest.raises(storing.UnsafePath):
        await store.digest_object(digest)

    linked = local.LocalFolderBackend(root).scoped(storing.StoreScope("example", "t-link", 1))
    (root / "example" / "t-link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(storing.UnsafePath):
        await linked.put_manifest("ckpt-1", b"{}")
    with pytest.raises(storing.UnsafePath):
        await linked.list_checkpoint_ids()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.json"]
