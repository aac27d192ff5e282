"""Restore of a 200 MiB worktree against `git clone` plus `tar` of the same files, same run.

The fenced attempt's worktree: 160 MiB committed in 2,000 files (pushed to a file:// origin),
two local commits, an uncommitted change and 40 MiB of untracked files in 1,000 files, plus a
Claude Code session. It is captured once (not timed) into a local checkpoint folder. Then:

- restore: the restorer's whole native restore into an empty folder: Validator.verify (every
  object hashed), registration, native session files, clone of the origin, bundle, patch and
  the untracked files fetched from the store (hashed as they are read) and written;
- baseline: `git clone` of the same origin into an empty folder, then `tar -xf` of a tar of the
  same untracked files (made beforehand, not timed).

The two run as a pair in each of seven rounds; the ratio is the median of the rounds'
restore/baseline (the machines are shared: a round's pair sees the same load).

A second case, `restore_chain`, restores the same worktree with a 5,000-segment session (5 MiB
captured with 1 KiB segments: the chain a long session of small appends leaves), so every
segment is fetched, hashed, verified as part of its chain and joined; same baseline. As the
writer lays such a chain out, its record names a few chain index objects (`chain_indexes`), not
the 5,000 segments: the restore reads the index objects (about 1,250, mostly small), then the
segments they list. Before each
timed run the file system is synced (not timed), so neither starts while the writes of the
one before are still being flushed; the pair's order alternates from round to round, so
neither always goes first; and no tree is deleted until every round has run (about 4 GiB of
scratch space), so neither runs right after a large deletion.
Prints the absolute figures, then `RESULT restore ratio=<ratio> target=1.5 ok|short` and
`RESULT restore_chain ratio=<ratio> target=1.5 ok|short`.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "services" / "proto")]

from services.common import directives, settings  # noqa: E402
from services.common.checkpoints import backends, index_reading, records, storing  # noqa: E402
from services.restorer import capturing, fetching, launching, restores, restoring  # noqa: E402
from services.restorer.harness import claude_code  # noqa: E402

TARGET = 1.5
COMMITTED_FILES, COMMITTED_SIZE = 2000, 80 * 1024
UNTRACKED_FILES, UNTRACKED_SIZE = 1000, 40 * 1024
SESSION_ID = "0b0c5d1e-7f3a-4c2b-9a8e-1d2c3b4a5f60"
ROUNDS = 7
CHAIN_SEGMENTS, CHAIN_SEGMENT = 5000, 1024
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


def git(cwd: pathlib.Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=GIT_ENV,
        check=True,
        capture_output=True,
    )


def fill(root: pathlib.Path, prefix: str, count: int, size: int, rng: random.Random) -> None:
    """`count` files of `size` bytes, half random and half text, in nested folders."""
    for index in range(count):
        path = root / prefix / f"d{index % 40:02d}" / f"f{index:05d}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        half = size // 2
        text = (f"line {index} " * (half // 10 + 1)).encode()[:half]
        path.write_bytes(rng.randbytes(size - half) + text)


def build(tmp: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """The origin, the fenced worktree (with every kind of change) and its harness home."""
    rng = random.Random(7)
    seed = tmp / "seed"
    seed.mkdir()
    git(seed, "init", "-q")
    fill(seed, "src", COMMITTED_FILES, COMMITTED_SIZE, rng)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "base")
    origin = tmp / "origin.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(origin))
    git(origin, "gc", "-q")
    shutil.rmtree(seed)
    worktree = tmp / "fenced" / "worktree"
    worktree.parent.mkdir()
    git(tmp, "clone", "-q", origin.as_uri(), str(worktree))
    (worktree / "src" / "local.txt").write_text("a local commit\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "local")
    (worktree / "src" / "local.txt").write_text("an uncommitted change\n")
    fill(worktree, "untracked", UNTRACKED_FILES, UNTRACKED_SIZE, rng)
    home = session_home(tmp / "fenced" / "home", worktree, 500)
    return origin, worktree, home


def session_home(home: pathlib.Path, worktree: pathlib.Path, records: int) -> pathlib.Path:
    """A harness home holding a Claude Code session of `records` records of ~220 bytes."""
    folder = home / ".claude" / "projects" / claude_code.project_key(worktree)
    folder.mkdir(parents=True)
    lines = [json.dumps({"type": "user", "n": n, "text": "x" * 200}) for n in range(records)]
    (folder / f"{SESSION_ID}.jsonl").write_text("".join(f"{line}\n" for line in lines))
    return home


def fake_claude(tmp: pathlib.Path) -> str:
    path = tmp / "bin" / "claude"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\nprint('2.1.3 (Claude Code)')\n")
    path.chmod(0o755)
    return str(path)


def launch_record(
    origin: pathlib.Path, claude: str, directive: directives.Directive, execution: tuple[str, int]
) -> launching.LaunchRecord:
    return launching.LaunchRecord(
        scope=launching.Scope("bench", "eng-1", "t-1", 1, *execution),
        directive=directive,
        projects=(launching.Project("app", origin.as_uri()),),
        worker_image="bench:1",
        harness=claude_code.NAME,
        restores_from_generation=1,
        restore_grant="",
        capture_grant="",
        command=(claude, "--model", "opus"),
        checkpoint_remote=False,
        store_addr=None,
    )


async def restore_once(
    launch: launching.LaunchRecord, storage: settings.StorageSettings, target: pathlib.Path
) -> float:
    attempt = restores.Attempt(target / "worktree", target, target / "home")
    attempt.worktree.mkdir(parents=True)
    attempt.harness_home.mkdir()
    started = time.perf_counter()
    async with fetching.granted_store(launch, storage, "") as store:
        async for event in restoring.restore(launch, attempt, store):
            result = event
    elapsed = time.perf_counter() - started
    if not isinstance(result, restores.Ready):
        raise SystemExit(f"restore refused: {result}")
    return elapsed


def baseline_once(origin: pathlib.Path, tar: pathlib.Path, target: pathlib.Path) -> float:
    target.mkdir(parents=True)
    started = time.perf_counter()
    git(target, "clone", "-q", origin.as_uri(), str(target / "worktree"))
    subprocess.run(["tar", "-xf", str(tar), "-C", str(target / "worktree")], check=True)
    return time.perf_counter() - started


async def measure(
    name: str,
    tmp: pathlib.Path,
    origin: pathlib.Path,
    worktree: pathlib.Path,
    home: pathlib.Path,
    segment_bytes: int | None = None,
) -> None:
    """Capture once (not timed), then the restore and the baseline in `ROUNDS` pairs."""
    claude = fake_claude(tmp)
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp / "store")})
    fenced = launch_record(origin, claude, directives.FRESH, ("e-1", 1))
    attempt = restores.Attempt(worktree, worktree.parent, home)
    capturer = capturing.Capturer(fenced, attempt, storage, segment_bytes=segment_bytes)
    captured = await capturer.capture()
    segments, runs = await segment_count(tmp / "store", captured.checkpoint_id)
    directive = directives.Directive(
        captured.checkpoint_id, directives.Continuity.NATIVE, SESSION_ID, captured.watermark
    )
    replacement = launch_record(origin, claude, directive, ("e-2", 2))
    tar = tmp / "untracked.tar"
    with tarfile.open(tar, "w") as archive:
        archive.add(worktree / "untracked", arcname="untracked")
    restore_times, baselines = [], []
    for round_ in range(ROUNDS):
        # Every round's trees stay until the end (the temporary folder goes then): a run
        # right after deleting a few hundred MiB was measured about a quarter slower on a
        # file system that discards freed blocks, whichever of the two it was.
        for which in ("restore", "baseline") if round_ % 2 == 0 else ("baseline", "restore"):
            os.sync()
            if which == "restore":
                target = tmp / f"restore-{round_}"
                restore_times.append(await restore_once(replacement, storage, target))
            else:
                baselines.append(baseline_once(origin, tar, tmp / f"baseline-{round_}"))
    ratios = sorted(r / b for r, b in zip(restore_times, baselines, strict=True))
    ratio = ratios[len(ratios) // 2]
    total = COMMITTED_FILES * COMMITTED_SIZE + UNTRACKED_FILES * UNTRACKED_SIZE
    files = COMMITTED_FILES + UNTRACKED_FILES
    print(
        f"{name}: worktree {total / 2**20:.0f} MiB in {files} files, {ROUNDS} rounds, "
        f"session in {segments} segment(s), the record naming {runs} index object(s)"
    )
    print("restore  s: " + ", ".join(f"{s:.3f}" for s in restore_times))
    print("baseline s: " + ", ".join(f"{s:.3f}" for s in baselines) + " (git clone + tar)")
    print("ratios    : " + ", ".join(f"{r:.3f}" for r in ratios))
    verdict = "ok" if ratio <= TARGET else "short"
    print(f"RESULT {name} ratio={ratio:.3f} target={TARGET} {verdict}")


async def segment_count(store: pathlib.Path, checkpoint_id: str) -> tuple[int, int]:
    """How many segments the session file of a stored checkpoint has, and how many index
    objects its record names directly."""
    backend = backends.open_backend(str(store), None, None)
    assert backend is not None
    try:
        scoped = backend.scoped(storing.StoreScope("bench", "t-1", 1))
        data = await scoped.get_manifest(checkpoint_id)
        record, _ = records.decode_manifest(data or b"")
        expanded = await index_reading.expand(scoped, record)
    finally:
        await backend.aclose()
    if isinstance(expanded, index_reading.Reason):
        raise SystemExit(f"the captured checkpoint does not read: {expanded}")
    item = record["native"]["files"][0]
    return len(expanded["native"]["files"][0]["segments"]), len(item.get("index", ()))


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="agentihooks-bench-restore-") as name:
        tmp = pathlib.Path(name)
        origin, worktree, home = build(tmp)
        (tmp / "plain").mkdir()
        await measure("restore", tmp / "plain", origin, worktree, home)
        (tmp / "chain").mkdir()
        # 5 MiB of records split at 1 KiB: the session in 5,000 segments.
        records = CHAIN_SEGMENTS * CHAIN_SEGMENT // 220
        long_home = session_home(tmp / "chain" / "home", worktree, records)
        await measure("restore_chain", tmp / "chain", origin, worktree, long_home, CHAIN_SEGMENT)


if __name__ == "__main__":
    asyncio.run(main())
