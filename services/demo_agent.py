"""The demo's stand-in for Claude Code (installed as `claude` on the demo's PATH).

No model is called: every turn is one user record and one fixed assistant record. Everything
else the demo relies on follows the real CLI, as observed with Claude Code 2.1.112:

- `claude --version` prints `2.1.112 (Claude Code)`.
- A session is `<config>/projects/<key>/<session id>.jsonl`, where `<config>` is
  `$CLAUDE_CONFIG_DIR` when set, else `~/.claude`, and `<key>` is the physical working
  directory with every character outside `[A-Za-z0-9]` replaced by `-` (one per UTF-16 unit).
- One JSON record per line: in print mode (`-p`) a `queue-operation` enqueue and dequeue, then
  a `user` and an `assistant` record, each with `uuid`, `parentUuid` (the previous record's
  `uuid`, null for the first), `sessionId`, `timestamp`, `cwd`, `version` and a `message`
  object (the assistant's content a list of text blocks).
- `claude --resume ID [options] -- PROMPT` appends the new turn to that same file, chained to
  its last record. The file is looked up under the key of the directory it runs in; missing,
  or holding no `user`/`assistant` record with a `uuid` and a `timestamp` (2.1.112 does not
  check `sessionId`), it exits 1 printing `No conversation found with session ID: ID` to
  stderr.
- A resume without a prompt exits 1 with `Error: No deferred tool marker found …` on stderr.
  That is the real print-mode answer; an interactive real CLI would wait at its terminal
  instead, which a worker has none of, so the stand-in refuses it the same way.
- A print-mode run without a prompt argument reads its prompt from a non-terminal stdin.

Demo behaviour (not the real CLI's): a first run without a prompt takes the seat's task text
(`AGENTIHOOKS_TASK_TEXT`) as its prompt. Generation 1 of eng-1 writes its session, changes the
worktree and then crashes; generation 1 of eng-2 fails before any conversation; any later
fresh generation writes `FRESH`; a resume writes `RESUMED` and exits 0. With
`DEMO_FAILURE=oom` the crash is a memory hog the kernel's OOM killer ends (for tests with a
memory limit). With `DEMO_FAIL_AFTER_FILE` set the failure waits (up to 10 minutes) until that
file exists. Outside a worker (no `AGENTIHOOKS_GENERATION`) a first run writes its session and
exits 0.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import subprocess
import sys
import time
import uuid
from typing import Any

VERSION = "2.1.112"
TAKES_VALUE = frozenset(
    {"--model", "--permission-mode", "--output-format", "--input-format", "--max-turns"}
)
NO_PROMPT = (
    "Error: No deferred tool marker found in the resumed session. Either the session was not"
    " deferred, the marker is stale (tool already ran), or it exceeds the tail-scan window."
    " Provide a prompt to continue the conversation."
)


def project_key(cwd: str) -> str:
    """The project folder name (keys over 200 characters, which the real CLI hashes, are not
    reproduced: the demo's paths are short)."""
    return "".join(
        c if c.isascii() and c.isalnum() else "--" if ord(c) > 0xFFFF else "-" for c in cwd
    )


def session_folder(cwd: str) -> pathlib.Path:
    config = os.environ.get("CLAUDE_CONFIG_DIR")
    root = pathlib.Path(config) if config else pathlib.Path.home() / ".claude"
    return root / "projects" / project_key(cwd)


def parse(argv: list[str]) -> tuple[bool, str | None, str | None]:
    """(print mode, the `--resume` value or None, the prompt or None).

    Only the options listed in TAKES_VALUE consume the next word; `--` ends the options.
    """
    printing, resume, prompt = False, None, None
    i = 0
    while i < len(argv):
        word, following = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        i += 1
        if word == "--":
            prompt = following
            break
        if word in ("-p", "--print"):
            printing = True
        elif word.startswith("--resume="):
            resume = word.partition("=")[2]
        elif word in ("-r", "--resume"):
            # An optional value: a following option means "no id" (the real session picker).
            if following is None or following.startswith("-"):
                resume = ""
            else:
                resume, i = following, i + 1
        elif word in TAKES_VALUE:
            i += 1
        elif not word.startswith("-") and prompt is None:
            prompt = word
    return printing, resume, prompt


def now() -> str:
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def git_branch(cwd: str) -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=cwd, capture_output=True, text=True
        )
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def turn(
    session: str, cwd: str, parent: str | None, prompt: str, answer: str, printing: bool
) -> list[dict[str, Any]]:
    """The records one turn adds, chained to `parent` (the last record's uuid), with the real
    CLI's keys in its order."""
    out: list[dict[str, Any]] = []
    if printing:
        for operation in ("enqueue", "dequeue"):
            queued = {"type": "queue-operation", "operation": operation, "timestamp": now()}
            content = {"content": prompt} if operation == "enqueue" else {}
            out.append({**queued, "sessionId": session, **content})
    where = {
        "userType": "external",
        "entrypoint": "sdk-cli" if printing else "cli",
        "cwd": cwd,
        "sessionId": session,
        "version": VERSION,
        "gitBranch": git_branch(cwd),
    }
    user_id = str(uuid.uuid4())
    out.append(
        {
            "parentUuid": parent,
            "isSidechain": False,
            "promptId": str(uuid.uuid4()),
            "type": "user",
            "message": {"role": "user", "content": prompt},
            "uuid": user_id,
            "timestamp": now(),
            "permissionMode": "default",
            **where,
        }
    )
    message = {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": "demo-stand-in",
        "content": [{"type": "text", "text": answer}],
        "stop_reason": "end_turn",
    }
    out.append(
        {
            "parentUuid": user_id,
            "isSidechain": False,
            "type": "assistant",
            "message": message,
            "uuid": str(uuid.uuid4()),
            "timestamp": now(),
            **where,
        }
    )
    return out


def load(path: pathlib.Path) -> list[dict[str, Any]] | None:
    """The file's records, or None when the real CLI would find no conversation in it."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (FileNotFoundError, NotADirectoryError):
        return None
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    found = any(
        r.get("type") in ("user", "assistant") and r.get("uuid") and r.get("timestamp")
        for r in records
    )
    return records if found else None


def append(path: pathlib.Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.writelines(
            json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records
        )


def main(argv: list[str]) -> int:
    options = argv[: argv.index("--")] if "--" in argv else argv
    if "--version" in options or "-v" in options:
        # A test can give the "image" another version (DEMO_VERSION_FILE names a file holding
        # it), as a worker image with another Claude Code build would report.
        version_file = os.environ.get("DEMO_VERSION_FILE", "")
        version = VERSION
        if version_file and os.path.exists(version_file):
            version = pathlib.Path(version_file).read_text().strip() or VERSION
        print(f"{version} (Claude Code)")
        return 0
    printing, resume, prompt = parse(argv)
    if prompt is None and printing and not sys.stdin.isatty():
        prompt = sys.stdin.read() or None
    cwd = os.getcwd()
    seat = os.environ.get("AGENTIHOOKS_SEAT", "?")
    if resume is not None:
        if not resume:
            print("demo stand-in: the session picker (--resume without an id) is not reproduced")
            return 1
        path = session_folder(cwd) / f"{resume}.jsonl"
        records = load(path)
        if records is None:
            print(f"No conversation found with session ID: {resume}", file=sys.stderr)
            return 1
        if prompt is None:
            print(NO_PROMPT, file=sys.stderr)
            return 1
        parent = next((r["uuid"] for r in reversed(records) if r.get("uuid")), None)
        answer = "Resumed where I left off; finishing the task."
        append(path, turn(resume, cwd, parent, prompt, answer, printing))
        (pathlib.Path(cwd) / "RESUMED").write_text(
            f"resumed session {resume} after {len(records)} records with the prompt {prompt!r}\n"
        )
        print(f"demo agent {seat}: resumed session {resume} with {len(records)} records")
        return 0
    generation = os.environ.get("AGENTIHOOKS_GENERATION")
    if seat == "eng-2" and generation == "1":
        print("demo agent eng-2: failing before any conversation started", flush=True)
        return 1
    if generation not in (None, "1"):
        print(f"demo agent {seat}: starting fresh", flush=True)
        (pathlib.Path(cwd) / "FRESH").write_text("started fresh\n")
        return 0
    session = str(uuid.uuid4())
    prompt = prompt or os.environ.get("AGENTIHOOKS_TASK_TEXT", "the task")
    answer = "Working on it: editing notes.md."
    append(
        session_folder(cwd) / f"{session}.jsonl", turn(session, cwd, None, prompt, answer, printing)
    )
    (pathlib.Path(cwd) / "notes.md").write_text("# progress\n- step 1 done\n")
    print(f"demo agent {seat}: session {session} started; working", flush=True)
    if generation is None:
        return 0
    # Give the restorer sidecar time to capture a checkpoint, then fail like a crashed worker.
    time.sleep(float(os.environ.get("DEMO_WORK_SECONDS", "4")))
    # A test that must fail only once a checkpoint with the conversation was reported names a
    # file it creates then (a loaded machine may capture later than a few seconds in).
    wait_for = os.environ.get("DEMO_FAIL_AFTER_FILE")
    deadline = time.monotonic() + 600
    while wait_for and not os.path.exists(wait_for) and time.monotonic() < deadline:
        time.sleep(0.1)
    if os.environ.get("DEMO_FAILURE") == "oom":
        # Grow past the container's memory limit: the kernel's OOM killer ends this process.
        print(f"demo agent {seat}: growing past the memory limit", flush=True)
        hoard = []
        while True:
            hoard.append(bytearray(64 * 1024 * 1024))
    print(f"demo agent {seat}: crashing", flush=True)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
