"""The worker Pod template and how an attempt's Pod and credential Secret are rendered from it.

Pure: builds dicts for the API server and sends nothing. The restorer runs in every worker Pod as a
Kubernetes native sidecar (an init container with ``restartPolicy: Always``), and the worker
credential reaches both containers only through a ``secretKeyRef``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import orjson

from services.common import settings, tls_settings
from services.controller.pods import classifying, runtime

RESTORER_PORT = 50053
CREDENTIAL_KEY = "credential"
"""The key of the worker credential inside the attempt's Secret."""

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")

_DEFAULT_TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"labels": {}, "annotations": {}},
    "spec": {
        # A failed worker must surface as a failed attempt for the controller to fence, never be
        # restarted in place by the kubelet with its conversation gone.
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        # Workers never talk to the Kubernetes API; no token, no service environment.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": classifying.WORKER_CONTAINER,
                "image": "registry.local/agent-worker:latest",
                "command": ["agentihooks-restorer", "entry"],
                "env": [
                    {"name": "HOME", "value": "/home/agent"},
                    # The task worktree, in the `work` volume; its parent is the attempt folder.
                    {"name": "AGENTIHOOKS_WORKTREE", "value": "/work/app"},
                ],
                "resources": {
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                    "limits": {"memory": "4Gi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "work", "mountPath": "/work"},
                    {"name": "home", "mountPath": "/home/agent"},
                ],
            }
        ],
        "volumes": [{"name": "work", "emptyDir": {}}, {"name": "home", "emptyDir": {}}],
    },
}


WORKER_TLS_SECRET = "agentihooks-worker-tls"
"""The Secret with the workers' shared certificate (``tls.crt``, ``tls.key``, ``ca.crt``), as
deploy/k8s/certificates/ issues it."""
TLS_VOLUME = "tls"
TLS_FOLDER = "/etc/agentihooks/tls"
"""Where a Pod of deploy/k8s/ mounts its TLS Secret (the controller's and the store's too)."""
_TLS_FILES = {
    tls_settings.CERT_FILE: "tls.crt",
    tls_settings.KEY_FILE: "tls.key",
    tls_settings.CA_FILE: "ca.crt",
}
"""The TLS settings of a worker Pod and the key of the Secret each names. No client CA: the
sidecar listens on the Pod's loopback only, where every client holds the same certificate."""


def default_pod_template() -> dict[str, Any]:
    """A fresh copy of the built-in worker Pod template: plaintext, mounting no certificate.

    A controller given no template (the local demo, tests) uses it; deploy/k8s/ ships
    `with_worker_tls` of it.

    Returns:
        The Pod template; its container ``worker`` gets each attempt's image and command.
    """
    return copy.deepcopy(_DEFAULT_TEMPLATE)


def with_worker_tls(template: Mapping[str, Any], secret: str = WORKER_TLS_SECRET) -> dict[str, Any]:
    """`template` with the workers' TLS Secret mounted read-only in its ``worker`` container
    and the ``AGENTIHOOKS_TLS_*`` settings naming its files: the template deploy/k8s/ ships.

    The injected sidecar mounts what the worker mounts and shares its TLS settings
    (`SHARED_SETTINGS`), so it serves TLS to the entry point on 127.0.0.1 (the certificate
    names it) and dials the controller and the store with the certificate as its client
    certificate; the entry point dials the sidecar verifying it with ``ca.crt``. The files are
    readable by the Pod's ``fsGroup`` only (mode 0440).

    Args:
        template: A worker Pod template with a container named ``worker``.
        secret: The Secret holding ``tls.crt``, ``tls.key`` and ``ca.crt``.

    Returns:
        A new template; the argument is left unchanged.
    """
    result: dict[str, Any] = _copy(template)
    spec = result.setdefault("spec", {})
    worker = next(
        (c for c in spec.get("containers") or () if c.get("name") == classifying.WORKER_CONTAINER),
        None,
    )
    if worker is None:
        raise ValueError(f"the Pod template has no container named {classifying.WORKER_CONTAINER}")
    worker["env"] = [
        *(e for e in worker.get("env") or () if e.get("name") not in _TLS_FILES),
        *({"name": name, "value": f"{TLS_FOLDER}/{file}"} for name, file in _TLS_FILES.items()),
    ]
    worker["volumeMounts"] = [
        *(m for m in worker.get("volumeMounts") or () if m.get("name") != TLS_VOLUME),
        {"name": TLS_VOLUME, "mountPath": TLS_FOLDER, "readOnly": True},
    ]
    spec["volumes"] = [
        *(v for v in spec.get("volumes") or () if v.get("name") != TLS_VOLUME),
        {"name": TLS_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o440}},
    ]
    return result


def dials_tls(template: Mapping[str, Any]) -> bool:
    """Whether a worker Pod template's ``worker`` container names a CA bundle to dial with
    (``AGENTIHOOKS_TLS_CA_FILE``): what a controller serving TLS needs of its workers."""
    for container in template.get("spec", {}).get("containers") or ():
        if container.get("name") == classifying.WORKER_CONTAINER:
            names = {e.get("name") for e in container.get("env") or ()}
            return tls_settings.CA_FILE in names
    return False


def pod_name(swarm: str, execution_id: str) -> str:
    """The Pod name of an attempt: readable, a valid DNS label, distinct per (swarm, execution).

    Args:
        swarm: The swarm.
        execution_id: The execution id.

    Returns:
        ``{swarm}-{execution}`` made DNS-safe and cut short, then 8 hex digits of a hash of the
        exact pair, so ``a-b``/``c`` and ``a``/``b-c`` never share a name.
    """
    digest = hashlib.sha256(f"{swarm}\0{execution_id}".encode()).hexdigest()[:8]
    stem = _NOT_DNS.sub("-", f"{swarm}-{execution_id}".lower())[:45].strip("-")
    return f"{stem}-{digest}" if stem else f"attempt-{digest}"


def secret_name(swarm: str, execution_id: str) -> str:
    """The name of the Secret that holds an attempt's worker credential."""
    return f"{pod_name(swarm, execution_id)}-credential"


def _copy(document: Any) -> Any:
    """A deep copy of a JSON document (a Pod body): one orjson round trip, several times
    faster than `copy.deepcopy` on the nested dicts of a Pod."""
    return orjson.loads(orjson.dumps(document))


SHARED_SETTINGS = (
    # The worker's home is the harness home the sidecar restores into and captures from.
    "HOME",
    "AGENTIHOOKS_HARNESS_HOME",
    "AGENTIHOOKS_CONTROL_ADDR",
    "AGENTIHOOKS_STORE_ADDR",
    "AGENTIHOOKS_CHECKPOINT_BUCKET",
    "AGENTIHOOKS_S3_ENDPOINT_URL",
    "AGENTIHOOKS_CHECKPOINT_ROOT",
    "AGENTIHOOKS_CAPTURE_INTERVAL_S",
    "AGENTIHOOKS_QUALIFIED_VERSIONS",
    *settings.HARNESS_VARIABLES,
    # The Pod's certificate: the sidecar serves with it and dials with it (`with_worker_tls`).
    tls_settings.CERT_FILE,
    tls_settings.KEY_FILE,
    tls_settings.CA_FILE,
    tls_settings.CLIENT_CA_FILE,
)
"""Settings the worker container and the restorer sidecar share: set in the template's worker
container, they reach the sidecar too (the sidecar is what talks to the controller and the
store, and follows the harness's folders)."""


def render_pod(
    template: Mapping[str, Any],
    spec: runtime.LaunchSpec,
    *,
    namespace: str,
    restorer_image: str | None = None,
    defaults: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The attempt's Pod: the template with identity, image, command, env and the sidecar;
    a replacement's Pod also carries the decision that admitted it (``spec.annotations``).

    Args:
        template: A worker Pod template with a container named ``worker``.
        spec: The attempt to launch.
        namespace: The namespace the Pod is created in.
        restorer_image: The sidecar's image; the worker image (which carries the restorer's
            console script) when None.
        defaults: Settings from the controller's own (the controller's and the store's
            addresses, the checkpoint bucket); the template overrides any of them by setting
            the same variable on its worker container (or on a ``restorer`` container, for
            the sidecar alone).

    Returns:
        The Pod body. It holds no credential, only a reference to the attempt's Secret.

    Raises:
        ValueError: The template has no worker container, a label value would be invalid, or
            ``spec.env`` tries to set the credential variable inline.
    """
    if runtime.CREDENTIAL_ENV in spec.env:
        raise ValueError(f"{runtime.CREDENTIAL_ENV} is set from the attempt's Secret only")
    labels = runtime.attempt_labels(spec.swarm, spec.seat, spec.execution_id, spec.generation)
    for key, value in labels.items():
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ValueError(f"{key} is not a valid label value")
    pod = _copy(template)
    metadata = pod.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata["name"] = pod_name(spec.swarm, spec.execution_id)
    metadata["namespace"] = namespace
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        **spec.annotations,
        runtime.ANNOTATION_IMAGE: spec.image,
    }
    containers = pod.setdefault("spec", {}).get("containers") or []
    worker = next((c for c in containers if c.get("name") == classifying.WORKER_CONTAINER), None)
    if worker is None:
        raise ValueError(f"the Pod template has no container named {classifying.WORKER_CONTAINER}")
    secret = secret_name(spec.swarm, spec.execution_id)
    worker["image"] = spec.image
    if spec.command:
        worker["command"] = list(spec.command)
        worker.pop("args", None)
    named = {e.get("name") for e in worker.get("env") or ()}
    fallback = {k: v for k, v in (defaults or {}).items() if k not in named}
    worker["env"] = _env(worker.get("env") or [], {**fallback, **spec.env}, secret)
    return inject_restorer(
        pod,
        image=restorer_image or spec.image,
        secret_name=secret,
        env=spec.env,
        defaults=defaults,
    )


def inject_restorer(
    pod: Mapping[str, Any],
    *,
    image: str,
    secret_name: str,
    env: Mapping[str, str],
    defaults: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Add the restorer sidecar to a worker Pod, replacing any restorer already there.

    The sidecar comes first among the init containers, so it has started before the worker, and
    it mounts every volume the worker mounts (it writes the harness home and the worktree).
    Its environment: what a ``restorer`` container of the template set (the operator's way to
    give the sidecar alone a setting, such as object storage credentials), then the worker
    container's `SHARED_SETTINGS`, then `defaults` for what neither set, then `env`.

    Args:
        pod: A worker Pod with a container named ``worker``.
        image: The restorer's image.
        secret_name: The attempt's credential Secret.
        env: Plain environment shared with the worker.
        defaults: Settings from the controller's own, used where the template sets none.

    Returns:
        A new Pod body; the argument is left unchanged.
    """
    result: dict[str, Any] = _copy(pod)
    spec = result.setdefault("spec", {})
    worker: dict[str, Any] = next(
        (c for c in spec.get("containers") or () if c.get("name") == classifying.WORKER_CONTAINER),
        {},
    )
    template_restorer: dict[str, Any] = next(
        (
            c
            for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ()))
            if c.get("name") == classifying.RESTORER_CONTAINER
        ),
        {},
    )
    base = [_copy(e) for e in template_restorer.get("env") or ()]
    named = {e.get("name") for e in base}
    for entry in worker.get("env") or ():
        if entry.get("name") in SHARED_SETTINGS and entry.get("name") not in named:
            base.append(_copy(entry))
            named.add(entry.get("name"))
    fallback = {k: v for k, v in (defaults or {}).items() if k not in named}
    sidecar = {
        "name": classifying.RESTORER_CONTAINER,
        "image": image,
        "restartPolicy": "Always",
        "command": ["agentihooks-restorer", "serve", "--listen", f"127.0.0.1:{RESTORER_PORT}"],
        "env": _env(base, {**fallback, **env}, secret_name),
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": _copy(worker.get("volumeMounts") or []),
    }
    others = [
        c
        for c in spec.get("initContainers") or ()
        if c.get("name") != classifying.RESTORER_CONTAINER
    ]
    spec["initContainers"] = [sidecar, *others]
    spec["containers"] = [
        c for c in spec.get("containers") or () if c.get("name") != classifying.RESTORER_CONTAINER
    ]
    return result


def render_secret(
    spec: runtime.LaunchSpec, *, namespace: str, owner_uid: str | None = None
) -> dict[str, Any]:
    """The Secret holding the attempt's worker credential.

    Args:
        spec: The attempt.
        namespace: The namespace.
        owner_uid: The uid of the attempt's Pod; when given, the Secret is owned by the Pod, so
            the cluster's garbage collector deletes it with the Pod whoever deletes that.

    Returns:
        The Secret body.
    """
    metadata: dict[str, Any] = {
        "name": secret_name(spec.swarm, spec.execution_id),
        "namespace": namespace,
        "labels": runtime.attempt_labels(spec.swarm, spec.seat, spec.execution_id, spec.generation),
    }
    if owner_uid is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name(spec.swarm, spec.execution_id),
                "uid": owner_uid,
            }
        ]
    encoded = base64.b64encode(spec.worker_credential.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata,
        "data": {CREDENTIAL_KEY: encoded},
    }


def _env(base: list[dict[str, Any]], extra: Mapping[str, str], secret: str) -> list[dict[str, Any]]:
    overridden = {*extra, runtime.CREDENTIAL_ENV}
    env = [_copy(e) for e in base if e.get("name") not in overridden]
    env.extend({"name": name, "value": value} for name, value in extra.items())
    env.append(
        {
            "name": runtime.CREDENTIAL_ENV,
            "valueFrom": {"secretKeyRef": {"name": secret, "key": CREDENTIAL_KEY}},
        }
    )
    return env
