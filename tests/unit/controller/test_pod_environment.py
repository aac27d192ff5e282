"""What the worker Pod's containers are given to start with: the controller's settings, the
template's overrides, and the harness variables the sidecar shares with the worker.

With `CLAUDE_CONFIG_DIR` or `CODEX_HOME` set on the worker, the harness keeps its sessions and
config there; the sidecar captures and restores them, so it must look in the same place.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.common import settings
from services.controller.pods import runtime, templates


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


def _spec() -> runtime.LaunchSpec:
    return runtime.LaunchSpec(
        swarm="example",
        seat="eng-1",
        execution_id="example.eng-1.1",
        generation=1,
        image="registry.local/agent-worker:1.4.2",
        command=("agentihooks-restorer", "entry"),
        worker_credential="a-credential",
        env={"AGENTIHOOKS_SWARM": "example"},
    )


def _env_of(pod: dict[str, Any], name: str) -> dict[str, Any]:
    containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    [container] = [c for c in containers if c["name"] == name]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


DEFAULTS = {
    "AGENTIHOOKS_CONTROL_ADDR": "agentihooks-controller.agents.svc:50051",
    "AGENTIHOOKS_STORE_ADDR": "agentihooks-checkpoint-store:50052",
}


def test_the_controllers_settings_reach_both_containers() -> None:
    """Issue: the Pod spec carried no AGENTIHOOKS_CONTROL_ADDR, so every sidecar answered
    `controller unavailable`. The controller's settings are now in both containers."""
    pod = templates.render_pod(
        templates.default_pod_template(), _spec(), namespace="agents", defaults=DEFAULTS
    )
    for container in ("worker", "restorer"):
        env = _env_of(pod, container)
        assert env["AGENTIHOOKS_CONTROL_ADDR"] == DEFAULTS["AGENTIHOOKS_CONTROL_ADDR"]
        assert env["AGENTIHOOKS_STORE_ADDR"] == DEFAULTS["AGENTIHOOKS_STORE_ADDR"]
        assert env["AGENTIHOOKS_SWARM"] == "example"


def test_the_template_overrides_the_controllers_settings() -> None:
    """A worker container that sets a shared setting overrides it for the sidecar too; a
    `restorer` container in the template gives the sidecar alone its own settings (kept, and
    replaced by the injected sidecar)."""
    template = templates.default_pod_template()
    [worker] = template["spec"]["containers"]
    worker["env"].append({"name": "AGENTIHOOKS_CONTROL_ADDR", "value": "10.0.0.9:50051"})
    template["spec"]["containers"].append(
        {
            "name": "restorer",
            "image": "ignored",
            "env": [
                {"name": "AGENTIHOOKS_STORE_ADDR", "value": "store.internal:50052"},
                {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "s3"}}},
            ],
        }
    )
    pod = templates.render_pod(template, _spec(), namespace="agents", defaults=DEFAULTS)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["worker"]
    sidecar, worker_env = _env_of(pod, "restorer"), _env_of(pod, "worker")
    assert worker_env["AGENTIHOOKS_CONTROL_ADDR"] == "10.0.0.9:50051"
    assert sidecar["AGENTIHOOKS_CONTROL_ADDR"] == "10.0.0.9:50051"
    assert sidecar["AGENTIHOOKS_STORE_ADDR"] == "store.internal:50052"
    assert worker_env["AGENTIHOOKS_STORE_ADDR"] == DEFAULTS["AGENTIHOOKS_STORE_ADDR"]
    assert sidecar["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3"}}
    assert "AWS_ACCESS_KEY_ID" not in worker_env


def test_workers_reach_the_controllers_service_by_default() -> None:
    """On Kubernetes the address workers get is the controller's Service in its namespace,
    unless AGENTIHOOKS_WORKER_CONTROL_ADDR says otherwise; the local runtime derives its own."""
    base = {
        "AGENTIHOOKS_GRANT_KEY": "k" * 40,
        "AGENTIHOOKS_OPERATOR_TOKEN": "o" * 20,
        "AGENTIHOOKS_WORKER_IMAGE": "registry.local/agent-worker:1.4.2",
    }
    kube = {**base, "AGENTIHOOKS_RUNTIME": "kubernetes", "AGENTIHOOKS_NAMESPACE": "agents"}
    conf = settings.load_controller({**kube, "AGENTIHOOKS_CONTROL_ADDR": "0.0.0.0:50051"})
    assert conf.worker_control_addr == "agentihooks-controller.agents.svc:50051"
    given = settings.load_controller({**kube, "AGENTIHOOKS_WORKER_CONTROL_ADDR": "ctl:7000"})
    assert given.worker_control_addr == "ctl:7000"
    assert settings.load_controller(base).worker_control_addr is None
    with pytest.raises(settings.SettingsError, match="AGENTIHOOKS_WORKER_CONTROL_ADDR"):
        settings.load_controller({**kube, "AGENTIHOOKS_WORKER_CONTROL_ADDR": "no-port"})
