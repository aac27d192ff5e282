"""`AGENTIHOOKS_QUALIFIED_VERSIONS`: versions an operator qualified, beyond the spec's defaults.

Spec: "Native resume is qualified for Claude Code 2.1 and Codex 0.162." The setting extends
that list (never shrinks it); capture and restore read it from the worker's harness environment;
a malformed value is refused at start with one line naming the variable.
"""

from __future__ import annotations

import logging

import pytest

from services.common import qualified_versions, settings
from services.controller import main as controller_main
from services.controller.pods import templates
from services.restorer import harness
from services.restorer.harness import base, claude_code, codex

VARIABLE = "AGENTIHOOKS_QUALIFIED_VERSIONS"


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("", {}),
        ("codex=0.171", {"codex": ("0.171",)}),
        ("codex=0.171,claude-code=2.2", {"codex": ("0.171",), "claude_code": ("2.2",)}),
        (
            " claude_code = 2.2.0 , codex=0.171.0 ",
            {"claude_code": ("2.2.0",), "codex": ("0.171.0",)},
        ),
        ("codex=0.171,codex=0.172,codex=0.171", {"codex": ("0.171", "0.172")}),
        ("Codex=1", {"codex": ("1",)}),
        ("codex=0.171,", {"codex": ("0.171",)}),
    ],
)
def test_the_setting_names_harnesses_and_version_prefixes(
    value: str, parsed: dict[str, tuple[str, ...]]
) -> None:
    """Items are HARNESS=VERSION, HARNESS as records name it or as the CLI spells it."""
    assert qualified_versions.parse(value) == parsed


@pytest.mark.parametrize(
    "value",
    [
        "codex",
        "codex=",
        "=0.171",
        "gemini=1.0",
        "codex=latest",
        "codex=0.171.x",
        "codex=v0.171",
        "codex=0.171;claude-code=2.2",
        "codex=0.171 claude-code=2.2",
        "codex=0.171\nclaude-code=2.2",
    ],
)
def test_a_malformed_setting_is_refused_at_start_in_one_line(value: str) -> None:
    """The restorer's settings loader refuses it, naming the variable, in one line."""
    with pytest.raises(settings.SettingsError) as raised:
        settings.load_restorer({VARIABLE: value})
    message = str(raised.value)
    assert message.startswith(f"{VARIABLE} must be HARNESS=VERSION")
    assert "\n" not in message and len(message) < 300


def test_a_valid_setting_reaches_the_harness_environment() -> None:
    """Capture and restore build their adapters from `harness_env`, so they read it there."""
    conf = settings.load_restorer({VARIABLE: "codex=0.171", "CODEX_HOME": "/cfg/codex"})
    assert conf.harness_env == {VARIABLE: "codex=0.171", "CODEX_HOME": "/cfg/codex"}
    assert VARIABLE not in settings.load_restorer({}).harness_env


def test_the_defaults_stay_the_specs() -> None:
    """Without the setting: Claude Code 2.1 and Codex 0.162, and nothing else."""
    assert claude_code.ClaudeCode({}).qualified_versions == ("2.1",)
    assert codex.Codex({}).qualified_versions == ("0.162",)
    assert not codex.Codex({}).qualifies("0.171.0")
    assert not claude_code.ClaudeCode({}).qualifies("2.2.0")


@pytest.mark.parametrize(
    ("version", "qualified"),
    [
        ("0.171.0", True),
        ("0.171.5", True),
        ("0.162.1", True),  # the spec's default is kept
        ("0.1710.0", False),
        ("0.17.1", False),
        ("0.172.0", False),
    ],
)
def test_the_setting_extends_the_codex_versions(version: str, qualified: bool) -> None:
    adapter = harness.for_name("codex", {VARIABLE: "codex=0.171,claude-code=2.2"})
    assert adapter.qualified_versions == ("0.162", "0.171")
    assert adapter.qualifies(version) is qualified


def test_the_setting_extends_only_the_harness_it_names() -> None:
    env = {VARIABLE: "codex=0.171"}
    assert not harness.for_name("claude_code", env).qualifies("0.171.0")
    assert harness.for_name("claude_code", {VARIABLE: "claude-code=2.2"}).qualifies("2.2.9")


def test_a_malformed_value_that_reaches_an_adapter_qualifies_nothing_more() -> None:
    """Never reached through the settings loader; an adapter built from a raw environment
    still never takes a version as qualified on a value nobody could read."""
    adapter = codex.Codex({VARIABLE: "codex=latest"})
    assert adapter.qualified_versions == ("0.162",)
    assert not adapter.qualifies("0.171.0")


def test_the_setting_knows_every_harness() -> None:
    assert qualified_versions.HARNESSES == harness.NAMES
    assert qualified_versions.harness_named("claude-code") == claude_code.NAME
    assert qualified_versions.harness_named("gemini") is None


def test_the_unqualified_warning_is_said_once_per_harness_and_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One warning naming the harness and version, however many captures see it."""
    warning = base.UnqualifiedWarning()
    logger = logging.getLogger("services.restorer")
    adapter = codex.Codex({})
    with caplog.at_level(logging.WARNING, logger="services.restorer"):
        for _ in range(3):
            warning.warn(logger, adapter, "0.171.0")
        warning.warn(logger, adapter, "0.172.0")
    said = [getattr(r, "fields", {}) for r in caplog.records]
    assert [(f["harness"], f["version"]) for f in said] == [
        ("codex", "0.171.0"),
        ("codex", "0.172.0"),
    ]
    assert said[0]["event"] == "harness_version_unqualified"
    assert VARIABLE in said[0]["remedy"]


def test_the_setting_reaches_every_worker_sidecar() -> None:
    """Set on the controller, it is passed to every worker; set on the template's worker
    container, it reaches the injected restorer sidecar too (which is what reads it)."""
    conf = settings.load_controller(
        {
            "AGENTIHOOKS_GRANT_KEY": "k" * 32,
            "AGENTIHOOKS_OPERATOR_TOKEN": "operator-token-0123456789",
            "AGENTIHOOKS_WORKER_IMAGE": "registry.local/agent-worker:1.5.0",
        }
    )
    given = controller_main.worker_settings(conf, "controller:50051", {VARIABLE: "codex=0.171"})
    assert given[VARIABLE] == "codex=0.171"
    pod = {
        "spec": {
            "containers": [
                {"name": "worker", "env": [{"name": VARIABLE, "value": "claude-code=2.2"}]}
            ]
        }
    }
    injected = templates.inject_restorer(
        pod, image="img", secret_name="cred", env={}, defaults=given
    )
    [sidecar] = [c for c in injected["spec"]["initContainers"] if c["name"] == "restorer"]
    assert {"name": VARIABLE, "value": "claude-code=2.2"} in sidecar["env"]
