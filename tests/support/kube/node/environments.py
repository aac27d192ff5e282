"""Who a container runs as and what its environment holds: ``securityContext`` identities,
``env`` and ``envFrom`` from Secrets, ConfigMaps, fields and resources, and the image's
defaults."""

from __future__ import annotations

import base64
import logging
import pwd
import re
from collections.abc import Mapping
from typing import Any

from tests.support.kube.node import (
    context,
    pods,
    resources,
)

log = logging.getLogger("tests.kubelet")

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The image's ``PATH`` after the venv's ``bin``."""


REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is ``$``."""

    def one(found: re.Match[str]) -> str:
        if found.group(0) == "$$":
            return "$"
        return env.get(found.group(1), found.group(0))

    return REFERENCE.sub(one, text)


# envFrom sources and valueFrom key references -> (resource, name in errors, kind).
ENV_FROM = {
    "secretRef": ("secrets", "secret", "Secret"),
    "configMapRef": ("configmaps", "configmap", "ConfigMap"),
}


KEY_REFS = {
    "secretKeyRef": ("secrets", "secret", "Secret"),
    "configMapKeyRef": ("configmaps", "configmap", "ConfigMap"),
}


def launch_settings(
    c: pods.Container,
    argv: list[str],
    env: Mapping[str, str],
    identity: tuple[int, int, list[int], bool],
) -> dict[str, Any]:
    """What the launcher needs to run `argv` as container `c` (see `launching.LaunchConfig`),
    but where: its command, environment, identity (`Environments.identity`) and folder."""
    uid, gid, groups, no_new_privs = identity
    return {
        "argv": argv,
        "env": dict(env),
        "uid": uid,
        "gid": gid,
        "groups": groups,
        "no_new_privs": no_new_privs,
        "cwd": c.spec.get("workingDir") or "/",
    }


class Environments:
    """Identities and environments of one node's containers."""

    def __init__(self, node: context.NodeContext, path: str) -> None:
        self.context = node
        self.path = path
        """The containers' default ``PATH``."""

    def identity(self, pod: pods.Pod, c: pods.Container) -> tuple[int, int, list[int], bool]:
        pod_security = pod.spec.get("securityContext") or {}
        security = {**pod_security, **(c.spec.get("securityContext") or {})}
        uid = int(security.get("runAsUser", 0))
        if security.get("runAsNonRoot") and uid == 0:
            raise pods.ConfigError(
                "container has runAsNonRoot and image will run as root "
                f'(pod: "{pod.name}_{pod.namespace}({pod.uid})", container: {c.name})'
            )
        try:
            default_gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            default_gid = 0
        gid = int(security.get("runAsGroup", default_gid))
        groups = [int(g) for g in pod_security.get("supplementalGroups") or ()]
        if pod_security.get("fsGroup") is not None:
            groups.insert(0, int(pod_security["fsGroup"]))
        no_new_privs = security.get("allowPrivilegeEscalation") is False
        return uid, gid, sorted(set(groups)), no_new_privs

    async def environment(self, pod: pods.Pod, c: pods.Container, uid: int) -> dict[str, str]:
        """The container's environment: ``envFrom`` (Secrets and ConfigMaps, with ``prefix``),
        then ``env``, then the image's defaults for what neither set.

        Raises:
            pods.ConfigError: A Secret or ConfigMap (or one of its keys) that is not optional is
                missing, or a reference is not supported.
        """
        cache: dict[tuple[str, str], dict[str, str] | None] = {}

        async def text_data(resource: str, name: str) -> dict[str, str] | None:
            """The text data of a Secret or ConfigMap (None when it does not exist)."""
            if (resource, name) not in cache:
                found = await self.context.api.get(
                    f"/api/v1/namespaces/{pod.namespace}/{resource}/{name}"
                )
                values = None if found is None else dict(found.get("data") or {})
                if values is not None and resource == "secrets":
                    values = {
                        k: base64.b64decode(v).decode(errors="replace") for k, v in values.items()
                    }
                cache[resource, name] = values
            return cache[resource, name]

        env: dict[str, str] = {}
        for source in c.spec.get("envFrom") or ():
            kind = next((k for k in ENV_FROM if k in source), None)
            if kind is None:
                raise pods.ConfigError(f"envFrom: unsupported source {sorted(source)}")
            resource, singular, _ = ENV_FROM[kind]
            ref = source[kind] or {}
            found = await text_data(resource, ref.get("name", ""))
            if found is None:
                if ref.get("optional"):
                    continue
                raise pods.ConfigError(f'{singular} "{ref.get("name", "")}" not found')
            for key, value in found.items():
                env[source.get("prefix", "") + key] = value
        for entry in c.spec.get("env") or ():
            name = entry["name"]
            if "valueFrom" not in entry:
                env[name] = expand(str(entry.get("value", "")), env)
                continue
            origin = entry["valueFrom"]
            kind = next((k for k in KEY_REFS if k in origin), None)
            if kind is not None:
                resource, singular, title = KEY_REFS[kind]
                ref = origin[kind] or {}
                found = await text_data(resource, ref.get("name", ""))
                if found is None or ref.get("key") not in found:
                    if ref.get("optional"):
                        continue
                    if found is None:
                        raise pods.ConfigError(f'{singular} "{ref.get("name", "")}" not found')
                    raise pods.ConfigError(
                        f"couldn't find key {ref.get('key')} in {title} "
                        f"{pod.namespace}/{ref.get('name', '')}"
                    )
                env[name] = found[ref["key"]]
            elif "fieldRef" in origin:
                env[name] = self.field(pod, origin["fieldRef"]["fieldPath"])
            elif "resourceFieldRef" in origin:
                env[name] = resources.resource_field(c.spec, origin["resourceFieldRef"])
            else:
                raise pods.ConfigError(f"env {name}: unsupported valueFrom {sorted(origin)}")
        try:
            home = pwd.getpwuid(uid).pw_dir or "/"
        except KeyError:
            home = "/"
        master = self.context.services.get("default/kubernetes")
        if self.context.network is not None and master is not None:
            ports = master["spec"].get("ports") or [{}]
            port = ports[0].get("port", 443)
            env = {
                "KUBERNETES_SERVICE_HOST": master["spec"]["clusterIP"],
                "KUBERNETES_SERVICE_PORT": str(port),
                **env,
            }
        return {"PATH": self.path, "HOSTNAME": pod.name, "HOME": home, **env}

    def field(self, pod: pods.Pod, path: str) -> str:
        meta = pod.obj["metadata"]
        found = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if found:
            return str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
        values = {
            "metadata.name": meta.get("name"),
            "metadata.namespace": meta.get("namespace"),
            "metadata.uid": meta.get("uid"),
            "spec.nodeName": self.context.node_name,
            "spec.serviceAccountName": pod.spec.get("serviceAccountName", "default"),
            "status.hostIP": pods.HOST_IP,
            "status.podIP": pod.ip,
        }
        if path not in values:
            raise pods.ConfigError(f"unsupported fieldRef {path}")
        return str(values[path] or "")
