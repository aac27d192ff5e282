"""A stand-in for Claude Code that keeps writing session records until it is killed.

Installed as `claude` (a wrapper script runs this file with the image's Python), it behaves
like `services.demo_agent` (the real 2.1 session format and `--resume ID -- PROMPT`) except that
a first run does not stop after one turn: it goes on appending records, one line at a time, at
random moments (`WRITER_INTERVAL_S`, the mean pause between two records), as an agent at work
does. Each record goes to the session file in two writes `WRITER_RECORD_S` apart (a real CLI
writes a large record in pieces), so a kill can leave a record half written: the one record
being written.

A witness of what it wrote, for tests and benchmarks, goes to the folder `WRITER_WITNESS_DIR`
(outside the Pod's volumes, so it outlives the Pod):

- `written-<generation>.jsonl`: every record, appended once its whole line is in the session
  file (so it lags the session file by at most that one record);
- `restored-<generation>.jsonl`: what a `--resume` run found in the session file, before it
  appends its own turn: what the restore delivered;
- `pid-<generation>`: this process's pid, once the first record is written.

Failure modes (`WRITER_FAILURE`): `none` writes until killed (SIGTERM ends it as the default
action does); `oom`, once the file `WRITER_FAIL_AFTER_FILE` exists, also grows its memory in a
second thread while it goes on writing, until the kernel's OOM killer ends it. With
`WRITER_BURST_FILE` set, a first run writes its first turn, waits for that file, then writes
`WRITER_BURST` records at once, writes `burst-<generation>` in the witness folder and waits to
be killed.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import sys
import threading
import time
import uuid
from typing import Any

from services import demo_agent


def _witness(name: str) -> pathlib.Path | None:
    folder = os.environ.get("WRITER_WITNESS_DIR")
    if not folder:
        return None
    generation = os.environ.get("AGENTIHOOKS_GENERATION", "0")
    return pathlib.Path(folder) / f"{name}-{generation}"


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


class Writer:
    """Appends records to one session file and, once each is whole there, to the witness."""

    def __init__(self, session: pathlib.Path) -> None:
        session.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(session, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        witness = _witness("written")
        self._witness = (
            None
            if witness is None
            else os.open(witness.with_suffix(".jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        )
        self.count = 0
        self._pause = float(os.environ.get("WRITER_RECORD_S", "0"))

    def write(self, record: dict[str, Any]) -> None:
        line = _line(record)
        cut = len(line) // 2
        os.write(self._fd, line[:cut])
        if self._pause:
            time.sleep(self._pause)
        os.write(self._fd, line[cut:])
        if self._witness is not None:
            os.write(self._witness, line)
        self.count += 1


def _grow() -> None:
    """Take memory until the kernel's OOM killer ends this process."""
    hoard = []
    while True:
        chunk = bytearray(4 * 1024 * 1024)
        for i in range(0, len(chunk), 4096):
            chunk[i] = 1
        hoard.append(chunk)
        time.sleep(0.01)


def _records(session: str, cwd: str, parent: str | None, turn: int) -> list[dict[str, Any]]:
    prompt = f"Continue with step {turn}"
    answer = f"Step {turn} done: {uuid.uuid4().hex * 4}"
    return [
        r
        for r in demo_agent.turn(session, cwd, parent, prompt, answer, printing=False)
        if r.get("uuid")
    ]


def _resume(argv: list[str]) -> int:
    """Keep what the restore delivered, then answer as the demo's stand-in does."""
    _, resume, _ = demo_agent.parse(argv)
    restored = _witness("restored")
    if resume and restored is not None:
        path = demo_agent.session_folder(os.getcwd()) / f"{resume}.jsonl"
        data = path.read_bytes() if path.exists() else b""
        # Whole or not at all: a reader never sees it half written.
        partial = restored.with_suffix(".partial")
        partial.write_bytes(data)
        partial.replace(restored.with_suffix(".jsonl"))
    return demo_agent.main(argv)


def main(argv: list[str]) -> int:
    printing, resume, prompt = demo_agent.parse(argv)
    options = argv[: argv.index("--")] if "--" in argv else argv
    if "--version" in options or "-v" in options:
        return demo_agent.main(argv)
    if resume is not None:
        return _resume(argv)
    if os.environ.get("AGENTIHOOKS_GENERATION", "1") != "1":
        return demo_agent.main(argv)
    cwd = os.getcwd()
    session = str(uuid.uuid4())
    prompt = prompt or os.environ.get("AGENTIHOOKS_TASK_TEXT", "the task")
    writer = Writer(demo_agent.session_folder(cwd) / f"{session}.jsonl")
    first = demo_agent.turn(session, cwd, None, prompt, "Working on it.", printing)
    for record in first:
        writer.write(record)
    (pathlib.Path(cwd) / "notes.md").write_text("# progress\n- step 1 done\n")
    pid = _witness("pid")
    if pid is not None:
        pid.write_text(str(os.getpid()))
    print(f"record writer: session {session} started", flush=True)
    parent = first[-1]["uuid"]
    burst = os.environ.get("WRITER_BURST_FILE")
    if burst:
        while not os.path.exists(burst):
            time.sleep(0.02)
        for turn in range(int(os.environ.get("WRITER_BURST", "10")) // 2):
            for record in _records(session, cwd, parent, turn + 2):
                writer.write(record)
                parent = record["uuid"]
        done = _witness("burst")
        if done is not None:
            done.write_text(str(writer.count))
        while True:
            time.sleep(3600)
    mean = float(os.environ.get("WRITER_INTERVAL_S", "0.1"))
    fail_after = os.environ.get("WRITER_FAIL_AFTER_FILE")
    growing = os.environ.get("WRITER_FAILURE") != "oom"
    turn = 2
    while True:
        for record in _records(session, cwd, parent, turn):
            time.sleep(random.uniform(0, 2 * mean))
            writer.write(record)
            parent = record["uuid"]
        turn += 1
        if not growing and (not fail_after or os.path.exists(fail_after)):
            growing = True
            print("record writer: growing past the memory limit", flush=True)
            threading.Thread(target=_grow, daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
