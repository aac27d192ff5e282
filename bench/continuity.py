"""What checkpoints store and upload over a long session: append-only (schema version 3) against
whole-file captures (version 2), both measured in the same run over the same session.

Two sessions, each a Claude Code session (the real file format; a stand-in writes it):

- the issue's pattern: the session grows by 64 KiB of complete records twenty times, and after
  each growth the attempt captures, as the sidecar does on its interval;
- a long session of continuous capture: 2,000 captures, each after one new JSONL record of 1 to
  8 KiB (sizes drawn uniformly, seeded), as a sidecar that captures about once a second when
  records are appended leaves it.

For the issue's pattern two real Capturers capture the same states, each into its own local
checkpoint folder:

- append-only: the default writer (version 3): session file and transcript as chains, only the
  bytes appended since the previous checkpoint uploaded;
- baseline: `schema_version=2`, which stores the session file and the transcript whole again at
  every capture (the behaviour issue 21 measured: 10.6x the session's bytes after 20 captures).

The long session is captured by the append-only writer only (the whole-file writer would store
about 4.5 GiB for it; what it would store is computed, not written).

Measured, from the checkpoint folders themselves and from every `put_object` / `put_manifest`
call the store received (objects and records both count):

- stored / final session bytes;
- uploaded / appended bytes: what the captures after the first sent, over what the session grew
  by meanwhile.

A record names a long chain through index objects (`chain_indexes`), so it grows with the
logarithm of the captures; every capture still writes one record, which is kept. The stored bytes
are printed by kind (segments, index objects, records) and the last record section by section,
so the fixed per-record overhead shows beside what it is compared with.

Prints the absolute figures, then:
``RESULT continuity_stored ratio=<stored/final, long session> target=1.2 ok|short``,
``RESULT continuity_uploaded ratio=<uploaded/appended, long session> target=1.2 ok|short``
(and the same two for the issue's 20 captures, with the whole-file baseline beside them).
The final capture (`final_captures`, run alone with `--final`; needs root and cgroup v1 memory)
adds ``RESULT continuity_records_lost_per_oom_kill ratio=<lost per kill> target=0.0 ok|short``
and ``RESULT continuity_records_lost_per_sigterm ratio=<lost per kill> target=0.0 ok|short``.

Run: .venv/bin/python bench/continuity.py   (not a test: timings stay out of `make test`)
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "services" / "proto")]

from services.common import directives, settings  # noqa: E402
from services.common.checkpoints import chain_indexes, local, records  # noqa: E402
from services.restorer import captures, capturing, launching, restores  # noqa: E402
from services.restorer.harness import claude_code  # noqa: E402

TARGET = 1.2
GROWTH = 64 * 1024
ISSUE_CAPTURES = 20
LONG_CAPTURES = int(os.environ.get("CONTINUITY_LONG_CAPTURES", "2000"))
RECORD_BYTES = (1024, 8 * 1024)
"""The long session's records: one a capture, of a size drawn uniformly in this range."""
SESSION_ID = "0b0c5d1e-7f3a-4c2b-9a8e-1d2c3b4a5f60"
GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}

# Every byte each store was sent, by store folder: objects, records.
SENT: dict[pathlib.Path, collections.Counter[str]] = collections.defaultdict(collections.Counter)


def _count_uploads() -> None:
    """Count what the real local store is sent (objects as declared, records as written)."""
    put_object, put_manifest = local.LocalStore.put_object, local.LocalStore.put_manifest

    async def counted_object(store: Any, chunks: Any, **kwargs: Any) -> Any:
        SENT[store._root]["objects"] += kwargs["size"]
        return await put_object(store, chunks, **kwargs)

    async def counted_manifest(store: Any, checkpoint_id: str, data: bytes) -> None:
        SENT[store._root]["records"] += len(data)
        await put_manifest(store, checkpoint_id, data)

    local.LocalStore.put_object = counted_object  # type: ignore[method-assign]
    local.LocalStore.put_manifest = counted_manifest  # type: ignore[method-assign]


def git(cwd: pathlib.Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=GIT_ENV,
        check=True,
        capture_output=True,
    )


@dataclasses.dataclass
class Scene:
    worktree: pathlib.Path
    home: pathlib.Path
    session: pathlib.Path
    claude: str
    grown: int = 0

    def grow(self, size: int) -> int:
        """Append complete records of about `size` bytes; the bytes appended."""
        lines: list[bytes] = []
        while sum(map(len, lines)) < size:
            n = self.grown + len(lines)
            record = {"type": "assistant", "n": n, "message": {"text": f"step {n} " * 24}}
            lines.append(json.dumps(record).encode() + b"\n")
        with self.session.open("ab") as handle:
            handle.write(b"".join(lines))
        self.grown += len(lines)
        return sum(map(len, lines))

    def grow_record(self, size: int) -> int:
        """Append one complete record of exactly `size` bytes; the bytes appended."""
        head = json.dumps({"type": "assistant", "n": self.grown, "message": {"text": ""}})
        text = f"step {self.grown} " * (size // 6)
        record = json.loads(head)
        record["message"]["text"] = text[: max(0, size - len(head) - 1)]
        line = json.dumps(record).encode() + b"\n"
        with self.session.open("ab") as handle:
            handle.write(line)
        self.grown += 1
        return len(line)


def build(tmp: pathlib.Path) -> Scene:
    """A worktree cloned from an origin, with a local commit and an untracked file, and a
    Claude Code session of a few records in its harness home."""
    seed = tmp / "seed"
    seed.mkdir()
    git(seed, "init", "-q")
    (seed / "app.py").write_text("print('hello')\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "base")
    origin = tmp / "origin.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(origin))
    worktree = tmp / "worktree"
    git(tmp, "clone", "-q", origin.as_uri(), str(worktree))
    (worktree / "app.py").write_text("print('hello, world')\n")
    git(worktree, "commit", "-q", "-am", "local")
    (worktree / "notes.txt").write_text("an untracked note\n")
    home = tmp / "home"
    folder = home / ".claude" / "projects" / claude_code.project_key(worktree)
    folder.mkdir(parents=True)
    session = folder / f"{SESSION_ID}.jsonl"
    session.write_text(json.dumps({"type": "user", "message": "fix the test"}) + "\n")
    claude = tmp / "bin" / "claude"
    claude.parent.mkdir()
    claude.write_text(f"#!{sys.executable}\nprint('2.1.3 (Claude Code)')\n")
    claude.chmod(0o755)
    return Scene(worktree, home, session, str(claude))


def capturer(scene: Scene, root: pathlib.Path, version: int) -> capturing.Capturer:
    launch = launching.LaunchRecord(
        scope=launching.Scope("bench", "eng-1", "t-1", 1, "e-1", 1),
        directive=directives.FRESH,
        projects=(launching.Project("app", ""),),
        worker_image="bench:1",
        harness=claude_code.NAME,
        restores_from_generation=0,
        restore_grant="",
        capture_grant="",
        command=(scene.claude, "--model", "opus"),
        checkpoint_remote=False,
        store_addr=None,
    )
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root)})
    attempt = restores.Attempt(scene.worktree, scene.worktree.parent, scene.home)
    return capturing.Capturer(launch, attempt, storage, schema_version=version)


def record_size(root: pathlib.Path, sequence: int) -> int:
    """The size of the manifest of the attempt's checkpoint `sequence`."""
    return next(root.rglob(f"ckpt-e-1-{sequence}.json")).stat().st_size


def folder_bytes(root: pathlib.Path, part: str) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and part in p.parts)


@dataclasses.dataclass
class Figures:
    captures: int
    final: int
    appended: int
    stored_objects: int
    stored_records: int
    uploaded: int
    seconds: float
    first_record: int
    last_record: int

    @property
    def stored(self) -> float:
        return (self.stored_objects + self.stored_records) / self.final

    @property
    def upload(self) -> float:
        return self.uploaded / self.appended


async def session_run(tmp: pathlib.Path, captures: int) -> dict[int, Figures]:
    """One session grown `captures` times, captured after each growth by both writers."""
    scene = build(tmp)
    roots = {3: tmp / "append-only", 2: tmp / "whole-files"}
    writers = {version: capturer(scene, root, version) for version, root in roots.items()}
    spent = dict.fromkeys(roots, 0.0)

    async def capture_all() -> None:
        for version, writer in writers.items():
            started = time.perf_counter()
            await writer.capture()
            spent[version] += time.perf_counter() - started

    await capture_all()
    first = {v: SENT[r]["objects"] + SENT[r]["records"] for v, r in roots.items()}
    appended = 0
    for _ in range(captures):
        appended += scene.grow(GROWTH)
        await capture_all()
    final = scene.session.stat().st_size
    return {
        version: Figures(
            captures=captures,
            final=final,
            appended=appended,
            stored_objects=folder_bytes(root, "objects"),
            stored_records=folder_bytes(root, "records"),
            uploaded=SENT[root]["objects"] + SENT[root]["records"] - first[version],
            seconds=spent[version],
            first_record=record_size(root, 1),
            last_record=record_size(root, captures + 1),
        )
        for version, root in roots.items()
    }


# --- a long session of continuous capture: stored and uploaded bytes ------------------------


@dataclasses.dataclass
class LongFigures:
    """The long session's figures: bytes by kind, and the last record by section."""

    figures: Figures
    segments: int
    indexes: int
    whole_files: int
    sections: dict[str, int]
    manifest: int


def _stored_by_kind(root: pathlib.Path) -> tuple[int, int]:
    """Bytes of the segment (and other) objects, and of the chain index objects."""
    plain = indexes = 0
    for path in root.rglob("*"):
        if path.is_file() and "objects" in path.parts:
            with path.open("rb") as handle:
                head = handle.read(len(chain_indexes.MAGIC))
            size = path.stat().st_size
            if head == chain_indexes.MAGIC:
                indexes += size
            else:
                plain += size
    return plain, indexes


def _sections(root: pathlib.Path, sequence: int) -> tuple[dict[str, int], int]:
    """The last record's bytes by top-level section (canonical JSON of each key and value),
    and its manifest's size."""
    data = next(root.rglob(f"ckpt-e-1-{sequence}.json")).read_bytes()
    record, _ = records.decode_manifest(data)
    sections = {key: len(records.canonical_bytes({key: value})) for key, value in record.items()}
    return sections, len(data)


async def long_session_run(tmp: pathlib.Path, captures: int) -> LongFigures:
    """A session captured by the append-only writer after each of `captures` records of
    `RECORD_BYTES` (one new record a capture, as continuous capture leaves it)."""
    scene = build(tmp)
    root = tmp / "append-only"
    writer = capturer(scene, root, 3)
    rng = random.Random(21)
    started = time.perf_counter()
    await writer.capture()
    first = SENT[root]["objects"] + SENT[root]["records"]
    appended = 0
    whole_files = scene.session.stat().st_size
    for _ in range(captures):
        appended += scene.grow_record(rng.randint(*RECORD_BYTES))
        await writer.capture()
        whole_files += scene.session.stat().st_size
    seconds = time.perf_counter() - started
    final = scene.session.stat().st_size
    plain, indexes = _stored_by_kind(root)
    sections, manifest = _sections(root, captures + 1)
    figures = Figures(
        captures=captures,
        final=final,
        appended=appended,
        stored_objects=folder_bytes(root, "objects"),
        stored_records=folder_bytes(root, "records"),
        uploaded=SENT[root]["objects"] + SENT[root]["records"] - first,
        seconds=seconds,
        first_record=record_size(root, 1),
        last_record=manifest,
    )
    return LongFigures(figures, plain, indexes, whole_files, sections, manifest)


def show_long(long: LongFigures) -> None:
    f = long.figures
    mib, per = 1024 * 1024, f.captures + 1
    print(
        f"long session: {f.captures} captures of one {RECORD_BYTES[0] // 1024}-"
        f"{RECORD_BYTES[1] // 1024} KiB record each (mean {f.appended / f.captures:.0f} bytes), "
        f"final session {f.final / mib:.2f} MiB"
    )
    print(
        f"  append-only (v3): stored {(f.stored_objects + f.stored_records) / mib:.2f} MiB = "
        f"{f.stored:.3f}x the session: segments and other objects {long.segments / mib:.2f} MiB, "
        f"index objects {long.indexes / mib:.3f} MiB ({long.indexes / f.final:.3f}x), records "
        f"{f.stored_records / mib:.2f} MiB ({f.stored_records / f.final:.3f}x); uploaded after "
        f"the first capture {f.uploaded / mib:.2f} MiB = {f.upload:.3f}x the appended; "
        f"capture time {f.seconds / per * 1000:.0f} ms each"
    )
    print(
        f"  whole files (v2) would store {long.whole_files / mib:.0f} MiB = "
        f"{long.whole_files / f.final:.0f}x the session (computed: the session at each capture)"
    )
    print(
        f"  records: {f.first_record} bytes at the first capture, {f.last_record} at capture "
        f"{per}; mean {f.stored_records / per:.0f} bytes a capture against "
        f"{f.appended / f.captures:.0f} bytes appended a capture"
    )
    objects = (long.segments + long.indexes) / f.final
    mean_record = f.stored_records / per
    needed = mean_record / (TARGET - objects) if objects < TARGET else float("inf")
    print(
        f"  without the records, stored / session would be {objects:.3f}x; with one record of "
        f"{mean_record:.0f} bytes a capture, the stored ratio stays within {TARGET} only when a "
        f"capture appends at least {needed / 1024:.1f} KiB (captures coalesced, or smaller "
        f"records)"
    )
    # Before index objects every record listed every segment: one more entry a capture.
    entry = len(records.canonical_bytes({"sha256": "0" * 64, "size": 4096})) + 1
    inline = sum(f.first_record + entry * n for n in range(per))
    print(
        f"  records listing every segment inline (as before index objects) would total "
        f"{inline / mib:.0f} MiB, {(inline + long.segments) / f.final:.1f}x the session "
        f"(computed from the first record and {entry} bytes a segment entry)"
    )
    chained = sum(v for k, v in long.sections.items() if k in ("native", "transcript"))
    print(
        "  last record by section (bytes): "
        + ", ".join(f"{k} {v}" for k, v in sorted(long.sections.items(), key=lambda kv: -kv[1]))
        + f"; manifest {long.manifest} (native + transcript {chained}, of which the chain's "
        f"index and inline segments are the part that grows)"
    )


def show(name: str, figures: dict[int, Figures]) -> None:
    mib = 1024 * 1024
    chained, whole = figures[3], figures[2]
    print(
        f"{name}: {chained.captures} captures of {GROWTH // 1024} KiB, final session "
        f"{chained.final / mib:.2f} MiB"
    )
    for label, f in (("append-only (v3)", chained), ("whole files (v2)", whole)):
        print(
            f"  {label}: stored {(f.stored_objects + f.stored_records) / mib:.2f} MiB "
            f"(objects {f.stored_objects / mib:.2f}, records {f.stored_records / mib:.2f}) "
            f"= {f.stored:.2f}x the session; uploaded after the first capture "
            f"{f.uploaded / mib:.2f} MiB = {f.upload:.2f}x the {f.appended / mib:.2f} MiB "
            f"appended; capture time {f.seconds / (f.captures + 1) * 1000:.0f} ms each"
        )


def result(name: str, ratio: float) -> None:
    verdict = "ok" if ratio <= TARGET else "short"
    print(f"RESULT {name} ratio={ratio:.3f} target={TARGET} {verdict}")


async def main() -> None:
    _count_uploads()
    with tempfile.TemporaryDirectory(prefix="agentihooks-bench-continuity-") as name:
        tmp = pathlib.Path(name)
        (tmp / "issue").mkdir()
        (tmp / "long").mkdir()
        issue = await session_run(tmp / "issue", ISSUE_CAPTURES)
        long = await long_session_run(tmp / "long", LONG_CAPTURES)
    show("issue's pattern", issue)
    show_long(long)
    print(
        f"whole-file baseline stored {issue[2].stored:.2f}x after {ISSUE_CAPTURES} captures; "
        f"append-only {issue[3].stored:.2f}x, and {long.figures.stored:.3f}x after "
        f"{LONG_CAPTURES} captures of one record"
    )
    result("continuity_stored_issue", issue[3].stored)
    result("continuity_uploaded_issue", issue[3].upload)
    result("continuity_stored", long.figures.stored)
    result("continuity_uploaded", long.figures.upload)
    await continuous()
    await final_captures()


# --- continuous capture (issue 21, point 2): archive lag, store requests, controller load ----
#
# Separate from the figures above: a stand-in agent writes records at a realistic pace while
# the sidecar's real Follower (default cadence: `AGENTIHOOKS_CAPTURE_LAG_S` 1 s, source scans at
# most every 5 s, the 60 s interval as a safety net) captures into a real local checkpoint
# folder; then 1,000 simulated attempts report captures at the coalesced rate (one a second
# each) through the real gRPC ReportCapture of a real controller process on a real
# redis-server.

LAG_TARGET_S = 2.0
LAG_RUN_S = float(os.environ.get("CONTINUITY_LAG_S", "60"))
RECORDS_PER_S = 2.0
"""The stand-in's mean pace: a busy agent turn (a record per message, tool call and result)."""
REQUESTS_TARGET = 36_000.0
"""Store requests per seat-hour the default cadence may cost: at most one capture a second (the
lag), about ten requests each (the objects it wrote and its record, put then read back, and its
sequence lookup). The trade-off printed beside the lag: capture on the 60 s interval alone cost
about 600 requests a seat-hour and lost up to a minute of work; a capturer that verified every
object each time cost 146,000 and grew with the session."""
WRITES = frozenset({"put_object", "put_manifest"})
LOAD_SEATS = 1_000
LOAD_S = float(os.environ.get("CONTINUITY_LOAD_S", "20"))
LOAD_CPU_TARGET = 1.0
"""Cores one controller may spend on 1,000 seats' capture reports at the coalesced rate (the
worst case: every seat's agent writing all the time): one replica keeps up, N share swarms."""
LOAD_COMMANDS_TARGET = 20_000.0
"""Redis commands a second for 1,000 seats: a fifth of what one Redis core serves of such
commands."""

STORE_REQUESTS: collections.Counter[str] = collections.Counter()


def _count_store_requests() -> None:
    """Count what the real local store is asked, as an object store would bill it: one request
    per call, and one per object named in a call that names many."""
    for name in (
        "put_object",
        "put_manifest",
        "get_manifest",
        "list_checkpoint_ids",
        "object_exists",
        "digest_object",
        "read_object",
        "get_manifests",
        "digest_objects",
        "objects_exist",
        "read_objects",
        "digest_chains",
    ):
        method = getattr(local.LocalStore, name, None)
        if method is None:
            continue

        def counted(store: Any, *args: Any, _m: Any = method, _n: str = name, **kw: Any) -> Any:
            many = args[0] if args and isinstance(args[0], list | tuple) else None
            if _n == "digest_chains" and many is not None:
                STORE_REQUESTS[_n] += sum(len(chain) for chain in many)
            else:
                STORE_REQUESTS[_n] += len(many) if many is not None else 1
            return _m(store, *args, **kw)

        setattr(local.LocalStore, name, counted)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def archive_lag(tmp: pathlib.Path) -> tuple[list[float], float, int]:
    """Record written → archived, for every record a stand-in writes over `LAG_RUN_S`, with the
    sidecar following at its default cadence; returns the lags, the store requests per hour
    and the captures made."""
    import contextlib
    import random

    from services.restorer import following

    scene = build(tmp)
    writer = capturer(scene, tmp / "continuous", 3)
    captured: list[tuple[float, int]] = []
    capture = writer.capture
    progress = asyncio.Event()

    requested: list[tuple[float, int]] = []

    async def timed(**kwargs: Any) -> captures.Captured:
        result = await capture(**kwargs)
        captured.append((time.monotonic(), result.watermark))
        requested.append((time.monotonic(), sum(STORE_REQUESTS.values())))
        progress.set()
        return result

    async def archived(watermark: int) -> None:
        while not captured or captured[-1][1] < watermark:
            progress.clear()
            await progress.wait()

    writer.capture = timed  # type: ignore[method-assign]
    follower = following.Follower(
        writer,
        following.session_folder(claude_code.NAME, scene.home, {}),
        scene.worktree,
        following.Cadence(),
    )
    rng = random.Random(21)
    running = asyncio.create_task(follower.run())
    try:
        await archived(0)
        first = captured[-1][1]
        requests0 = sum(STORE_REQUESTS.values())
        started = time.monotonic()
        written: list[float] = []
        with scene.session.open("ab", buffering=0) as session:
            while time.monotonic() - started < LAG_RUN_S:
                await asyncio.sleep(rng.expovariate(RECORDS_PER_S))
                n = len(written)
                text = f"step {n} " * rng.randint(100, 500)
                record = json.dumps({"type": "assistant", "n": n, "message": {"text": text}})
                data = record.encode() + b"\n"
                if rng.random() < 0.2:  # a record written in two parts
                    session.write(data[: len(data) // 2])
                    await asyncio.sleep(0.05)
                    data = data[len(data) // 2 :]
                session.write(data)
                written.append(time.monotonic())
                if n % 20 == 19:  # the agent edits a file now and then
                    (scene.worktree / "app.py").write_text(f"print('edit {n}')\n")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(archived(first + len(written)), 60)
        seconds = time.monotonic() - started
        requests = sum(STORE_REQUESTS.values()) - requests0
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    half = [(t, n) for t, n in requested if t >= started]
    middle = next(((t, n) for t, n in half if t >= started + seconds / 2), half[-1])
    early = (middle[1] - requests0) / max(middle[0] - started, 1e-9) * 3600
    late = (half[-1][1] - middle[1]) / max(half[-1][0] - middle[0], 1e-9) * 3600
    print(
        f"store requests per seat-hour: {early:.0f} in the run's first half, {late:.0f} in its"
        " second (verifying each capture reads every segment of the chains it extends)"
    )
    lags = []
    for index, at in enumerate(written):
        done = next((t for t, w in captured if w >= first + index + 1 and t >= at), None)
        lags.append(float("inf") if done is None else done - at)
    return lags, requests / seconds * 3600, follower.counts.captures


async def controller_load() -> dict[str, float]:
    """1,000 seats each reporting a capture a second through a controller process's gRPC
    ReportCapture with its own worker credential: the controller's CPU (from /proc) and the
    Redis commands (INFO commandstats, the bench's own INFO left out) per second."""
    import random

    import grpc
    import storm  # bench/storm.py: the emulator, seeding seats, controller processes
    from agentihooks.swarm.v2 import recovery_pb2, recovery_pb2_grpc

    from services.controller import replacing
    from services.controller.state import keys, reading

    swarm = "capture"
    async with storm.base.redis_server() as redis:
        kwargs = redis.connection_pool.connection_kwargs
        redis_url = f"redis://{kwargs['host']}:{kwargs['port']}/0"
        async with storm.ApiServer() as server:
            await storm.declare(server, redis, [swarm], LOAD_SEATS)
            eids = [keys.execution_id(swarm, storm.base.seat_name(i), 1) for i in range(LOAD_SEATS)]
            executions = await reading.executions(redis, swarm, eids)
            credentials = [replacing.worker_token(storm.GRANT_KEY, e) for e in executions]
            async with storm.processes(1, server, redis_url) as (controller,):
                deadline = time.monotonic() + storm.WAIT_S
                while "-" in (held := await storm.holders(redis, [swarm])) or "setup" in held:
                    assert time.monotonic() < deadline, "the controller never took the swarm"
                    await asyncio.sleep(0.2)
                line = next(x for x in controller.log if b'"listening"' in x)
                addr = f"127.0.0.1:{json.loads(line)['port']}"
                sent = collections.Counter[str]()
                measuring = asyncio.Event()
                stop = asyncio.Event()
                async with grpc.aio.insecure_channel(addr) as channel:
                    stub = recovery_pb2_grpc.RecoveryStub(channel)

                    async def seat(index: int) -> None:
                        rng = random.Random(index)
                        metadata = (("authorization", f"Bearer {credentials[index]}"),)
                        await asyncio.sleep(rng.random())
                        watermark = 0
                        tick = time.monotonic()
                        while not stop.is_set():
                            watermark += 1
                            try:
                                await stub.ReportCapture(
                                    recovery_pb2.ReportCaptureRequest(
                                        native_session_id=SESSION_ID,
                                        archive_watermark=watermark,
                                        checkpoint_id=f"ckpt-{eids[index]}-{watermark}",
                                    ),
                                    metadata=metadata,
                                    timeout=30,
                                )
                                sent["ok" if measuring.is_set() else "warm"] += 1
                            except grpc.aio.AioRpcError as error:
                                sent[error.code().name] += 1
                            tick += 1.0  # the coalesced rate: one report a second
                            await asyncio.sleep(max(0.0, tick - time.monotonic()))

                    seats = [asyncio.create_task(seat(i)) for i in range(LOAD_SEATS)]
                    await asyncio.sleep(5.0)  # warm up
                    stats0 = await redis.info("commandstats")
                    cpu0, t0 = controller.cpu(), time.monotonic()
                    measuring.set()
                    await asyncio.sleep(LOAD_S)
                    measuring.clear()
                    cpu, seconds = controller.cpu() - cpu0, time.monotonic() - t0
                    stats = await redis.info("commandstats")
                    ops = (await redis.info("stats"))["instantaneous_ops_per_sec"]
                    stop.set()
                    await asyncio.gather(*seats)
    commands = {
        name.removeprefix("cmdstat_"): int(v["calls"]) - int(stats0.get(name, {}).get("calls", 0))
        for name, v in stats.items()
    }
    own = sum(n for c, n in commands.items() if c in storm.OWN_COMMANDS)
    total = sum(commands.values()) - own
    reports = sent["ok"]
    top = dict(collections.Counter(commands).most_common(6))
    print(
        f"controller load: {LOAD_SEATS} seats reporting a capture a second each, {seconds:.0f} s:"
        f" {reports / seconds:.0f} reports/s answered ({dict(sent)}); controller CPU"
        f" {cpu / seconds:.2f} cores ({cpu / max(reports, 1) * 1e3:.2f} ms a report); Redis"
        f" {total / seconds:.0f} commands/s ({total / max(reports, 1):.1f} a report;"
        f" instantaneous_ops_per_sec {ops}; {top})"
    )
    return {
        "cores": cpu / seconds,
        "reports_per_s": reports / seconds,
        "commands_per_s": total / seconds,
        "commands_per_report": total / max(reports, 1),
        "cores_at_rate": cpu / max(reports, 1) * LOAD_SEATS,
        "commands_at_rate": total / max(reports, 1) * LOAD_SEATS,
    }


def limit_result(name: str, value: float, target: float) -> None:
    verdict = "ok" if value <= target else "short"
    print(f"RESULT {name} ratio={value:.3f} target={target} {verdict}")


async def continuous() -> None:
    """The figures of continuous capture, each a RESULT line."""
    _count_store_requests()
    with tempfile.TemporaryDirectory(prefix="agentihooks-bench-continuous-") as name:
        lags, per_hour, captures = await archive_lag(pathlib.Path(name))
    p50, p99 = _percentile(lags, 0.5), _percentile(lags, 0.99)
    writes = sum(n for name, n in STORE_REQUESTS.items() if name in WRITES)
    write_share = writes / max(1, sum(STORE_REQUESTS.values()))
    print(
        f"continuous capture (lag 1 s, source scans at most every 5 s): {len(lags)} records over"
        f" {LAG_RUN_S:.0f} s at {RECORDS_PER_S:g}/s, {captures} captures; archive lag p50"
        f" {p50:.2f} s, p99 {p99:.2f} s, max {max(lags):.2f} s; store requests"
        f" {per_hour:.0f} per seat-hour, {write_share:.0%} of them writes"
        f" ({per_hour * 24 * LOAD_SEATS / 1e6:.1f} M a day for {LOAD_SEATS} seats;"
        f" {dict(STORE_REQUESTS.most_common(6))})"
    )
    limit_result("continuity_archive_lag_p99_s", p99, LAG_TARGET_S)
    verdict = "ok" if per_hour <= REQUESTS_TARGET else "short"
    print(
        f"RESULT continuity_store_requests_per_seat_hour ratio={per_hour:.0f}"
        f" target={REQUESTS_TARGET:.0f} {verdict} lag_p99_s={p99:.2f}"
    )
    load = await controller_load()
    print(
        f"controller at {LOAD_SEATS} seats: {load['cores']:.2f} cores measured at"
        f" {load['reports_per_s']:.0f} reports/s, {load['cores_at_rate']:.2f} cores at"
        f" {LOAD_SEATS} reports/s; Redis {load['commands_per_s']:.0f} commands/s"
    )
    limit_result("continuity_controller_cores_1000_seats", load["cores_at_rate"], LOAD_CPU_TARGET)
    limit_result(
        "continuity_redis_commands_per_s_1000_seats", load["commands_at_rate"], LOAD_COMMANDS_TARGET
    )


# --- the final capture (issue 21, point 3): records lost when the worker dies -----------------
#
# Separate from the figures above. Each kill is a fresh attempt run as real processes on this
# machine, as a Pod runs them: the restorer sidecar (`agentihooks-restorer serve`, a launch
# record file, a local checkpoint folder, its default cadence) and, once its restore is ready,
# a stand-in agent (tests/support/record_writer.py: the real Claude Code session format, one
# record in two writes `FINAL_RECORD_S` apart, at `FINAL_RECORDS_PER_S` on average) in a
# cgroup v1 memory cgroup of its own, as a worker container. After a random time the worker
# dies: OOM-killed by its cgroup's limit (it grows its memory while it goes on writing) or
# ended by SIGTERM; then,
# as the kubelet does with a native sidecar once the main container stopped, the sidecar gets
# SIGTERM and takes its final capture. Lost = complete records in the worker's session file
# (what it wrote, read after it died) less the watermark of the newest checkpoint; a record
# left half written is "the one record being written", not counted.

FINAL_KILLS = int(os.environ.get("CONTINUITY_KILLS", "20"))
FINAL_RECORDS_PER_S = 2.0
"""As `RECORDS_PER_S`: a busy agent turn."""
FINAL_RECORD_S = 0.05
"""How long writing one record takes (its two halves this far apart): a kill may cut one."""
FINAL_MEMORY_LIMIT = 256 * 1024 * 1024
FINAL_WAIT_S = 120.0
WRITER = REPO / "tests" / "support" / "record_writer.py"


@dataclasses.dataclass
class Death:
    """What one worker's death cost: its complete records, the ones archived, a cut record."""

    written: int
    archived: int
    cut: bool
    how: str
    before_final: int
    """The newest watermark when the worker died, before the sidecar's final capture."""

    @property
    def lost(self) -> int:
        return max(0, self.written - self.archived)


def _memory_cgroup(name: str) -> pathlib.Path:
    """A new cgroup v1 memory cgroup below this process's, limited to `FINAL_MEMORY_LIMIT`."""
    own = next(
        line.split(":", 2)[2]
        for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines()
        if "memory" in line.split(":", 2)[1].split(",")
    )
    folder = pathlib.Path("/sys/fs/cgroup/memory") / own.lstrip("/") / name
    folder.mkdir()
    (folder / "memory.limit_in_bytes").write_text(str(FINAL_MEMORY_LIMIT))
    swap = folder / "memory.memsw.limit_in_bytes"
    if swap.exists():
        swap.write_text(str(FINAL_MEMORY_LIMIT))
    return folder


def _oom_kills(cgroup: pathlib.Path) -> int:
    for line in (cgroup / "memory.oom_control").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def _newest_watermark(root: pathlib.Path, execution: str) -> int:
    """The watermark of the attempt's newest checkpoint in a local checkpoint folder."""
    newest: tuple[int, int] = (0, 0)
    for path in root.rglob(f"ckpt-{execution}-*.json"):
        sequence = int(path.stem.rpartition("-")[2])
        record, _ = records.decode_manifest(path.read_bytes())
        watermark = int(record["transcript"]["watermark"])
        newest = max(newest, (sequence, watermark))
    return newest[1]


def _tail(log: pathlib.Path) -> str:
    return log.read_text(errors="replace")[-2000:]


async def _restored(
    port: int, worktree: pathlib.Path, sidecar: asyncio.subprocess.Process, log: pathlib.Path
) -> None:
    """Ask the sidecar for its restore (as the worker entry point does) until it is ready."""
    import grpc
    from agentihooks.swarm.v2 import restorer_pb2, restorer_pb2_grpc

    deadline = time.monotonic() + FINAL_WAIT_S
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = restorer_pb2_grpc.RestorerStub(channel)
        while True:
            try:
                async for event in stub.Restore(
                    restorer_pb2.RestoreRequest(worktree=str(worktree)), timeout=30
                ):
                    if event.HasField("ready"):
                        return
                    if event.HasField("refused"):
                        raise RuntimeError(f"restore refused: {event.refused.reason}")
            except grpc.aio.AioRpcError:
                if sidecar.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the sidecar did not restore:\n{_tail(log)}") from None
                await asyncio.sleep(0.1)


async def _one_death(tmp: pathlib.Path, index: int, how: str, rng: Any) -> Death:
    """One attempt whose worker dies `how` (`oom` or `sigterm`) at a random moment."""
    import contextlib
    import signal
    import socket

    from services.restorer.harness import claude_code as claude

    attempt = tmp / f"{how}-{index}"
    worktree, home, root, witness = (
        attempt / "work",
        attempt / "home",
        attempt / "checkpoints",
        attempt / "witness",
    )
    for folder in (worktree, home, root, witness):
        folder.mkdir(parents=True)
    execution = f"bench.eng-1.{index + 1}"
    launch = launching.LaunchRecord(
        scope=launching.Scope("bench", "eng-1", "t-1", 1, execution, 1),
        directive=directives.FRESH,
        projects=(launching.Project("app", ""),),
        worker_image="bench:1",
        harness=claude.NAME,
        restores_from_generation=0,
        restore_grant="",
        capture_grant="",
        command=(sys.executable, "-P", str(WRITER)),
        checkpoint_remote=False,
        store_addr=None,
    )
    (attempt / "launch.json").write_text(json.dumps(launching.to_json(launch)))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_")}
    sidecar_env = {
        **base,
        "HOME": str(home),
        "AGENTIHOOKS_LAUNCH_RECORD": str(attempt / "launch.json"),
        "AGENTIHOOKS_CHECKPOINT_ROOT": str(root),
        "AGENTIHOOKS_HARNESS_HOME": str(home),
        "AGENTIHOOKS_ATTEMPT_DIR": str(attempt),
    }
    log = (attempt / "sidecar.log").open("wb")
    sidecar = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.restorer.main",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        env=sidecar_env,
        stdout=log,
        stderr=log,
        cwd=attempt,
    )
    cgroup = _memory_cgroup(f"agentihooks-bench-{os.getpid()}-{how}-{index}")
    worker: asyncio.subprocess.Process | None = None
    try:
        await _restored(port, worktree, sidecar, attempt / "sidecar.log")
        fail_now = attempt / "fail-now"
        worker_env = {
            **base,
            "HOME": str(home),
            "AGENTIHOOKS_GENERATION": "1",
            "WRITER_WITNESS_DIR": str(witness),
            "WRITER_INTERVAL_S": str(1 / FINAL_RECORDS_PER_S),
            "WRITER_RECORD_S": str(FINAL_RECORD_S),
            "WRITER_FAILURE": "oom" if how == "oom" else "none",
            "WRITER_FAIL_AFTER_FILE": str(fail_now),
        }
        # Into its cgroup before it runs anything, as a container's process.
        worker = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            'echo $$ > "$0/cgroup.procs" && exec "$@"',
            str(cgroup),
            *launch.command,
            "-p",
            "Write the progress notes",
            env=worker_env,
            cwd=worktree,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.sleep(rng.uniform(1.0, 8.0))  # a random moment of its work
        if how == "oom":
            fail_now.touch()
        else:
            worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(FINAL_WAIT_S):
            code = await worker.wait()
        if how == "oom" and (code != -signal.SIGKILL or _oom_kills(cgroup) == 0):
            raise RuntimeError(f"the worker was not OOM-killed (exit {code})")
        before_final = _newest_watermark(root, execution)
        # The kubelet stops a native sidecar once the main container stopped: SIGTERM.
        sidecar.send_signal(signal.SIGTERM)
        async with asyncio.timeout(FINAL_WAIT_S):
            await sidecar.wait()
    finally:
        for process in (worker, sidecar):
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()
        log.close()
        with contextlib.suppress(OSError):
            cgroup.rmdir()
    [session] = (home / ".claude" / "projects" / claude.project_key(worktree)).glob("*.jsonl")
    data = session.read_bytes()
    return Death(
        written=data.count(b"\n"),
        archived=_newest_watermark(root, execution),
        cut=not data.endswith(b"\n"),
        how=how,
        before_final=before_final,
    )


async def final_capture_losses(how: str, kills: int = FINAL_KILLS) -> list[Death]:
    """`kills` attempts whose worker dies `how` (`oom` or `sigterm`), one after the other."""
    from random import Random

    rng = Random(f"final-{how}")
    deaths = []
    with tempfile.TemporaryDirectory(prefix="agentihooks-bench-final-") as name:
        for index in range(kills):
            deaths.append(await _one_death(pathlib.Path(name), index, how, rng))
    return deaths


def _show_deaths(title: str, deaths: list[Death]) -> float:
    lost = [d.lost for d in deaths]
    print(
        f"{title}: {len(deaths)} kills, {sum(d.written for d in deaths)} complete records"
        f" written, {sum(lost)} lost (per kill: {lost}); {sum(d.cut for d in deaths)} kills"
        " left a record half written (not a complete record, not counted); without the final"
        f" capture {sum(max(0, d.written - d.before_final) for d in deaths)} would have been lost"
    )
    return sum(lost) / max(len(deaths), 1)


async def final_captures() -> None:
    """Records lost per OOM kill and per SIGTERM of the worker, each a RESULT line."""
    oom = await final_capture_losses("oom")
    per_oom = _show_deaths("OOM kills of the worker (memory cgroup, sidecar alive)", oom)
    limit_result("continuity_records_lost_per_oom_kill", per_oom, 0.0)
    sigterm = await final_capture_losses("sigterm")
    per_sigterm = _show_deaths("SIGTERM to the worker, then to the sidecar (graceful)", sigterm)
    limit_result("continuity_records_lost_per_sigterm", per_sigterm, 0.0)


if __name__ == "__main__":
    # `--continuous`: only the continuous capture figures (`continuous`); `--final`: only the
    # records lost when the worker dies (`final_captures`).
    if "--final" in sys.argv[1:]:
        asyncio.run(final_captures())
    else:
        asyncio.run(continuous() if "--continuous" in sys.argv[1:] else main())
