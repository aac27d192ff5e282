"""The restorer sidecar sees the harness variables the worker container has.

With `CLAUDE_CONFIG_DIR` or `CODEX_HOME` set on the worker, the harness keeps its sessions and
config there; the sidecar captures and restores them, so it must look in the same place.
"""

from __future__ import annotations

from services.controller.pods import templates


def _pod(worker_env: list[dict[str, object]]) -> dict[str, object]:
    return {
        "spec": {
            "containers": [{"name": "worker", "image": "w", "env": worker_env, "volumeMounts": []}]
        }
    }


def test_the_sidecar_gets_the_workers_harness_variables_and_no_others() -> None:
    """CLAUDE_CONFIG_DIR and CODEX_HOME are copied as the worker has them (a value or a
    reference); any other worker variable stays the worker's."""
    worker_env: list[dict[str, object]] = [
        {"name": "CLAUDE_CONFIG_DIR", "value": "/home/agent/.config/claude"},
        {"name": "CODEX_HOME", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "ANTHROPIC_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    pod = templates.inject_restorer(
        _pod(worker_env), image="r", secret_name="cred", env={"AGENTIHOOKS_SWARM": "example"}
    )
    [sidecar] = pod["spec"]["initContainers"]
    names = [e["name"] for e in sidecar["env"]]
    assert worker_env[0] in sidecar["env"] and worker_env[1] in sidecar["env"]
    assert "ANTHROPIC_API_KEY" not in names
    assert "AGENTIHOOKS_SWARM" in names


def test_a_worker_without_harness_variables_adds_none() -> None:
    pod = templates.inject_restorer(_pod([]), image="r", secret_name="cred", env={})
    [sidecar] = pod["spec"]["initContainers"]
    assert not {"CLAUDE_CONFIG_DIR", "CODEX_HOME"} & {e["name"] for e in sidecar["env"]}
