"""Benchmark: Validator.verify over 256 MiB checkpoints against plain hashlib over their bytes.

Two checkpoints in a temporary local folder store, each 256 MiB of random bytes:

- `verify`: 8 objects of 32 MiB (a version 2 record: each session file one object);
- `verify_chain`: one session of 5,000 segments of about 52 KiB (a version 3 record, as a long
  session of appends leaves it: the transcript is the same chain), verified segment by segment
  and end to end, every segment listed in the record (as records before index objects list them);
- `verify_chain_indexed`: the same session as the writer lays it out now, its segments kept in
  chain index objects (`chain_indexes.fold`) that the Validator reads, checks and lists first.

The baseline is hashlib.sha256 over the same files, read with the same chunk size, one after the
other, in the same run and with the same warm page cache. Each side runs a few times and keeps
its best time; the ratio is verify / baseline (below 1 is faster than the baseline).

Run: .venv/bin/python bench/verify.py   (not a test: timings stay out of `make test`)
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import resource
import sys
import tempfile
import time
from collections.abc import AsyncIterator

from services.common.checkpoints import (
    chain_indexes,
    chained_records,
    chains,
    local,
    records,
    storing,
    validation,
)

TARGET = 1.25
OBJECTS = 8
OBJECT_SIZE = 32 * 1024 * 1024
SEGMENTS = 5000
SEGMENT_SIZE = OBJECTS * OBJECT_SIZE // SEGMENTS
ROUNDS = 5
SCOPE = storing.StoreScope("bench", "t-bench", 1)
AUTHORITY = records.Authority("bench", "seat-1", "t-bench", 1, "e-1", 2)


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), storing.CHUNK_SIZE):
        yield data[start : start + storing.CHUNK_SIZE]


async def _prepare(root: pathlib.Path) -> tuple[storing.ArtifactStore, list[pathlib.Path]]:
    """Write the objects and the record once; return the store and the object files."""
    store = local.LocalFolderBackend(root).scoped(SCOPE)
    blobs: list[records.Blob] = []
    for _ in range(OBJECTS):
        data = os.urandom(OBJECT_SIZE)
        blob = records.Blob.of(data)
        await store.put_object(
            _chunks(data), sha256=blob.sha256, size=blob.size, max_size=OBJECT_SIZE
        )
        blobs.append(blob)
    record = records.new_record(
        checkpoint_id="ckpt-bench",
        sequence=1,
        authority=records.Authority("bench", "seat-1", "t-bench", 1, "e-1", 2),
        project="app",
        compatibility_key="bench:1",
        transcript=blobs[0],
        watermark=1,
        native=records.Native(
            harness="claude_code",
            harness_version="2.1.3",
            native_session_id="s-bench",
            files=tuple(records.NativeFile(f"s/{i}.jsonl", b) for i, b in enumerate(blobs[1:])),
        ),
    )
    await store.put_manifest("ckpt-bench", records.encode_manifest(record))
    files = [root / SCOPE.prefix / "objects" / b.sha256[:2] / b.sha256 for b in blobs]
    return store, files


async def _prepare_chain(
    root: pathlib.Path, *, indexed: bool = False
) -> tuple[storing.ArtifactStore, list[pathlib.Path]]:
    """Write a 5,000-segment session and its version 3 record; return the store and files
    (with `indexed`, the index objects too: the Validator reads them as well)."""
    store = local.LocalFolderBackend(root).scoped(SCOPE)
    whole, segments = hashlib.sha256(), []
    for _ in range(SEGMENTS):
        data = os.urandom(SEGMENT_SIZE)
        whole.update(data)
        blob = records.Blob.of(data)
        await store.put_object(
            _chunks(data), sha256=blob.sha256, size=blob.size, max_size=blob.size
        )
        segments.append(chains.Segment(blob.sha256, blob.size))
    chain = chains.Chain(whole.hexdigest(), SEGMENTS * SEGMENT_SIZE, tuple(segments))
    names = [s.sha256 for s in segments]
    if indexed:
        chain, made = chain_indexes.fold(chain)
        for run, data in made:
            await store.put_object(
                _chunks(data), sha256=run.sha256, size=run.size, max_size=run.size
            )
            names.append(run.sha256)
    record = chained_records.new_record(
        checkpoint_id="ckpt-chain",
        sequence=2,
        authority=AUTHORITY,
        project="app",
        compatibility_key="bench:1",
        transcript=chain,
        watermark=1,
        native=chained_records.ChainedNative(
            "claude_code", "2.1.3", "s-bench", (chained_records.ChainedFile("s/0.jsonl", chain),)
        ),
    )
    await store.put_manifest("ckpt-chain", records.encode_manifest(record))
    files = [root / SCOPE.prefix / "objects" / name[:2] / name for name in names]
    return store, files


def _baseline(files: list[pathlib.Path]) -> float:
    """Plain hashlib over the same files, same chunk size, one file after another."""
    start = time.perf_counter()
    for path in files:
        digest = hashlib.sha256()
        with path.open("rb", buffering=0) as file:
            while chunk := file.read(storing.CHUNK_SIZE):
                digest.update(chunk)
        digest.hexdigest()
    return time.perf_counter() - start


async def _verify(store: storing.ArtifactStore, checkpoint_id: str) -> float:
    validator = validation.Validator(store)
    start = time.perf_counter()
    verdict = await validator.verify(validation.Expectation(checkpoint_id, 2))
    elapsed = time.perf_counter() - start
    if not verdict.ok:
        raise SystemExit(f"the benchmark checkpoint did not verify: {verdict}")
    return elapsed


async def _case(
    name: str, checkpoint_id: str, store: storing.ArtifactStore, files: list[pathlib.Path]
) -> None:
    _baseline(files)  # warm the page cache for both sides
    baseline, verify = [], []
    for _ in range(ROUNDS):  # interleaved, so drift on a shared machine hits both sides
        baseline.append(_baseline(files))
        verify.append(await _verify(store, checkpoint_id))
    best_base, best_verify = min(baseline), min(verify)
    mib = sum(path.stat().st_size for path in files) / (1024 * 1024)
    print(f"{name}: {len(files)} objects, {mib:.0f} MiB")
    print(f"  hashlib baseline: best {best_base:.3f} s ({mib / best_base:.0f} MiB/s)")
    print(f"  Validator.verify: best {best_verify:.3f} s ({mib / best_verify:.0f} MiB/s)")
    print(f"  all rounds (s): baseline {[round(t, 3) for t in baseline]}")
    print(f"  all rounds (s): verify   {[round(t, 3) for t in verify]}")
    ratio = best_verify / best_base
    print(f"RESULT {name} ratio={ratio:.3f} target={TARGET} {'ok' if ratio <= TARGET else 'short'}")


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        store, files = await _prepare(pathlib.Path(tmp) / "objects")
        await _case("verify", "ckpt-bench", store, files)
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        store, files = await _prepare_chain(pathlib.Path(tmp) / "chain")
        await _case("verify_chain", "ckpt-chain", store, files)
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        store, files = await _prepare_chain(pathlib.Path(tmp) / "indexed", indexed=True)
        await _case("verify_chain_indexed", "ckpt-chain", store, files)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the whole run (includes writing the objects): {peak:.0f} MiB")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
