"""The deploy manifests say what the code does: the shipped worker Pod template is the built-in
one, and every manifest parses."""

from __future__ import annotations

import pathlib

import yaml

from services.controller.pods import templates

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "k8s"


def test_shipped_worker_pod_template_is_the_built_in_one() -> None:
    """deploy/k8s/templates/worker-pod.yaml shows the template the controller really uses."""
    shipped = yaml.safe_load((DEPLOY / "templates" / "worker-pod.yaml").read_text())
    assert shipped == templates.default_pod_template()


def test_every_manifest_parses_and_names_its_kind() -> None:
    """`kubectl apply -f deploy/k8s/` gets well-formed objects only (templates live apart)."""
    kinds = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["apiVersion"] and doc["kind"], path
            kinds.append(doc["kind"])
    assert "Pod" not in kinds
    assert {"Deployment", "Service", "Role", "ClusterRole", "ServiceAccount"} <= set(kinds)
