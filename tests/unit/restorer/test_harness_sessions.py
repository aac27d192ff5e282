"""Harness session files: where they land from the replacement's cwd, and onboarding."""

from __future__ import annotations

import json
import os
import pathlib
import stat

import pytest

from services.restorer import paths, transcripts
from services.restorer.harness import base, claude_code, codex
from tests.support import trees

SID = "0b0c5e2a-7d1f-4c39-9a55-1f2e3d4c5b6a"
OTHER = "11111111-2222-3333-4444-555555555555"
RECORDS = [
    json.dumps({"type": "user", "message": "a raw\u2028line separator"}, ensure_ascii=False),
    json.dumps({"type": "assistant", "message": "and a\u2029paragraph"}, ensure_ascii=False),
]
CONVERSATION = transcripts.archive(RECORDS)


_tree = trees.tree


# --- Claude Code ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cwd", "key"),
    [
        ("/work/app", "-work-app"),
        ("/home/u/.local/my_proj", "-home-u--local-my-proj"),
        ("/srv/a b/c@d+e~f", "-srv-a-b-c-d-e-f"),
        ("/srv/Ünï", "-srv--n-"),
        ("/srv/\U0001f600", "-srv---"),
        ("/srv/with-dash", "-srv-with-dash"),
    ],
)
def test_claude_code_project_key(cwd: str, key: str) -> None:
    """The key is the cwd with every character outside [A-Za-z0-9] replaced by `-`."""
    assert claude_code.project_key(cwd) == key


def test_claude_code_long_keys_are_cut_and_hashed() -> None:
    """A key over 200 characters is cut to 200 and suffixed with a base-36 hash."""
    long_path = "/w/" + "a" * 300
    key = claude_code.project_key(long_path)
    assert key.startswith("-w-" + "a" * 197 + "-")
    assert len(key) > 201
    assert key != claude_code.project_key(long_path + "b")


def _claude_session(home: pathlib.Path, cwd: str) -> None:
    folder = home / ".claude" / "projects" / claude_code.project_key(cwd)
    folder.mkdir(parents=True)
    (folder / f"{SID}.jsonl").write_bytes(CONVERSATION)
    (folder / SID / "subagents").mkdir(parents=True)
    (folder / SID / "subagents" / "agent-a1.jsonl").write_bytes(b'{"sub": 1}\n')
    (folder / f"{OTHER}.jsonl").write_bytes(b'{"other": 1}\n')


def test_claude_code_capture_holds_the_session_and_its_folder(tmp_path: pathlib.Path) -> None:
    """Captured paths are relative to the harness home, under `.claude/projects/{key}/`."""
    home = tmp_path / "home"
    _claude_session(home, "/work/app")
    files = claude_code.ClaudeCode().capture_session(home, pathlib.Path("/work/app"), SID)
    assert [f.path for f in files] == [
        f".claude/projects/-work-app/{SID}.jsonl",
        f".claude/projects/-work-app/{SID}/subagents/agent-a1.jsonl",
    ]
    assert files[0].data == CONVERSATION
    assert "separator" not in repr(files[0])  # conversation content stays out of reprs


def test_claude_code_missing_session_is_refused(tmp_path: pathlib.Path) -> None:
    """Capturing a session that has no file fails without naming paths."""
    with pytest.raises(base.HarnessError):
        claude_code.ClaudeCode().capture_session(tmp_path, pathlib.Path("/work/app"), SID)


def test_claude_code_restore_rekeys_to_the_new_worktree(tmp_path: pathlib.Path) -> None:
    """Claude Code keys its project folder on the cwd, so a replacement whose worktree path
    differs must still find the session: it lands under the new cwd's key."""
    old_home, new_home = tmp_path / "old-home", tmp_path / "new-home"
    new_home.mkdir()
    _claude_session(old_home, "/work/old-attempt")
    harness_ = claude_code.ClaudeCode()
    files = harness_.capture_session(old_home, pathlib.Path("/work/old-attempt"), SID)
    new_cwd = tmp_path / "attempts" / "e-43" / "app.worktree"
    new_cwd.mkdir(parents=True)
    harness_.restore_session(new_home, new_cwd, files)
    key = claude_code.project_key(new_cwd)
    assert key.endswith("-attempts-e-43-app-worktree")
    folder = new_home / ".claude" / "projects" / key
    assert (folder / f"{SID}.jsonl").read_bytes() == CONVERSATION
    assert (folder / SID / "subagents" / "agent-a1.jsonl").read_bytes() == b'{"sub": 1}\n'
    assert sorted(p.name for p in (new_home / ".claude" / "projects").iterdir()) == [key]
    assert stat.S_IMODE((folder / f"{SID}.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert harness_.native_session_id(new_home, new_cwd) == SID


def test_claude_code_transcript_records_split_on_newlines_only(tmp_path: pathlib.Path) -> None:
    """A conversation holding raw U+2028 / U+2029 keeps its records whole."""
    _claude_session(tmp_path, "/work/app")
    harness_ = claude_code.ClaudeCode()
    files = harness_.capture_session(tmp_path, pathlib.Path("/work/app"), SID)
    assert harness_.transcript_records(files) == RECORDS


@pytest.mark.parametrize(
    "bad_paths",
    [
        [".claude/projects/-k/../../../escape.jsonl"],
        ["/etc/cron.d/x.jsonl"],
        [".claude/projects/-k/sub/x.jsonl"],  # not a session file of this layout
        [".bashrc"],
        [f".claude/projects/-k/{SID}.jsonl", f".claude/projects/-k/{OTHER}.jsonl"],
        [f".claude/projects/-k/{SID}.jsonl", f".claude/projects/-k/{OTHER}/x.jsonl"],
        [".claude/projects/-k/-bad.jsonl"],
        [f".claude/projects/-k/{SID}.jsonl", f".claude/projects/-other/{SID}/x.jsonl"],
    ],
)
def test_claude_code_hostile_session_files_write_nothing(
    tmp_path: pathlib.Path, bad_paths: list[str]
) -> None:
    """Session files outside the layout, or with `..` / absolute paths, are refused first."""
    home = tmp_path / "home"
    home.mkdir()
    files = [base.SessionFile(p, b"{}\n") for p in bad_paths]
    with pytest.raises((base.HarnessError, paths.UnsafePath)):
        claude_code.ClaudeCode().restore_session(home, pathlib.Path("/work/app"), files)
    assert _tree(tmp_path) == {"home": "dir"}


def test_claude_code_symlinked_projects_pointing_out_is_refused(tmp_path: pathlib.Path) -> None:
    """A symlink in the harness home that leads outside it is never written through."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / ".claude").mkdir(parents=True)
    outside.mkdir()
    (home / ".claude" / "projects").symlink_to(outside)
    files = [base.SessionFile(f".claude/projects/-k/{SID}.jsonl", CONVERSATION)]
    with pytest.raises(paths.UnsafePath):
        claude_code.ClaudeCode().restore_session(home, pathlib.Path("/work/app"), files)
    assert list(outside.iterdir()) == []


def test_claude_code_native_session_id_is_the_newest(tmp_path: pathlib.Path) -> None:
    """The newest session file of the cwd's folder; subagent `agent-*.jsonl` files are not."""
    harness_ = claude_code.ClaudeCode()
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) is None
    _claude_session(tmp_path, "/work/app")
    folder = tmp_path / ".claude" / "projects" / "-work-app"
    os.utime(folder / f"{SID}.jsonl", ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
    os.utime(folder / f"{OTHER}.jsonl", ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    (folder / "agent-zzz.jsonl").write_text("{}\n")
    os.utime(folder / "agent-zzz.jsonl", ns=(3_000_000_000_000_000_000, 3_000_000_000_000_000_000))
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) == SID
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/other")) is None


def test_onboarding_is_marked_completed_keeping_other_keys(tmp_path: pathlib.Path) -> None:
    """Spec: worker bootstrap marks Claude Code's first-run onboarding as completed."""
    config = tmp_path / ".claude.json"
    config.write_text(json.dumps({"theme": "dark", "projects": {"/work/app": {"x": 1}}}))
    config.chmod(0o640)
    claude_code.ClaudeCode().prepare_home(tmp_path)
    assert json.loads(config.read_text()) == {
        "theme": "dark",
        "projects": {"/work/app": {"x": 1}},
        "hasCompletedOnboarding": True,
    }
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    before = config.stat().st_mtime_ns
    claude_code.ClaudeCode().prepare_home(tmp_path)  # already marked: left alone
    assert config.stat().st_mtime_ns == before


def test_onboarding_creates_the_file_when_missing(tmp_path: pathlib.Path) -> None:
    """With no `~/.claude.json` yet, one is created holding only the marker, mode 0600."""
    claude_code.ClaudeCode().prepare_home(tmp_path)
    config = tmp_path / ".claude.json"
    assert json.loads(config.read_text()) == {"hasCompletedOnboarding": True}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_onboarding_never_overwrites_a_config_it_cannot_read(tmp_path: pathlib.Path) -> None:
    """A config that is not a JSON object, or is a symlink, is refused and left as it was."""
    config = tmp_path / ".claude.json"
    config.write_text("not json {")
    with pytest.raises(base.HarnessError):
        claude_code.ClaudeCode().prepare_home(tmp_path)
    assert config.read_text() == "not json {"
    config.unlink()
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    config.symlink_to(outside)
    with pytest.raises(base.HarnessError):
        claude_code.ClaudeCode().prepare_home(tmp_path)
    assert outside.read_text() == "{}"


# --- Codex ---------------------------------------------------------------------------------

ROLLOUT = f".codex/sessions/2026/12/02/rollout-2026-12-02T15-00-00-{SID}.jsonl"


def _rollout_bytes(session_id: str, cwd: str) -> bytes:
    meta = {
        "type": "session_meta",
        "payload": {"id": session_id, "cwd": cwd, "cli_version": "0.162.0"},
    }
    return (json.dumps(meta) + "\n").encode() + CONVERSATION


def _codex_home(home: pathlib.Path, cwd: str) -> None:
    path = home / ROLLOUT
    path.parent.mkdir(parents=True)
    path.write_bytes(_rollout_bytes(SID, cwd))
    other = home / f".codex/sessions/2026/12/01/rollout-2026-12-01T09-00-00-{OTHER}.jsonl"
    other.parent.mkdir(parents=True)
    other.write_bytes(_rollout_bytes(OTHER, "/work/elsewhere"))
    (home / ".codex" / "session_index.jsonl").write_text(
        json.dumps({"id": OTHER, "thread_name": "other", "updated_at": "2026-12-01T09:00:00Z"})
        + "\n"
        + json.dumps(
            {"id": SID, "thread_name": "fix the bug", "updated_at": "2026-12-02T15:00:00Z"}
        )
        + "\n"
    )


def _index(home: pathlib.Path) -> list[dict[str, object]]:
    text = (home / ".codex" / "session_index.jsonl").read_text()
    return [json.loads(line) for line in text.split("\n") if line]


def test_codex_capture_holds_the_rollout_and_its_index_lines(tmp_path: pathlib.Path) -> None:
    """The rollout file and the session's own lines of the index (its thread name survives)."""
    _codex_home(tmp_path, "/work/app")
    files = codex.Codex().capture_session(tmp_path, pathlib.Path("/work/app"), SID)
    assert [f.path for f in files] == [ROLLOUT, ".codex/session_index.jsonl"]
    assert json.loads(files[1].data)["thread_name"] == "fix the bug"
    assert OTHER.encode() not in files[1].data


def test_codex_restore_makes_index_and_rollout_agree(tmp_path: pathlib.Path) -> None:
    """Codex keeps dated rollout files and an index that must agree: after a restore the index
    names the restored rollout and the replacement's cwd, and keeps every other entry."""
    old_home, new_home = tmp_path / "old", tmp_path / "new"
    _codex_home(old_home, "/work/old-attempt")
    harness_ = codex.Codex()
    files = harness_.capture_session(old_home, pathlib.Path("/work/old-attempt"), SID)
    (new_home / ".codex").mkdir(parents=True)
    keep = json.dumps({"id": "keep-me", "thread_name": "kept", "updated_at": "x"})
    stale = json.dumps({"id": SID, "thread_name": "stale", "path": "sessions/old.jsonl"})
    (new_home / ".codex" / "session_index.jsonl").write_text(f"{keep}\n{stale}\nnot json\n")
    new_cwd = tmp_path / "new-worktree"
    new_cwd.mkdir()
    harness_.restore_session(new_home, new_cwd, files)

    assert (new_home / ROLLOUT).read_bytes() == (old_home / ROLLOUT).read_bytes()
    lines = (new_home / ".codex" / "session_index.jsonl").read_text().split("\n")
    assert lines[:2] == [keep, "not json"]
    entries = [json.loads(line) for line in lines[2:] if line]
    assert len(entries) == 1
    entry = entries[0]
    assert entry["id"] == SID
    assert entry["thread_name"] == "fix the bug"
    assert entry["cwd"] == str(new_cwd.resolve())
    assert isinstance(entry["updated_at"], str)
    rollout = new_home / ".codex" / str(entry["path"])
    assert rollout.is_file()
    assert rollout.name.endswith(f"-{entry['id']}.jsonl")
    first = json.loads(rollout.read_bytes().split(b"\n", 1)[0])
    assert first["payload"]["id"] == entry["id"]
    assert stat.S_IMODE(rollout.stat().st_mode) == 0o600
    assert harness_.transcript_records(files) == [
        json.dumps(
            {
                "type": "session_meta",
                "payload": {"id": SID, "cwd": "/work/old-attempt", "cli_version": "0.162.0"},
            }
        ),
        *RECORDS,
    ]


def test_codex_restore_into_a_home_with_no_index(tmp_path: pathlib.Path) -> None:
    """With no index yet, the restore writes one holding the restored session only."""
    rollout = base.SessionFile(ROLLOUT, _rollout_bytes(SID, "/work/old"))
    codex.Codex().restore_session(tmp_path, pathlib.Path("/work/new"), [rollout])
    entries = _index(tmp_path)
    assert [(e["id"], e["path"], e["cwd"]) for e in entries] == [
        (SID, ROLLOUT.removeprefix(".codex/"), "/work/new")
    ]


@pytest.mark.parametrize(
    "files",
    [
        [base.SessionFile(".codex/sessions/2026/12/02/../../../../x.jsonl", b"{}\n")],
        [base.SessionFile(f".codex/sessions/2026/12/rollout-2026-12-02T15-00-00-{SID}.jsonl", b"")],
        [base.SessionFile(".codex/config.toml", b"")],
        [base.SessionFile(ROLLOUT, _rollout_bytes(OTHER, "/w"))],  # names another session
        [
            base.SessionFile(ROLLOUT, _rollout_bytes(SID, "/w")),
            base.SessionFile(ROLLOUT.replace("12/02", "12/03"), _rollout_bytes(SID, "/w")),
        ],
        [
            base.SessionFile(ROLLOUT, _rollout_bytes(SID, "/w")),
            base.SessionFile(".codex/session_index.jsonl", json.dumps({"id": OTHER}).encode()),
        ],
    ],
)
def test_codex_hostile_session_files_write_nothing(
    tmp_path: pathlib.Path, files: list[base.SessionFile]
) -> None:
    """Files outside the rollout layout, or disagreeing about the session, are refused first."""
    home = tmp_path / "home"
    home.mkdir()
    with pytest.raises((base.HarnessError, paths.UnsafePath)):
        codex.Codex().restore_session(home, pathlib.Path("/work/app"), files)
    assert _tree(tmp_path) == {"home": "dir"}


def test_codex_native_session_id_is_the_newest_of_the_cwd(tmp_path: pathlib.Path) -> None:
    """The newest rollout whose session_meta records this cwd."""
    harness_ = codex.Codex()
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) is None
    _codex_home(tmp_path, "/work/app")
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) == SID
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/elsewhere")) == OTHER
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/none")) is None


def test_codex_prepare_home_writes_nothing(tmp_path: pathlib.Path) -> None:
    """Codex needs no first-run marker."""
    codex.Codex().prepare_home(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_claude_code_capture_never_reads_through_a_symlink_out(tmp_path: pathlib.Path) -> None:
    """A project folder that is a symlink leading out of the harness home is not captured."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    _claude_session(outside, "/work/app")
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "projects").symlink_to(outside / ".claude" / "projects")
    harness_ = claude_code.ClaudeCode()
    with pytest.raises(base.HarnessError):
        harness_.capture_session(home, pathlib.Path("/work/app"), SID)
    assert harness_.native_session_id(home, pathlib.Path("/work/app")) is None


def test_codex_capture_never_reads_through_a_symlink_out(tmp_path: pathlib.Path) -> None:
    """A dated rollout folder that is a symlink leading out of the harness home is ignored."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    _codex_home(outside, "/work/app")
    (home / ".codex" / "sessions" / "2026" / "12").mkdir(parents=True)
    (home / ".codex" / "sessions" / "2026" / "12" / "02").symlink_to(
        outside / ".codex" / "sessions" / "2026" / "12" / "02"
    )
    harness_ = codex.Codex()
    with pytest.raises(base.HarnessError):
        harness_.capture_session(home, pathlib.Path("/work/app"), SID)
    assert harness_.native_session_id(home, pathlib.Path("/work/app")) is None
