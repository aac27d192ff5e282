"""The demo's stand-in for Claude Code (installed as `claude` on the demo's PATH).

It behaves like the real CLI where the recovery cares: `claude --version` prints a qualified
version, a first run writes a native session in `$HOME/.claude/projects/<key>/`, changes the
worktree and then fails; `claude --resume ID` reopens that same session file and finishes.
No model is called: the "conversation" is a few fixed records.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import time
import uuid

VERSION = "2.1.3 (Claude Code)"


def project_key(cwd: pathlib.Path) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd.resolve()))


def sessions(cwd: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(os.environ["HOME"]) / ".claude" / "projects" / project_key(cwd)


def record(kind: str, text: str) -> str:
    return json.dumps({"type": kind, "message": {"role": kind, "content": text}})


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print(VERSION)
        return 0
    cwd = pathlib.Path.cwd()
    seat = os.environ.get("AGENTIHOOKS_SEAT", "?")
    if "--resume" in argv:
        session = argv[argv.index("--resume") + 1]
        path = sessions(cwd) / f"{session}.jsonl"
        lines = path.read_bytes().split(b"\n")
        kept = [line for line in lines if line]
        with path.open("a") as f:
            f.write(record("assistant", "Resumed where I left off; finishing the task.") + "\n")
        (cwd / "RESUMED").write_text(f"resumed session {session} after {len(kept)} records\n")
        print(f"demo agent {seat}: resumed session {session} with {len(kept)} records", flush=True)
        return 0
    if seat == "eng-2" and os.environ.get("AGENTIHOOKS_GENERATION") == "1":
        print("demo agent eng-2: failing before any conversation started", flush=True)
        return 1
    if os.environ.get("AGENTIHOOKS_GENERATION") != "1":
        print(f"demo agent {seat}: starting fresh", flush=True)
        (cwd / "FRESH").write_text("started fresh\n")
        return 0
    folder = sessions(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    session = str(uuid.uuid4())
    path = folder / f"{session}.jsonl"
    with path.open("w") as f:
        f.write(record("user", os.environ.get("AGENTIHOOKS_TASK_TEXT", "the task")) + "\n")
        f.write(record("assistant", "Working on it: editing notes.md.") + "\n")
    (cwd / "notes.md").write_text("# progress\n- step 1 done\n")
    print(f"demo agent {seat}: session {session} started; working", flush=True)
    # Give the restorer sidecar time to capture a checkpoint, then fail like a crashed worker.
    time.sleep(float(os.environ.get("DEMO_WORK_SECONDS", "4")))
    print(f"demo agent {seat}: crashing", flush=True)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
