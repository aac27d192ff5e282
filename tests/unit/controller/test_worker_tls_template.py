"""A controller serving TLS warns at start when its worker Pods would dial it in plaintext.

The built-in template stays plaintext (the local demo, tests); deploy/k8s/ ships
`with_worker_tls` of it. `templates.dials_tls` is what the controller's start checks.
"""

from __future__ import annotations

import pathlib

import yaml

from services.controller.pods import templates

SHIPPED = pathlib.Path(__file__).resolve().parents[3] / "deploy/k8s/templates/worker-pod.yaml"


def test_the_built_in_template_dials_plaintext() -> None:
    assert not templates.dials_tls(templates.default_pod_template())


def test_the_template_with_the_workers_certificate_dials_tls() -> None:
    assert templates.dials_tls(templates.with_worker_tls(templates.default_pod_template()))


def test_the_shipped_template_dials_tls() -> None:
    assert templates.dials_tls(yaml.safe_load(SHIPPED.read_text()))


def test_a_template_without_a_worker_container_does_not_dial_tls() -> None:
    template = templates.with_worker_tls(templates.default_pod_template())
    template["spec"]["containers"][0]["name"] = "agent"
    assert not templates.dials_tls(template)
