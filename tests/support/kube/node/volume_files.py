"""The files of a Pod's volumes on the node: hostPath folders, the files of secret and configMap
volumes, and their ownership for the Pod's ``fsGroup``."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.support.kube.node import pods

log = logging.getLogger("tests.kubelet")


# secret and configMap volumes -> (resource, the source's name field, name in errors, kind).
OBJECT_SOURCES = {
    "secret": ("secrets", "secretName", "secret", "Secret"),
    "configMap": ("configmaps", "name", "configmap", "ConfigMap"),
}


def host_path(source: Mapping[str, Any]) -> str:
    target = Path(source["path"])
    kind = source.get("type") or ""
    if not target.exists():
        if kind not in ("", "DirectoryOrCreate"):
            raise pods.MountError(f"hostPath type check failed: {target} is not a {kind}")
        target.mkdir(parents=True, mode=0o755)
    return str(target)


def object_files(
    source: Mapping[str, Any], data: Mapping[str, bytes], kind: str, owner: str
) -> list[tuple[str, bytes, int]]:
    """The files of a ``secret`` or ``configMap`` volume: one per key, or ``items`` (key ->
    relative path, ``mode``); modes default to ``defaultMode``, else 0644.

    Args:
        source: The volume source.
        data: Key -> content.
        kind: The volume type, for errors.
        owner: The object, for errors ("Secret ns/name").

    Raises:
        pods.MountError: An item's key is missing (and the source is not optional), or a path is
            absolute or leaves the volume.
    """
    default_mode = int(source.get("defaultMode", 0o644))
    items = source.get("items")
    files: list[tuple[str, bytes, int]] = []
    if items:
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise pods.MountError(
                    f"MountVolume.SetUp failed: couldn't find key {item['key']} in {owner}"
                )
            files.append((item["path"], data[item["key"]], int(item.get("mode", default_mode))))
    else:
        files = [(key, value, default_mode) for key, value in data.items()]
    for relative, _, _ in files:
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise pods.MountError(f"{kind} volume item path {relative!r} escapes the volume")
    return files


def give_to_group(folder: Path, gid: int, readonly: bool, policy: str | None) -> None:
    """Give a volume to a Pod's ``fsGroup`` as a kubelet does: every entry gets group `gid`
    and group read/write (read on a read-only volume), folders also group search and set-group-ID;
    with ``fsGroupChangePolicy: OnRootMismatch`` nothing changes when the root already has them.
    Symbolic links get the group only."""
    mask = 0o440 if readonly else 0o660
    folder_mask = mask | 0o110 | stat.S_ISGID
    root = os.stat(folder)
    if (
        policy == "OnRootMismatch"
        and root.st_gid == gid
        and root.st_mode & folder_mask == folder_mask
    ):
        return

    def change(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            os.lchown(path, -1, gid)
            if not stat.S_ISLNK(st.st_mode):
                extra = folder_mask if stat.S_ISDIR(st.st_mode) else mask
                os.chmod(path, stat.S_IMODE(st.st_mode) | extra)

    change(str(folder))
    for parent, dirs, names in os.walk(folder):
        for entry in [*dirs, *names]:
            change(os.path.join(parent, entry))


def write_files(folder: Path, files: Iterable[tuple[str, bytes, int]], fs_group: Any) -> None:
    folder.mkdir(exist_ok=True)
    os.chmod(folder, 0o755)
    for relative, content, mode in files:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        if fs_group is not None:
            os.chown(target, -1, int(fs_group))
            mode |= 0o040
        os.chmod(target, mode)


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths that no other path of the list contains."""
    unique = sorted(set(paths), key=len)
    kept: list[str] = []
    for p in unique:
        if p != "/" and not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept
