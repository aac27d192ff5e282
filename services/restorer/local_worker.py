"""A whole worker outside Kubernetes (the local runtime): the sidecar and the entry point.

In a Pod the restorer sidecar is a native sidecar container and the worker container runs the
entry point. On one machine the worker's folder stands in for the Pod: `work/` is the task
worktree, `home/` the harness home, and the folder itself the attempt folder. The sidecar runs as
a child on a free loopback port and ends when the worker process (the entry point, which becomes
the harness) is gone.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import NoReturn

from services.common import settings
from services.restorer import entry

CAPTURE_INTERVAL_ENV = settings.PREFIX + "CAPTURE_INTERVAL_S"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(env: Mapping[str, str], folder: pathlib.Path | None = None) -> NoReturn:
    """Start the sidecar beside this process, then run the entry point (which execs the harness)."""
    attempt = (folder or pathlib.Path.cwd()).resolve()
    worktree = attempt / "work"
    home = attempt / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    port = _free_port()
    child_env = {
        **env,
        "HOME": str(home),
        settings.PREFIX + "ATTEMPT_DIR": str(attempt),
        settings.PREFIX + "HARNESS_HOME": str(home),
        settings.PREFIX + "RESTORER_ADDR": f"127.0.0.1:{port}",
    }
    interval = env.get(CAPTURE_INTERVAL_ENV)
    command = [
        sys.executable,
        "-m",
        "services.restorer.main",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--exit-with",
        str(os.getpid()),
    ]
    if interval:
        command += ["--capture-interval", interval]
    with open(attempt / "sidecar.log", "ab") as sidecar_log:
        subprocess.Popen(
            command,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=sidecar_log,
            stderr=sidecar_log,
            cwd=attempt,
        )
    # The harness sees its own home; the sidecar keeps the worker credential to itself.
    os.environ["HOME"] = str(home)
    os.environ[settings.PREFIX + "ATTEMPT_DIR"] = str(attempt)
    os.environ[settings.PREFIX + "HARNESS_HOME"] = str(home)
    entry.run(f"127.0.0.1:{port}", worktree)
