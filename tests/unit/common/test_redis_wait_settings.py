"""How durable an acknowledged write must be (issue 23): `AGENTIHOOKS_REDIS_WAIT_REPLICAS`,
`AGENTIHOOKS_REDIS_WAIT_AOF` and `AGENTIHOOKS_REDIS_WAIT_TIMEOUT_MS`, read once and refused
naming the variable when wrong."""

from __future__ import annotations

import pytest

from services.common import settings

KEY = "k" * 40
REQUIRED = {
    "AGENTIHOOKS_GRANT_KEY": KEY,
    "AGENTIHOOKS_OPERATOR_TOKEN": "o" * 20,
    "AGENTIHOOKS_WORKER_IMAGE": "img:1",
}


def test_by_default_nothing_is_waited_for() -> None:
    """The replica count defaults to 0 (a single local Redis) and WAITAOF is off."""
    wait = settings.load_controller(REQUIRED).redis_wait
    assert wait == settings.RedisWait(replicas=0, aof=False, timeout_ms=2000)
    assert not wait.waits


def test_the_replica_count_the_aof_and_the_deadline_are_read() -> None:
    """Each setting is read into the controller's settings."""
    wait = settings.load_controller(
        REQUIRED
        | {
            "AGENTIHOOKS_REDIS_WAIT_REPLICAS": "2",
            "AGENTIHOOKS_REDIS_WAIT_AOF": "true",
            "AGENTIHOOKS_REDIS_WAIT_TIMEOUT_MS": "750",
        }
    ).redis_wait
    assert wait == settings.RedisWait(replicas=2, aof=True, timeout_ms=750)
    assert wait.waits
    assert settings.RedisWait(aof=True).waits  # fsynced on the master alone


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("REDIS_WAIT_REPLICAS", "-1", "at least 0"),
        ("REDIS_WAIT_REPLICAS", "one", "whole number"),
        ("REDIS_WAIT_AOF", "maybe", "true or false"),
        ("REDIS_WAIT_TIMEOUT_MS", "0", "at least 1"),
        ("REDIS_WAIT_TIMEOUT_MS", "60000", "at most 10000"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(name: str, value: str, says: str) -> None:
    """A bad value stops the controller at start; the message names the variable. A deadline
    of 0 would make Redis wait for ever; one above 10 s would outlast the CLI's own deadline
    for a pause (15 s)."""
    with pytest.raises(settings.SettingsError, match=f"AGENTIHOOKS_{name}.*{says}"):
        settings.load_controller(REQUIRED | {f"AGENTIHOOKS_{name}": value})
