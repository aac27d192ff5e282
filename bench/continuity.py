"""What checkpoints store and upload over a long session: append-only (schema version 3) against
whole-file captures (version 2), both measured in the same run over the same session.

A Claude Code session (the real file format; a stand-in writes it) grows by 64 KiB of complete
records, and after each growth the attempt captures, as the sidecar does on its interval. Two
real Capturers capture the same states, each into its own local checkpoint folder:

- append-only: the default writer (version 3): session file and transcript as chains, only the
  bytes appended since the previous checkpoint uploaded;
- baseline: `schema_version=2`, which stores the session file and the transcript whole again at
  every capture (the behaviour issue 21 measured: 10.6x the session's bytes after 20 captures).

Measured, from the checkpoint folders themselves and from every `put_object` / `put_manifest`
call the store received (objects and records both count):

- stored / final session bytes, after the issue's 20 captures and after a longer session;
- uploaded / appended bytes: what the captures after the first sent, over what the session grew
  by meanwhile.

Records list every segment (a record needs no other record), so each record grows with its
chain: the record bytes are printed apart from the object bytes, so their share shows.

Prints the absolute figures, then:
``RESULT continuity_stored ratio=<stored/final, long session> target=1.2 ok|short``,
``RESULT continuity_uploaded ratio=<uploaded/appended, long session> target=1.2 ok|short``
(and the same two for the issue's 20 captures, with the whole-file baseline beside them).

Run: .venv/bin/python bench/continuity.py   (not a test: timings stay out of `make test`)
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "services" / "proto")]

from services.common import directives, settings  # noqa: E402
from services.common.checkpoints import local  # noqa: E402
from services.restorer import capturing, launching, restoring  # noqa: E402
from services.restorer.harness import claude_code  # noqa: E402

TARGET = 1.2
GROWTH = 64 * 1024
ISSUE_CAPTURES = 20
LONG_CAPTURES = 120
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
    attempt = restoring.Attempt(scene.worktree, scene.worktree.parent, scene.home)
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

    def crossing(self) -> int | None:
        """After how many captures of `GROWTH` the stored ratio would pass `TARGET`, from the
        measured record sizes (each record lists every segment, so it grows by a segment entry
        per capture and the records' total with the square of the captures)."""
        step = (self.last_record - self.first_record) / self.captures
        start = self.final - GROWTH * self.captures
        for n in range(1, 100_000):
            records_total = n * self.first_record + step * n * (n + 1) / 2
            if records_total > (TARGET - 1) * (start + GROWTH * n):
                return n
        return None

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
        long = await session_run(tmp / "long", LONG_CAPTURES)
    show("issue's pattern", issue)
    show("long session", long)
    print(
        f"whole-file baseline stored {issue[2].stored:.2f}x after {ISSUE_CAPTURES} captures, "
        f"{long[2].stored:.2f}x after {LONG_CAPTURES}; append-only "
        f"{issue[3].stored:.2f}x and {long[3].stored:.2f}x"
    )
    print(
        f"append-only records: {long[3].first_record} bytes at the first capture, "
        f"{long[3].last_record} at capture {LONG_CAPTURES + 1}; at that pace the stored ratio "
        f"passes {TARGET} after about {long[3].crossing()} captures of {GROWTH // 1024} KiB"
    )
    result("continuity_stored_issue", issue[3].stored)
    result("continuity_uploaded_issue", issue[3].upload)
    result("continuity_stored", long[3].stored)
    result("continuity_uploaded", long[3].upload)


if __name__ == "__main__":
    asyncio.run(main())
