"""Settings are read once, typed, and a bad value is refused naming the variable."""

from __future__ import annotations

import pathlib

import pytest

from services.common import settings
from services.restorer import harness

KEY = "k" * 40


def test_relative_checkpoint_root_is_refused_naming_the_variable() -> None:
    """AGENTIHOOKS_CHECKPOINT_ROOT: absolute path of a local folder; a relative path is refused."""
    with pytest.raises(settings.SettingsError, match="AGENTIHOOKS_CHECKPOINT_ROOT"):
        settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": "relative/ckpts"})


def test_absolute_root_and_bucket_are_read() -> None:
    """Both may be set; which wins is the backend factory's rule (bucket first)."""
    s = settings.load_storage(
        {"AGENTIHOOKS_CHECKPOINT_ROOT": "/var/ckpt", "AGENTIHOOKS_CHECKPOINT_BUCKET": "b"}
    )
    assert s.checkpoint_root == pathlib.Path("/var/ckpt")
    assert s.checkpoint_bucket == "b"
    assert s.configured


def test_no_store_configured() -> None:
    """With no checkpoint store configured nothing is configured."""
    assert not settings.load_storage({}).configured


def test_store_needs_a_grant_key_and_storage() -> None:
    """The store refuses to start without storage or without the grant key."""
    with pytest.raises(settings.SettingsError, match="CHECKPOINT_ROOT or"):
        settings.load_store({"AGENTIHOOKS_GRANT_KEY": KEY})
    with pytest.raises(settings.SettingsError, match="AGENTIHOOKS_GRANT_KEY"):
        settings.load_store({"AGENTIHOOKS_CHECKPOINT_ROOT": "/x"})
    with pytest.raises(settings.SettingsError, match="too short"):
        settings.load_store({"AGENTIHOOKS_CHECKPOINT_ROOT": "/x", "AGENTIHOOKS_GRANT_KEY": "short"})


def test_secret_values_never_appear_in_errors_or_repr() -> None:
    """Secrets never reach logs or error messages."""
    secret = "super-secret-operator-token-value"
    conf = settings.load_controller(
        {
            "AGENTIHOOKS_GRANT_KEY": KEY,
            "AGENTIHOOKS_OPERATOR_TOKEN": secret,
            "AGENTIHOOKS_WORKER_IMAGE": "img:1",
        }
    )
    assert secret not in repr(conf) and KEY not in repr(conf)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONTROL_ADDR", "nohost"),
        ("CONTROL_ADDR", "http://127.0.0.1:50051"),
        ("HTTP_ADDR", "127.0.0.1"),
        ("STORE_ADDR", "dns:store:50052"),
        ("RUNTIME", "docker"),
        ("LEASE_MS", "ten"),
        ("LEASE_MS", "1"),
        ("RESYNC_RATE", "0"),
        ("RESYNC_RATE", "fast"),
    ],
)
def test_bad_controller_values_name_the_variable(name: str, value: str) -> None:
    """A bad value is refused at start with a message naming the variable."""
    env = {
        "AGENTIHOOKS_GRANT_KEY": KEY,
        "AGENTIHOOKS_OPERATOR_TOKEN": "o" * 20,
        "AGENTIHOOKS_WORKER_IMAGE": "img:1",
        f"AGENTIHOOKS_{name}": value,
    }
    with pytest.raises(settings.SettingsError, match=f"AGENTIHOOKS_{name}"):
        settings.load_controller(env)


def test_the_resync_rate_defaults_to_200_and_is_read() -> None:
    """AGENTIHOOKS_RESYNC_RATE: the passes nobody asked for, a second, across the swarms."""
    env = {
        "AGENTIHOOKS_GRANT_KEY": KEY,
        "AGENTIHOOKS_OPERATOR_TOKEN": "o" * 20,
        "AGENTIHOOKS_WORKER_IMAGE": "img:1",
    }
    assert settings.load_controller(env).resync_rate == 200
    assert settings.load_controller({**env, "AGENTIHOOKS_RESYNC_RATE": "50"}).resync_rate == 50


def test_an_address_with_a_scheme_or_credentials_is_refused_without_repeating_them() -> None:
    """Issue 20: `http://…` is malformed, not an address to dial; a `user:password@` part is
    masked in the message."""
    env = {
        "AGENTIHOOKS_GRANT_KEY": KEY,
        "AGENTIHOOKS_OPERATOR_TOKEN": "o" * 20,
        "AGENTIHOOKS_WORKER_IMAGE": "img:1",
        "AGENTIHOOKS_STORE_ADDR": "http://admin:hunter2@store:50052",
    }
    with pytest.raises(settings.SettingsError) as refused:
        settings.load_controller(env)
    assert str(refused.value).startswith("AGENTIHOOKS_STORE_ADDR must be HOST:PORT, not ")
    assert "leave out the scheme" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_remote_flag_parsing() -> None:
    """checkpoint_remote: the worker sets AGENTIHOOKS_CHECKPOINT_REMOTE=true for itself."""
    assert settings.load_restorer({"AGENTIHOOKS_CHECKPOINT_REMOTE": "true"}).checkpoint_remote
    with pytest.raises(settings.SettingsError, match="CHECKPOINT_REMOTE"):
        settings.load_restorer({"AGENTIHOOKS_CHECKPOINT_REMOTE": "maybe"})


def test_the_restorer_reads_the_harness_variables_of_the_worker() -> None:
    """CLAUDE_CONFIG_DIR and CODEX_HOME, the CLIs' own variables, reach the restorer's
    settings (and no other variable does); they are the ones the harness adapters follow."""
    conf = settings.load_restorer(
        {"CLAUDE_CONFIG_DIR": "/cfg/claude", "CODEX_HOME": "/cfg/codex", "OTHER": "/x"}
    )
    assert conf.harness_env == {"CLAUDE_CONFIG_DIR": "/cfg/claude", "CODEX_HOME": "/cfg/codex"}
    assert settings.load_restorer({}).harness_env == {}
    assert settings.HARNESS_VARIABLES == harness.ENVIRONMENT


def test_a_relative_harness_variable_is_refused_naming_it() -> None:
    with pytest.raises(settings.SettingsError, match="CODEX_HOME must be an absolute path"):
        settings.load_restorer({"CODEX_HOME": "relative/codex"})
