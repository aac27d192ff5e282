"""The demo's setup on this machine: its folder (`.demo/`, held by one demo at a time), its
ports, the project repository the workers clone and the stand-in for Claude Code they run.
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import shlex
import shutil
import socket
import subprocess
import sys
import time
from typing import IO

from services.controller.pods import runtime

ROOT = pathlib.Path.cwd() / ".demo"
SWARM = "demo"
IMAGE = "agentihooks-worker:demo"
FAIL_NOW = "eng-1-may-fail"
"""The file that lets eng-1's first worker crash (under `.demo/`): the demo makes it once that
worker's checkpoint reached the controller, so the story never depends on timing."""


USUAL_PORTS = {"control": 50051, "http": 8080, "store": 50052, "redis": 6390}


def port(usual: int = 0) -> int:
    """`usual` when it is free on 127.0.0.1, else a free port."""
    for candidate in (usual, 0) if usual else (0,):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise SystemExit("demo: no free port on 127.0.0.1")


def wait_port(port: int, what: str, proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"demo: {what} exited early; see {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"demo: {what} did not start; see {log}")


def git(*args: str, cwd: pathlib.Path) -> None:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@localhost",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@localhost",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def project() -> pathlib.Path:
    """A small project repository the workers clone."""
    src = ROOT / "project-src"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src)
    (src / "README.md").write_text("# demo project\n")
    git("add", ".", cwd=src)
    git("commit", "-q", "-m", "initial", cwd=src)
    bare = ROOT / "project.git"
    git("clone", "-q", "--bare", str(src), str(bare), cwd=ROOT)
    return bare


def agent_bin() -> pathlib.Path:
    """The stand-in for Claude Code, as `claude` on the workers' PATH: a wrapper that tells it
    where the file that lets eng-1's first worker crash will be."""
    bin_dir = ROOT / "bin"
    bin_dir.mkdir()
    source = bin_dir / "demo_agent.py"
    source.write_text(pathlib.Path(__file__).with_name("demo_agent.py").read_text())
    agent = bin_dir / "claude"
    agent.write_text(
        "#!/bin/sh\n"
        f"DEMO_FAIL_AFTER_FILE={shlex.quote(str(ROOT / FAIL_NOW))} "
        f'exec {shlex.quote(sys.executable)} {shlex.quote(str(source))} "$@"\n'
    )
    agent.chmod(0o755)
    return bin_dir


def claim_folder() -> IO[str]:
    """Hold `.demo/` for this demo: refuse while another demo in this folder holds it, then
    clear what an earlier, finished demo left. The lock is released when this process ends,
    however it ends."""
    ROOT.mkdir(exist_ok=True)
    lock = (ROOT / ".lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise SystemExit(
            f"demo: another demo is running in this folder (pid {holder}); stop it first "
            "(Ctrl-C in its terminal), or run this one from another checkout"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    for entry in ROOT.iterdir():
        if entry.name == ".lock":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return lock


def attempt_folder(execution_id: str) -> pathlib.Path:
    return ROOT / "workers" / SWARM / execution_id


def wait_logged(log: pathlib.Path, event: str, timeout: float = 120) -> None:
    """Until the sidecar log `log` holds `event`."""
    print(f"  waiting until the sidecar logs {event} ...", flush=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and f'"event": "{event}"' in log.read_text():
            return
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out waiting for {event} in {log}")


def credential_of(execution_id: str) -> str:
    """The worker credential attempt `execution_id` runs with, read from its worker's
    environment as anyone who copied a lost worker's environment would hold it."""
    record = json.loads((attempt_folder(execution_id) / "attempt.json").read_text())
    environ = pathlib.Path(f"/proc/{record['pid']}/environ").read_bytes()
    prefix = f"{runtime.CREDENTIAL_ENV}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode()
    raise SystemExit(f"demo: {execution_id}'s worker runs without a credential")
