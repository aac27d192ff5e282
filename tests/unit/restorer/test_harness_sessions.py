"""Harness session files: where they land from the replacement's cwd, and onboarding."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import tomllib

import pytest
import zstandard

from services.restorer import paths, transcripts
from services.restorer.harness import base, claude_code, codex, codex_rollouts
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
    files = claude_code.ClaudeCode({}).capture_session(home, pathlib.Path("/work/app"), SID)
    assert [f.path for f in files] == [
        f".claude/projects/-work-app/{SID}.jsonl",
        f".claude/projects/-work-app/{SID}/subagents/agent-a1.jsonl",
    ]
    assert files[0].data == CONVERSATION
    assert "separator" not in repr(files[0])  # conversation content stays out of reprs


def test_claude_code_missing_session_is_refused(tmp_path: pathlib.Path) -> None:
    """Capturing a session that has no file fails without naming paths."""
    with pytest.raises(base.HarnessError):
        claude_code.ClaudeCode({}).capture_session(tmp_path, pathlib.Path("/work/app"), SID)


def test_claude_code_restore_rekeys_to_the_new_worktree(tmp_path: pathlib.Path) -> None:
    """Claude Code keys its project folder on the cwd, so a replacement whose worktree path
    differs must still find the session: it lands under the new cwd's key."""
    old_home, new_home = tmp_path / "old-home", tmp_path / "new-home"
    new_home.mkdir()
    _claude_session(old_home, "/work/old-attempt")
    harness_ = claude_code.ClaudeCode({})
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
    harness_ = claude_code.ClaudeCode({})
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
        claude_code.ClaudeCode({}).restore_session(home, pathlib.Path("/work/app"), files)
    assert _tree(tmp_path) == {"home": "dir"}


def test_claude_code_symlinked_projects_pointing_out_is_refused(tmp_path: pathlib.Path) -> None:
    """A symlink in the harness home that leads outside it is never written through."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / ".claude").mkdir(parents=True)
    outside.mkdir()
    (home / ".claude" / "projects").symlink_to(outside)
    files = [base.SessionFile(f".claude/projects/-k/{SID}.jsonl", CONVERSATION)]
    with pytest.raises(paths.UnsafePath):
        claude_code.ClaudeCode({}).restore_session(home, pathlib.Path("/work/app"), files)
    assert list(outside.iterdir()) == []


def test_claude_code_native_session_id_is_the_newest(tmp_path: pathlib.Path) -> None:
    """The newest session file of the cwd's folder; subagent `agent-*.jsonl` files are not."""
    harness_ = claude_code.ClaudeCode({})
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) is None
    _claude_session(tmp_path, "/work/app")
    folder = tmp_path / ".claude" / "projects" / "-work-app"
    os.utime(folder / f"{SID}.jsonl", ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
    os.utime(folder / f"{OTHER}.jsonl", ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    (folder / "agent-zzz.jsonl").write_text("{}\n")
    os.utime(folder / "agent-zzz.jsonl", ns=(3_000_000_000_000_000_000, 3_000_000_000_000_000_000))
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) == SID
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/other")) is None


WORKTREE = pathlib.Path("/work/app")


def test_onboarding_and_workspace_trust_are_marked_keeping_other_keys(
    tmp_path: pathlib.Path,
) -> None:
    """Spec: worker bootstrap marks Claude Code's first-run onboarding as completed; the
    restored worktree is marked trusted (an interactive Claude Code otherwise stops at its
    trust dialog). Every other key, and the file's mode, stay."""
    config = tmp_path / ".claude.json"
    config.write_text(json.dumps({"theme": "dark", "projects": {"/work/app": {"x": 1}}}))
    config.chmod(0o640)
    claude_code.ClaudeCode({}).prepare_home(tmp_path, WORKTREE)
    assert json.loads(config.read_text()) == {
        "theme": "dark",
        "projects": {"/work/app": {"x": 1, "hasTrustDialogAccepted": True}},
        "hasCompletedOnboarding": True,
    }
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    before = config.stat().st_mtime_ns
    claude_code.ClaudeCode({}).prepare_home(tmp_path, WORKTREE)  # already marked: left alone
    assert config.stat().st_mtime_ns == before


def test_only_the_worktree_itself_is_trusted(tmp_path: pathlib.Path) -> None:
    """Trust goes to the worktree's real path, not to a parent or another folder."""
    real = tmp_path / "real" / "app"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    home = tmp_path / "home"
    home.mkdir()
    claude_code.ClaudeCode({}).prepare_home(home, link / "app")
    projects = json.loads((home / ".claude.json").read_text())["projects"]
    assert projects == {str(real): {"hasTrustDialogAccepted": True}}


def test_onboarding_creates_the_file_when_missing(tmp_path: pathlib.Path) -> None:
    """With no `~/.claude.json` yet, one is created holding only the markers, mode 0600."""
    claude_code.ClaudeCode({}).prepare_home(tmp_path, WORKTREE)
    config = tmp_path / ".claude.json"
    assert json.loads(config.read_text()) == {
        "hasCompletedOnboarding": True,
        "projects": {"/work/app": {"hasTrustDialogAccepted": True}},
    }
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_onboarding_never_overwrites_a_config_it_cannot_read(tmp_path: pathlib.Path) -> None:
    """A config that is not a JSON object, has projects that are not an object, or is a
    symlink, is refused and left as it was."""
    config = tmp_path / ".claude.json"
    for text in ("not json {", json.dumps({"projects": ["a"]})):
        config.write_text(text)
        with pytest.raises(base.HarnessError):
            claude_code.ClaudeCode({}).prepare_home(tmp_path, WORKTREE)
        assert config.read_text() == text
    config.unlink()
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    config.symlink_to(outside)
    with pytest.raises(base.HarnessError):
        claude_code.ClaudeCode({}).prepare_home(tmp_path, WORKTREE)
    assert outside.read_text() == "{}"


def test_claude_config_dir_moves_sessions_and_config(tmp_path: pathlib.Path) -> None:
    """With CLAUDE_CONFIG_DIR set, sessions are read and written under `$DIR/projects/` and
    the markers go to `$DIR/.claude.json`; records still name `.claude/projects/…`, so a
    checkpoint restores the same whether either side sets the variable."""
    home, elsewhere = tmp_path / "home", tmp_path / "cfg"
    home.mkdir()
    plain = claude_code.ClaudeCode({})
    _claude_session(home, "/work/app")
    files = plain.capture_session(home, pathlib.Path("/work/app"), SID)
    moved = claude_code.ClaudeCode({"CLAUDE_CONFIG_DIR": str(elsewhere)})
    moved.restore_session(home, pathlib.Path("/work/b"), files)
    key = claude_code.project_key("/work/b")
    assert (elsewhere / "projects" / key / f"{SID}.jsonl").read_bytes() == CONVERSATION
    assert not (home / ".claude" / "projects" / key).exists()
    assert moved.native_session_id(home, pathlib.Path("/work/b")) == SID
    again = moved.capture_session(home, pathlib.Path("/work/b"), SID)
    assert [f.path for f in again] == [f.path.replace("-work-app", key) for f in files] and [
        f.data for f in again
    ] == [f.data for f in files]
    moved.prepare_home(home, pathlib.Path("/work/b"))
    assert json.loads((elsewhere / ".claude.json").read_text())["hasCompletedOnboarding"]
    assert not (home / ".claude.json").exists()


def test_a_relative_config_dir_is_refused(tmp_path: pathlib.Path) -> None:
    """A relative CLAUDE_CONFIG_DIR or CODEX_HOME would depend on the folder the CLI runs in."""
    for harness_ in (
        claude_code.ClaudeCode({"CLAUDE_CONFIG_DIR": "cfg"}),
        codex.Codex({"CODEX_HOME": "cfg"}),
    ):
        with pytest.raises(base.HarnessError, match="not an absolute path"):
            harness_.prepare_home(tmp_path, WORKTREE)


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
    files = codex.Codex({}).capture_session(tmp_path, pathlib.Path("/work/app"), SID)
    assert [f.path for f in files] == [ROLLOUT, ".codex/session_index.jsonl"]
    assert json.loads(files[1].data)["thread_name"] == "fix the bug"
    assert OTHER.encode() not in files[1].data


def test_codex_restore_makes_index_and_rollout_agree(tmp_path: pathlib.Path) -> None:
    """Codex keeps dated rollout files and an index that must agree: after a restore the index
    names the restored rollout and the replacement's cwd, and keeps every other entry."""
    old_home, new_home = tmp_path / "old", tmp_path / "new"
    _codex_home(old_home, "/work/old-attempt")
    harness_ = codex.Codex({})
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
    codex.Codex({}).restore_session(tmp_path, pathlib.Path("/work/new"), [rollout])
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
        codex.Codex({}).restore_session(home, pathlib.Path("/work/app"), files)
    assert _tree(tmp_path) == {"home": "dir"}


def test_codex_native_session_id_is_the_newest_of_the_cwd(tmp_path: pathlib.Path) -> None:
    """The newest rollout whose session_meta records this cwd."""
    harness_ = codex.Codex({})
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) is None
    _codex_home(tmp_path, "/work/app")
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) == SID
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/elsewhere")) == OTHER
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/none")) is None


def test_codex_prepare_home_trusts_the_worktree_and_resumes_in_it(tmp_path: pathlib.Path) -> None:
    """config.toml gets `[tui] resume_cwd = "current"` (no folder picker when the worktree
    moved) and the worktree trusted (no trust prompt); every other setting stays."""
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('model = "o3"\n[model_providers.mock]\nbase_url = "http://127.0.0.1:1/v1"\n')
    codex.Codex({}).prepare_home(tmp_path, WORKTREE)
    loaded = tomllib.loads(config.read_text())
    assert loaded == {
        "model": "o3",
        "model_providers": {"mock": {"base_url": "http://127.0.0.1:1/v1"}},
        "tui": {"resume_cwd": "current"},
        "projects": {"/work/app": {"trust_level": "trusted"}},
    }
    before = config.stat().st_mtime_ns
    codex.Codex({}).prepare_home(tmp_path, WORKTREE)  # already set: left alone
    assert config.stat().st_mtime_ns == before


def test_codex_prepare_home_follows_codex_home(tmp_path: pathlib.Path) -> None:
    """With CODEX_HOME set, config.toml is written there, not under `~/.codex`."""
    home, elsewhere = tmp_path / "home", tmp_path / "codex-home"
    home.mkdir()
    codex.Codex({"CODEX_HOME": str(elsewhere)}).prepare_home(home, WORKTREE)
    assert tomllib.loads((elsewhere / "config.toml").read_text())["tui"] == {
        "resume_cwd": "current"
    }
    assert not (home / ".codex").exists()


def test_codex_prepare_home_never_overwrites_a_config_it_cannot_read(
    tmp_path: pathlib.Path,
) -> None:
    """Invalid TOML, a `tui` that is not a table, or a symlink: refused, left as it was."""
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    for text in ("model = [", 'tui = "x"\n'):
        config.write_text(text)
        with pytest.raises(base.HarnessError):
            codex.Codex({}).prepare_home(tmp_path, WORKTREE)
        assert config.read_text() == text
    config.unlink()
    outside = tmp_path / "outside.toml"
    outside.write_text("")
    config.symlink_to(outside)
    with pytest.raises(base.HarnessError):
        codex.Codex({}).prepare_home(tmp_path, WORKTREE)
    assert outside.read_text() == ""


def test_codex_compressed_rollouts_are_captured_and_read(tmp_path: pathlib.Path) -> None:
    """Codex 0.162 compresses idle rollouts to `rollout-….jsonl.zst` (and reads them back):
    the compressed file is captured as it is, found as the cwd's session, and its records
    are read decompressed."""
    data = _rollout_bytes(SID, "/work/app") + CONVERSATION
    path = tmp_path / (ROLLOUT + ".zst")
    path.parent.mkdir(parents=True)
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    harness_ = codex.Codex({})
    assert harness_.native_session_id(tmp_path, pathlib.Path("/work/app")) == SID
    files = harness_.capture_session(tmp_path, pathlib.Path("/work/app"), SID)
    assert [f.path for f in files] == [ROLLOUT + ".zst"]
    assert harness_.transcript_records(files) == transcripts.split_records(data)
    home = tmp_path / "replacement"
    home.mkdir()
    harness_.restore_session(home, pathlib.Path("/work/b"), files)
    assert (home / (ROLLOUT + ".zst")).read_bytes() == path.read_bytes()


def test_codex_a_compressed_rollout_that_expands_too_far_is_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decompression bomb stops at the limit instead of filling memory."""
    monkeypatch.setattr(codex_rollouts, "MAX_ROLLOUT_BYTES", 1024)
    data = _rollout_bytes(SID, "/work/app") + b"x" * 4096 + b"\n"
    files = [base.SessionFile(ROLLOUT + ".zst", zstandard.ZstdCompressor().compress(data))]
    with pytest.raises(base.HarnessError, match="expands past the limit"):
        codex.Codex({}).transcript_records(files)
    broken = [base.SessionFile(ROLLOUT + ".zst", b"not zstd")]
    with pytest.raises(base.HarnessError, match="does not decompress"):
        codex.Codex({}).transcript_records(broken)


def test_claude_code_capture_never_reads_through_a_symlink_out(tmp_path: pathlib.Path) -> None:
    """A project folder that is a symlink leading out of the harness home is not captured."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    _claude_session(outside, "/work/app")
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "projects").symlink_to(outside / ".claude" / "projects")
    harness_ = claude_code.ClaudeCode({})
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
    harness_ = codex.Codex({})
    with pytest.raises(base.HarnessError):
        harness_.capture_session(home, pathlib.Path("/work/app"), SID)
    assert harness_.native_session_id(home, pathlib.Path("/work/app")) is None
