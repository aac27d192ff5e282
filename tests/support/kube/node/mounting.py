"""The Pod sandbox: holds a Pod's mount and UTS namespaces and builds a root per container in them.

The kubelet runs this file as ``unshare --mount --uts [--net] --propagation private -- python -I
-S mounting.py`` (by path: isolated, without site, so nothing of the environment or the project
is imported; the standard library only). Its settings come as JSON in ``KUBELET_SANDBOX``
(`SandboxConfig`). It sets the Pod's hostname, builds each container's root (a tmpfs mirroring
the host's top-level entries, with the container's volumes bound on top: see the kubelet's
module docstring), says ``ready`` on stdout and holds the namespaces until its stdin closes or
it is killed.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys
from typing import TypedDict

# mount(2) flags, from <sys/mount.h>.
RDONLY = 1
NOSUID = 2
NODEV = 4
REMOUNT = 32
BIND = 4096
REC = 16384
PRIVATE = 1 << 18
# umount2(2): MNT_DETACH.
DETACH = 2

ENVIRONMENT = "KUBELET_SANDBOX"


class MountSpec(TypedDict, total=False):
    """One volume mount of a container: ``source`` on this machine shown at ``path``."""

    source: str
    path: str
    readonly: bool
    recursive: bool


class RootSpec(TypedDict):
    """One container's root: where it is built, what is mounted in it, which folders it needs."""

    root: str
    mounts: list[MountSpec]
    dirs: list[str]


class SandboxConfig(TypedDict):
    """The settings the kubelet passes in ``KUBELET_SANDBOX``."""

    hostname: str
    stash: str
    memory: list[str]
    images: list[str]
    roots: list[RootSpec]


_libc = ctypes.CDLL(None, use_errno=True)


def _encoded(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def mount(
    source: str | None, target: str | None, fstype: str | None, flags: int, data: str | None = None
) -> None:
    """mount(2), raising `OSError` with what failed."""
    if (
        _libc.mount(_encoded(source), _encoded(target), _encoded(fstype), flags, _encoded(data))
        != 0
    ):
        e = ctypes.get_errno()
        raise OSError(e, f"mount {source} on {target}: {os.strerror(e)}")


def tmpfs(path: str, st: os.stat_result, extra: int = 0) -> None:
    """Mount a tmpfs at ``path`` with the mode and owner of ``st``, plus the mode bits ``extra``."""
    mode = f"mode={(st.st_mode & 0o7777) | extra:o},uid={st.st_uid},gid={st.st_gid}"
    mount("tmpfs", path, "tmpfs", NOSUID | NODEV, mode)


class Root:
    """A container's root under construction: which of its folders show the host, which are ours."""

    def __init__(self, root: str, stash: str) -> None:
        self.root = root
        self.stash = stash
        self.points: dict[str, str | None] = {root: None}  # mount point -> host folder (None: ours)
        tmpfs(root, os.stat("/"))
        self.mirror("/", root)

    def mirror(self, host: str, target: str) -> None:
        """Fill ``target`` with an entry per entry of the host folder ``host``, each bound in."""
        source = self.stash + host if host != "/" else self.stash
        for name in sorted(os.listdir(source)):
            src, dst = os.path.join(source, name), os.path.join(target, name)
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISDIR(st.st_mode):
                os.mkdir(dst)
                mount(src, dst, None, BIND | REC)
                self.points[dst] = os.path.join(host, name)
            else:
                with open(dst, "w"):  # an empty file to bind onto
                    pass
                mount(src, dst, None, BIND)

    def host_of(self, path: str) -> str | None:
        """The host folder a folder of this root shows, or None when it is ours (a tmpfs we made,
        or a volume)."""
        probe = path
        while True:
            if probe in self.points:
                host = self.points[probe]
                return None if host is None else host + path[len(probe) :]
            probe = os.path.dirname(probe)

    def own(self, path: str, extra: int = 0) -> None:
        """Make a folder of this root ours: a tmpfs copy of the host folder it showed."""
        host = self.host_of(path)
        if host is None:
            if extra:
                os.chmod(path, os.stat(path).st_mode & 0o7777 | extra)
            return
        tmpfs(path, os.stat(path), extra)
        self.points[path] = None
        self.mirror(host, path)

    def resolve(self, path: str, make: bool) -> str | None:
        """Where ``path`` (as the container sees it) is in this root, following its symbolic links
        inside the root; missing folders are made (in folders made ours) when ``make``, else
        None."""
        parts = [p for p in path.split("/") if p and p != "."]
        current, hops = self.root, 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                current = max(os.path.dirname(current), self.root, key=len)
                continue
            nxt = os.path.join(current, part)
            if os.path.islink(nxt):
                hops += 1
                if hops > 40:
                    raise OSError(40, "too many symbolic links in " + path)
                target = os.readlink(nxt)
                if target.startswith("/"):
                    current = self.root
                parts = [p for p in target.split("/") if p and p != "."] + parts
                continue
            if not os.path.lexists(nxt):
                if not make:
                    return None
                self.own(current)
                os.mkdir(nxt, 0o755)
            current = nxt
        return current

    def bind(self, source: str, path: str, readonly: bool, recursive: bool = False) -> str:
        """Bind ``source`` at ``path`` of this root (read-only when ``readonly``)."""
        if os.path.isdir(source):
            target = self.resolve(path, True)
            assert target is not None
        else:
            parent = self.resolve(os.path.dirname(path) or "/", True)
            assert parent is not None
            target = os.path.join(parent, os.path.basename(path))
            if not os.path.lexists(target):
                self.own(parent)
                with open(target, "w"):  # an empty file to bind onto
                    pass
        mount(source, target, None, BIND | (REC if recursive else 0))
        self.points[target] = None
        if readonly:
            mount(None, target, None, REMOUNT | BIND | RDONLY)
        return target


def build_root(spec: RootSpec, stash: str, images: list[str]) -> None:
    """Build one container's root: image paths traversable, volumes bound, folders made."""
    root = Root(spec["root"], stash)
    for image in images:
        parts = image.strip("/").split("/")
        for depth in range(1, len(parts)):
            folder = root.resolve("/" + "/".join(parts[:depth]), False)
            if folder is not None and not os.stat(folder).st_mode & 0o001:
                root.own(folder, 0o111)
    # Folders by depth, then files (/etc/hosts): a folder made ours later would hide a file bound
    # into it before.
    volumes = sorted(
        spec["mounts"],
        key=lambda m: (not os.path.isdir(m["source"]), m["path"].rstrip("/").count("/")),
    )
    for m in volumes:
        root.bind(m["source"], m["path"], m["readonly"], m.get("recursive", False))
    for image in images:
        shadowed = [
            m["path"]
            for m in volumes
            if image.startswith(m["path"].rstrip("/") + "/") and m["path"] != "/"
        ]
        if shadowed and os.path.isdir(image):
            root.bind(stash + image, image, False, recursive=True)
    for folder in spec["dirs"]:
        root.resolve(folder, True)


def enter(config: SandboxConfig) -> None:
    """Make this namespace the Pod's: private propagation, its hostname, a stash of the host's
    mount tree and the ``medium: Memory`` volumes."""
    mount(None, "/", None, REC | PRIVATE)
    hostname = config["hostname"].encode()
    if _libc.sethostname(hostname, len(hostname)) != 0:
        raise OSError(ctypes.get_errno(), "sethostname")
    # A copy of the host's mount tree taken before anything is mounted here, so the roots built
    # next (under the kubelet's folder, itself somewhere in that tree) never contain themselves.
    mount("/", config["stash"], None, BIND | REC)
    for path in config["memory"]:
        mount("tmpfs", path, "tmpfs", NOSUID | NODEV, "mode=0777")


def build_roots(config: SandboxConfig) -> None:
    """Build every container's root, then let go of the stash."""
    stash = config["stash"]
    for spec in config["roots"]:
        build_root(spec, stash, config["images"])
    if _libc.umount2(stash.encode(), DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount " + stash)


def main() -> int:
    """Run as the sandbox: enter, build the roots, say "ready", hold the namespaces until stdin
    closes. A failure to build a root is one line ``error: ...`` on stdout (the kubelet reads it
    as the sandbox's failure); one while entering is a traceback on stderr."""
    config: SandboxConfig = json.loads(os.environ[ENVIRONMENT])
    enter(config)
    try:
        build_roots(config)
    except Exception as exc:
        print(f"error: {exc}", flush=True)
        return 1
    print("ready", flush=True)
    while os.read(0, 4096):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
