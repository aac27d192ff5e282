"""The verdict `agentihooks-restorer qualify` prints: one line or one JSON object, naming the
setting that qualifies the version, or the step that failed and why; never the conversation."""

from __future__ import annotations

from services.common import qualified_versions
from services.restorer import qualification


def test_a_qualified_version_outside_the_defaults_names_the_setting() -> None:
    verdict = qualification.Verdict("codex", "0.171.0", True)
    assert verdict.line() == (
        "qualified: codex 0.171.0 resumes a restored session natively; to use it, set"
        " AGENTIHOOKS_QUALIFIED_VERSIONS=codex=0.171.0 on the worker and its sidecar"
    )
    assert verdict.as_json() == {
        "harness": "codex",
        "version": "0.171.0",
        "qualified": True,
        "by_default": False,
        "setting": "AGENTIHOOKS_QUALIFIED_VERSIONS=codex=0.171.0",
    }


def test_a_pre_release_is_named_by_its_numbers_so_the_setting_accepts_it() -> None:
    verdict = qualification.Verdict("claude_code", "2.2.0-beta.1", True)
    assert verdict.setting() == "claude-code=2.2.0"
    assert qualified_versions.parse(verdict.setting()) == {"claude_code": ("2.2.0",)}


def test_a_version_the_spec_qualifies_needs_no_setting() -> None:
    verdict = qualification.Verdict("claude_code", "2.1.112", True, by_default=True)
    assert verdict.line() == (
        "qualified: claude-code 2.1.112 resumes a restored session natively (qualified by default)"
    )
    assert "setting" not in verdict.as_json()


def test_a_failure_names_its_step_and_reason() -> None:
    verdict = qualification.Verdict("codex", "0.171.0", False, "restore", "the restore was refused")
    assert verdict.line() == "not qualified: codex 0.171.0: restore: the restore was refused"
    assert verdict.as_json() == {
        "harness": "codex",
        "version": "0.171.0",
        "qualified": False,
        "step": "restore",
        "reason": "the restore was refused",
    }
