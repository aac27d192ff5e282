"""The container launcher: puts itself in the container's context, then execs the command.

The kubelet runs this file as ``python -I -S launching.py`` (by path: isolated, without site; the
standard library only), its settings as JSON in ``KUBELET_LAUNCH`` (`LaunchConfig`). It joins the
container's cgroups, enters the Pod's UTS, network and mount namespaces (the sandbox's, see
`mounting`) and the container's root, takes the container's user and groups, then execs the
command. Anything that goes wrong before the exec is written to the ``report`` pipe (closed on
exec, so an empty read means the command runs), which the kubelet reads as ``StartError``.
"""

from __future__ import annotations

import ctypes
import json
import os
from typing import NoReturn, TypedDict

# setns(2) namespace types, from <sched.h>.
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
# prctl(2) option.
PR_SET_NO_NEW_PRIVS = 38

ENVIRONMENT = "KUBELET_LAUNCH"


class LaunchConfig(TypedDict, total=False):
    """The settings the kubelet passes in ``KUBELET_LAUNCH``."""

    report: int
    cgroups: list[str]
    uts: str | None
    net: str | None
    ns: str | None
    root: str
    no_new_privs: bool
    groups: list[int]
    gid: int
    uid: int
    cwd: str | None
    argv: list[str]
    env: dict[str, str]


def enter(config: LaunchConfig) -> None:
    """Join the cgroups and namespaces, enter the root and take the user, as the config says."""
    me = str(os.getpid())
    for path in config["cgroups"]:
        with open(path, "w") as f:
            f.write(me)
    libc = ctypes.CDLL(None, use_errno=True)
    joins = (
        (config.get("uts"), CLONE_NEWUTS),
        (config.get("net"), CLONE_NEWNET),
        (config.get("ns"), CLONE_NEWNS),
    )
    for namespace, kind in joins:
        if namespace:
            fd = os.open(namespace, os.O_RDONLY)
            if libc.setns(fd, kind) != 0:
                raise OSError(ctypes.get_errno(), "setns: " + os.strerror(ctypes.get_errno()))
            os.close(fd)
    if config.get("ns"):
        os.chroot(config["root"])
        os.chdir("/")
    if config.get("no_new_privs"):
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.setgroups(config["groups"])
    os.setgid(config["gid"])
    os.setuid(config["uid"])
    os.umask(0o022)
    os.chdir(config.get("cwd") or "/")


def main() -> NoReturn:
    """Enter the container's context and exec its command; on failure report why and exit 127."""
    config: LaunchConfig = json.loads(os.environ[ENVIRONMENT])
    report = config["report"]
    os.set_inheritable(report, False)
    try:
        enter(config)
        os.execvpe(config["argv"][0], config["argv"], config["env"])
    except BaseException as exc:
        os.write(report, (config["argv"][0] + ": " + str(exc)).encode() or b"failed")
        os._exit(127)


if __name__ == "__main__":
    main()
