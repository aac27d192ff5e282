"""A Pod's volumes on its node, and the sandbox settings that mount them into each container's
root: emptyDir, secret, configMap, persistentVolumeClaim, hostPath, with a Pod network also
/etc/hosts, /etc/resolv.conf and the service account token."""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.kube.network import pod_network
from tests.support.kube.node import (
    context,
    pods,
    volume_files,
)

log = logging.getLogger("tests.kubelet")


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class Volumes:
    """Sets up the volumes of one node's Pods."""

    def __init__(self, node: context.NodeContext, image_paths: Sequence[str]) -> None:
        self.context = node
        self.image_paths = list(image_paths)

    async def sandbox_config(self, pod: pods.Pod) -> dict[str, Any]:
        spec = pod.spec
        volumes_folder = pod.folder / "volumes"
        volumes_folder.mkdir(exist_ok=True)
        security = spec.get("securityContext") or {}
        fs_group = security.get("fsGroup")
        sources: dict[str, tuple[str, bool]] = {}  # name -> (host path, read-only)
        memory: list[str] = []
        for volume in spec.get("volumes") or ():
            name = volume["name"]
            folder = volumes_folder / name
            if "emptyDir" in volume:
                folder.mkdir(exist_ok=True)
                os.chmod(folder, 0o777)
                if fs_group is not None:
                    os.chown(folder, -1, int(fs_group))
                    os.chmod(folder, 0o2777)
                if (volume["emptyDir"] or {}).get("medium") == "Memory":
                    memory.append(str(folder))
                sources[name] = (str(folder), False)
            elif "secret" in volume or "configMap" in volume:
                kind = "secret" if "secret" in volume else "configMap"
                await self.write_object_volume(pod, kind, volume[kind] or {}, folder, fs_group)
                sources[name] = (str(folder), True)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"] or {}
                readonly = bool(claim.get("readOnly"))
                policy = security.get("fsGroupChangePolicy")
                claim_folder = await self.claim_volume(pod, claim, fs_group, policy, readonly)
                sources[name] = (str(claim_folder), readonly)
            elif "hostPath" in volume:
                host = volume["hostPath"] or {}
                sources[name] = (volume_files.host_path(host), False)
            else:
                kinds = sorted(k for k in volume if k != "name")
                raise pods.MountError(f"volume {name!r}: unsupported volume type {kinds}")
        extra: list[dict[str, Any]] = []
        if self.context.network is not None:
            pod.ip = self.context.network.allocate(pod.uid)
            self.write_hosts(pod)
            (pod.folder / "resolv.conf").write_text(pod_network.resolv_conf(pod.namespace))
            extra.append({"source": str(pod.folder / "hosts"), "path": "/etc/hosts"})
            extra.append({"source": str(pod.folder / "resolv.conf"), "path": "/etc/resolv.conf"})
            account = await self.service_account_volume(pod)
            if account is not None:
                extra.append({"source": str(account), "path": SERVICE_ACCOUNT, "readonly": True})
        roots = []
        for c in pod.containers:
            mounts = [{"readonly": False, "recursive": False, **m} for m in extra]
            for m in c.spec.get("volumeMounts") or ():
                if m["name"] not in sources:
                    raise pods.MountError(f"container {c.name}: no volume named {m['name']!r}")
                source, readonly = sources[m["name"]]
                if m.get("subPath"):
                    sub = Path(source) / m["subPath"]
                    if ".." in Path(m["subPath"]).parts:
                        raise pods.MountError(f"container {c.name}: subPath escapes the volume")
                    if not sub.exists():
                        sub.mkdir(parents=True, mode=0o777)
                    source = str(sub)
                mounts.append(
                    {
                        "source": source,
                        "path": m["mountPath"],
                        "readonly": readonly or bool(m.get("readOnly")),
                        "recursive": source not in (str(volumes_folder / m["name"]),),
                    }
                )
            root = pod.folder / "roots" / c.name
            root.mkdir(parents=True, exist_ok=True)
            dirs = [c.spec["workingDir"]] if c.spec.get("workingDir") else []
            roots.append({"root": str(root), "mounts": mounts, "dirs": dirs})
        stash = pod.folder / "host"
        stash.mkdir(exist_ok=True)
        config = {
            "stash": str(stash),
            "hostname": pod.spec.get("hostname") or pod.name[:63],
            "roots": roots,
            "memory": memory,
            "images": self.image_paths,
        }
        return config

    def write_hosts(self, pod: pods.Pod) -> None:
        text = pod_network.hosts_file(
            pod.namespace, pod.name, pod.ip, self.context.services.values()
        )
        # In place: the file is bound over /etc/hosts, so it must stay the same inode.
        with open(pod.folder / "hosts", "a+") as f:
            f.seek(0)
            if f.read() != text:
                f.seek(0)
                f.truncate()
                f.write(text)
        os.chmod(pod.folder / "hosts", 0o644)

    async def service_account_volume(self, pod: pods.Pod) -> Path | None:
        """The service account token volume the API server's admission gives a Pod unless
        ``automountServiceAccountToken`` is false (on the Pod, else on its service account):
        ``token`` (a TokenRequest for the Pod's service account), ``ca.crt`` (the namespace's
        ``kube-root-ca.crt``) and ``namespace``. None when not mounted, or when the cluster has
        no in-cluster API (no Service ``default/kubernetes``)."""
        if "default/kubernetes" not in self.context.services:
            return None
        name = pod.spec.get("serviceAccountName") or "default"
        automount = pod.spec.get("automountServiceAccountToken")
        account = await self.context.api.get(
            f"/api/v1/namespaces/{pod.namespace}/serviceaccounts/{name}"
        )
        if account is None:
            raise pods.MountError(f'serviceaccount "{name}" not found')
        if automount is None:
            automount = account.get("automountServiceAccountToken", True)
        if not automount:
            return None
        ca = await self.context.api.get(
            f"/api/v1/namespaces/{pod.namespace}/configmaps/kube-root-ca.crt"
        )
        if ca is None:
            raise pods.MountError('configmap "kube-root-ca.crt" not found')
        answer = await self.context.api.call(
            "POST",
            f"/api/v1/namespaces/{pod.namespace}/serviceaccounts/{name}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        folder = pod.folder / "serviceaccount"
        folder.mkdir(exist_ok=True)
        files = [
            ("token", answer["status"]["token"].encode(), 0o644),
            ("ca.crt", ca["data"]["ca.crt"].encode(), 0o644),
            ("namespace", pod.namespace.encode(), 0o644),
        ]
        security = pod.spec.get("securityContext") or {}
        volume_files.write_files(folder, files, security.get("fsGroup"))
        return folder

    async def write_object_volume(
        self, pod: pods.Pod, kind: str, source: Mapping[str, Any], folder: Path, fs_group: Any
    ) -> None:
        """Write a ``secret`` or ``configMap`` volume's files (see `volume_files.object_files`):
        a Secret's ``data`` decoded from base64; a ConfigMap's ``data`` as UTF-8 text and its
        ``binaryData`` decoded from base64.

        Raises:
            pods.MountError: The object (or an item's key) is missing and not optional.
        """
        resource, name_field, singular, title = volume_files.OBJECT_SOURCES[kind]
        name = source.get(name_field, "")
        found = await self.context.api.get(f"/api/v1/namespaces/{pod.namespace}/{resource}/{name}")
        if found is None:
            if source.get("optional"):
                volume_files.write_files(folder, [], fs_group)
                return
            raise pods.MountError(f'MountVolume.SetUp failed: {singular} "{name}" not found')
        encoded = found.get("data" if kind == "secret" else "binaryData") or {}
        data = {k: base64.b64decode(v) for k, v in encoded.items()}
        if kind == "configMap":
            data.update({k: str(v).encode() for k, v in (found.get("data") or {}).items()})
        files = volume_files.object_files(source, data, kind, f"{title} {pod.namespace}/{name}")
        volume_files.write_files(folder, files, fs_group)

    async def claim_volume(
        self,
        pod: pods.Pod,
        source: Mapping[str, Any],
        fs_group: Any,
        policy: str | None,
        readonly: bool,
    ) -> Path:
        """The folder of a ``persistentVolumeClaim`` volume (`claim_path`), made on first use
        (mode 0777) and kept when the Pod goes; with ``fsGroup``, its files are given to that
        group (see `volume_files.give_to_group`).

        Raises:
            pods.MountError: The claim does not exist in the Pod's namespace or is being deleted.
        """
        name = str(source.get("claimName", ""))
        if not name or "/" in name or name in (".", ".."):
            raise pods.MountError(f"persistentVolumeClaim: invalid claimName {name!r}")
        claim = await self.context.api.get(
            f"/api/v1/namespaces/{pod.namespace}/persistentvolumeclaims/{name}"
        )
        failed = f"error processing PVC {pod.namespace}/{name}"
        if claim is None:
            raise pods.MountError(
                f"{failed}: failed to fetch PVC from API server: "
                f'persistentvolumeclaims "{name}" not found'
            )
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            raise pods.MountError(f"{failed}: can't start pod because PVC is being deleted")
        folder = self.claim_path(pod.namespace, name)
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o777)
        if fs_group is not None:
            volume_files.give_to_group(folder, int(fs_group), readonly, policy)
        return folder

    def claim_path(self, namespace: str, claim: str) -> Path:
        """The host folder holding a PersistentVolumeClaim's data on this node: made when a Pod
        first mounts the claim, kept when Pods go, removed by `close`."""
        return self.context.root / "claims" / namespace / claim
