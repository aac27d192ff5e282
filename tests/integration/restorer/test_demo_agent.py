"""The demo's stand-in for Claude Code, run as a process: it must behave like the real CLI
(2.1.112) wherever the demo relies on it, so the demo cannot pass where the real CLI fails."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

from services.restorer.harness import claude_code

AGENT = pathlib.Path(__file__).parents[3] / "services" / "demo_agent.py"
MISSING = "0b0c5e2a-7d1f-4c39-9a55-1f2e3d4c5b6a"
NO_PROMPT = (
    "Error: No deferred tool marker found in the resumed session. Either the session was not "
    "deferred, the marker is stale (tool already ran), or it exceeds the tail-scan window. "
    "Provide a prompt to continue the conversation.\n"
)
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def run(
    args: list[str], cwd: pathlib.Path, home: pathlib.Path, config: pathlib.Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTIHOOKS_") and k != "CLAUDE_CONFIG_DIR"
    }
    env["HOME"] = str(home)
    if config is not None:
        env["CLAUDE_CONFIG_DIR"] = str(config)
    return subprocess.run(
        [sys.executable, str(AGENT), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def folder(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    path = tmp_path / name
    path.mkdir()
    return path


def sessions(projects: pathlib.Path, cwd: pathlib.Path) -> list[pathlib.Path]:
    return sorted((projects / claude_code.project_key(cwd)).glob("*.jsonl"))


def records(path: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().split("\n") if line]


def start(cwd: pathlib.Path, home: pathlib.Path, config: pathlib.Path | None = None) -> str:
    """A first `claude -p "first prompt"`; the new session's id."""
    done = run(["-p", "first prompt"], cwd, home, config)
    assert done.returncode == 0, done.stderr
    projects = (config or home / ".claude") / "projects"
    (path,) = sessions(projects, cwd)
    return path.stem


def test_the_version_is_the_real_one(tmp_path: pathlib.Path) -> None:
    done = run(["--version"], tmp_path, tmp_path)
    assert (done.returncode, done.stdout) == (0, "2.1.112 (Claude Code)\n")
    assert claude_code.ClaudeCode().qualifies(done.stdout.split()[0])


def test_a_first_turn_is_written_in_the_real_format(tmp_path: pathlib.Path) -> None:
    """Under `~/.claude/projects/<key>/<id>.jsonl`: the queue operations, then a user and an
    assistant record chained by parentUuid, each naming the session, time, cwd and version."""
    home, cwd = folder(tmp_path, "home"), folder(tmp_path, "A")
    session = start(cwd, home)
    enqueue, dequeue, user, assistant = records(
        home / ".claude" / "projects" / claude_code.project_key(cwd) / f"{session}.jsonl"
    )
    assert enqueue["type"] == dequeue["type"] == "queue-operation"
    assert (enqueue["operation"], enqueue["content"]) == ("enqueue", "first prompt")
    assert dequeue["operation"] == "dequeue"
    assert user["type"] == "user" and user["parentUuid"] is None
    assert user["message"] == {"role": "user", "content": "first prompt"}
    assert assistant["type"] == "assistant" and assistant["parentUuid"] == user["uuid"]
    assert assistant["message"]["role"] == "assistant"
    assert assistant["message"]["content"][0]["type"] == "text"
    assert user["uuid"] != assistant["uuid"]
    for record in (enqueue, dequeue, user, assistant):
        assert record["sessionId"] == session
        assert TIMESTAMP.fullmatch(record["timestamp"])
    for record in (user, assistant):
        assert record["cwd"] == os.path.realpath(cwd) and record["version"] == "2.1.112"
        assert record["isSidechain"] is False


def test_a_resume_without_a_prompt_is_refused_as_the_real_cli_does(
    tmp_path: pathlib.Path,
) -> None:
    """`claude --resume ID -p` (and the stand-in's interactive form too): exit 1, the real
    message on stderr, nothing appended."""
    home, cwd = folder(tmp_path, "home"), folder(tmp_path, "A")
    session = start(cwd, home)
    (path,) = sessions(home / ".claude" / "projects", cwd)
    before = path.read_bytes()
    for args in (["--resume", session, "-p"], ["--resume", session]):
        done = run(args, cwd, home)
        assert (done.returncode, done.stderr) == (1, NO_PROMPT)
    assert path.read_bytes() == before
    assert not (cwd / "RESUMED").exists()


def test_the_restorers_resume_command_appends_to_the_same_session(
    tmp_path: pathlib.Path,
) -> None:
    """`claude --resume ID [original options] -- PROMPT`, as the restorer builds it: the new
    turn goes to the same file, chained to its last record."""
    home, cwd = folder(tmp_path, "home"), folder(tmp_path, "A")
    session = start(cwd, home)
    (path,) = sessions(home / ".claude" / "projects", cwd)
    before = records(path)
    original = ["claude", "--model", "opus", "-p", "first prompt"]
    command = claude_code.ClaudeCode().resume_command(original, session, "-go on")
    done = run(command[1:], cwd, home)
    assert done.returncode == 0, done.stderr
    assert sessions(home / ".claude" / "projects", cwd) == [path]
    after = records(path)
    assert after[: len(before)] == before
    added = after[len(before) :]
    assert [r["type"] for r in added] == ["queue-operation", "queue-operation", "user", "assistant"]
    user, assistant = added[2:]
    assert user["message"]["content"] == "-go on"
    assert user["parentUuid"] == before[-1]["uuid"]
    assert assistant["parentUuid"] == user["uuid"]
    assert {r["sessionId"] for r in after} == {session}


def test_a_missing_session_is_no_conversation(tmp_path: pathlib.Path) -> None:
    """No file under the cwd's key (none at all, or one under another folder's key): exit 1."""
    home, a, b = folder(tmp_path, "home"), folder(tmp_path, "A"), folder(tmp_path, "B")
    session = start(a, home)
    for sid, cwd in ((MISSING, a), (session, b)):
        done = run(["--resume", sid, "-p", "--", "go on"], cwd, home)
        assert done.returncode == 1
        assert done.stderr == f"No conversation found with session ID: {sid}\n"


def test_records_without_uuid_or_timestamp_are_no_conversation(tmp_path: pathlib.Path) -> None:
    """The real CLI finds no conversation in user/assistant records lacking `uuid` or
    `timestamp` (the old stand-in's format); `sessionId` it does not check (observed, 2.1.112)."""
    home, cwd = folder(tmp_path, "home"), folder(tmp_path, "A")
    key = home / ".claude" / "projects" / claude_code.project_key(cwd)
    key.mkdir(parents=True)
    user = {"type": "user", "message": {"role": "user", "content": "task"}}
    ids = {"uuid": "11111111-1111-4111-8111-111111111111"}
    stamp = {"timestamp": "2026-01-01T00:00:00.000Z"}
    session = {"sessionId": MISSING}
    for record, found in (
        (user, False),
        ({**user, **stamp, **session}, False),
        ({**user, **ids, **session}, False),
        ({**user, **ids, **stamp}, True),
    ):
        (key / f"{MISSING}.jsonl").write_text(json.dumps(record) + "\n")
        done = run(["--resume", MISSING, "-p"], cwd, home)
        expected = NO_PROMPT if found else f"No conversation found with session ID: {MISSING}\n"
        assert (done.returncode, done.stderr) == (1, expected)


def test_claude_config_dir_holds_the_sessions_when_set(tmp_path: pathlib.Path) -> None:
    """With CLAUDE_CONFIG_DIR set, sessions are `$CLAUDE_CONFIG_DIR/projects/<key>/`, not under
    `~/.claude`; a resume without the variable does not find them."""
    home, cwd, config = folder(tmp_path, "home"), folder(tmp_path, "A"), tmp_path / "config"
    session = start(cwd, home, config)
    assert not (home / ".claude").exists()
    done = run(["--resume", session, "--", "go on"], cwd, home)
    assert done.returncode == 1 and "No conversation found" in done.stderr
    done = run(["--resume", session, "--", "go on"], cwd, home, config)
    assert done.returncode == 0, done.stderr
    assert (
        len(records(config / "projects" / claude_code.project_key(cwd) / f"{session}.jsonl")) == 6
    )
