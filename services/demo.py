"""`make demo`: the main job on the embedded default, start to finish, on this machine.

It starts a local redis-server, the checkpoint store (local folder) and the controller (local
worker runtime), applies a two-seat swarm whose workers run a stand-in for Claude Code, and then
shows what an operator sees:

- eng-1 holds a native session and a checkpoint is captured; its worker crashes; the controller
  fences it (the fence event is shown, and the lost attempt's worker credential is refused) and
  resumes it natively without asking; the replacement reports `native`.
- eng-2 crashes before any conversation; it waits for a decision (fresh only); the operator
  chooses fresh with the CLI; the replacement reports `fresh`.

Everything lives in `.demo/` (logs, checkpoints, worker folders); one demo runs per folder at a
time (a second one refuses while the first runs, and never touches its files). Then the system
stays up for you to explore: the ledger page's address and a file of `export` lines for the CLI
(`source .demo/env` in a new terminal) are printed, and Ctrl-C stops everything cleanly. The
services take their usual ports (controller 50051 and 8080, store 50052, Redis 6390) when those
are free, else free ones, and say which.

`DEMO_EXIT=1` (or `--exit`) runs the story to the end and exits, for scripts; `DEMO_PORTS=free`
(or `--free-ports`) takes free ports only.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pathlib
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from services.controller.pods import runtime

ROOT = pathlib.Path.cwd() / ".demo"
SWARM = "demo"
IMAGE = "agentihooks-worker:demo"
FAIL_NOW = "eng-1-may-fail"
"""The file that lets eng-1's first worker crash (under `.demo/`): the demo makes it once that
worker's checkpoint reached the controller, so the story never depends on timing."""


USUAL_PORTS = {"control": 50051, "http": 8080, "store": 50052, "redis": 6390}


def _port(usual: int = 0) -> int:
    """`usual` when it is free on 127.0.0.1, else a free port."""
    for candidate in (usual, 0) if usual else (0,):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise SystemExit("demo: no free port on 127.0.0.1")


def _wait_port(port: int, what: str, proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"demo: {what} exited early; see {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"demo: {what} did not start; see {log}")


def _git(*args: str, cwd: pathlib.Path) -> None:
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


def _project() -> pathlib.Path:
    """A small project repository the workers clone."""
    src = ROOT / "project-src"
    src.mkdir()
    _git("init", "-q", "-b", "main", cwd=src)
    (src / "README.md").write_text("# demo project\n")
    _git("add", ".", cwd=src)
    _git("commit", "-q", "-m", "initial", cwd=src)
    bare = ROOT / "project.git"
    _git("clone", "-q", "--bare", str(src), str(bare), cwd=ROOT)
    return bare


def _agent_bin() -> pathlib.Path:
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


def _claim_folder() -> IO[str]:
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


def _attempt_folder(execution_id: str) -> pathlib.Path:
    return ROOT / "workers" / SWARM / execution_id


def _wait_logged(log: pathlib.Path, event: str, timeout: float = 120) -> None:
    """Until the sidecar log `log` holds `event`."""
    print(f"  waiting until the sidecar logs {event} ...", flush=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and f'"event": "{event}"' in log.read_text():
            return
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out waiting for {event} in {log}")


def _credential_of(execution_id: str) -> str:
    """The worker credential attempt `execution_id` runs with, read from its worker's
    environment as anyone who copied a lost worker's environment would hold it."""
    record = json.loads((_attempt_folder(execution_id) / "attempt.json").read_text())
    environ = pathlib.Path(f"/proc/{record['pid']}/environ").read_bytes()
    prefix = f"{runtime.CREDENTIAL_ENV}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode()
    raise SystemExit(f"demo: {execution_id}'s worker runs without a credential")


class Demo:
    def __init__(self, *, usual_ports: bool) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.operator_token = secrets.token_urlsafe(24)
        self.grant_key = secrets.token_urlsafe(48)
        ports = USUAL_PORTS if usual_ports else dict.fromkeys(USUAL_PORTS, 0)
        self.control_port = _port(ports["control"])
        self.http_port = _port(ports["http"])
        self.store_port = _port(ports["store"])
        self.redis_port = _port(ports["redis"])

    def start(self, name: str, argv: list[str], env: Mapping[str, str], port: int) -> None:
        log = ROOT / f"{name}.log"
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.procs.append((name, proc))
        _wait_port(port, name, proc, log)
        print(f"  started {name} on 127.0.0.1:{port} (log: {log.relative_to(ROOT.parent)})")

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                print(f"  {name} did not stop in time; killing it")
                proc.kill()

    def cli_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "AGENTIHOOKS_CONTROL_ADDR": f"127.0.0.1:{self.control_port}",
            "AGENTIHOOKS_TOKEN": self.operator_token,
        }

    def cli(self, *args: str, show: bool = True) -> str:
        if show:
            print(f"\n$ agentihooks {' '.join(args)}")
        done = subprocess.run(
            [sys.executable, "-m", "services.cli.main", *args],
            env=self.cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise SystemExit(f"demo: agentihooks {' '.join(args)} failed: {done.stderr.strip()}")
        if show:
            print(done.stdout.rstrip())
        return done.stdout

    def show_fence(self, seat: str) -> None:
        """Print the fence event(s) of `seat` from the recovery event stream."""
        print(f"\n$ agentihooks swarm {SWARM} events   # the fence of {seat}")
        for line in self.cli("swarm", SWARM, "events", show=False).splitlines():
            event = json.loads(line)
            if event.get("kind") == "fence" and event.get("seat") == seat:
                print(line)

    def try_as_fenced(self, execution_id: str, credential: str) -> None:
        """Call the controller as the fenced attempt, with grpcurl, for its launch record (the
        first thing a worker asks for), and print the refusal it gets. The credential goes by
        the environment (`-expand-headers`), never on a command line or in the output."""
        argv = [
            "grpcurl",
            "-plaintext",
            "-expand-headers",
            "-H",
            "authorization: Bearer ${FENCED_CREDENTIAL}",
            f"127.0.0.1:{self.control_port}",
            "agentihooks.swarm.v2.Recovery/GetLaunchRecord",
        ]
        print(f"\n$ FENCED_CREDENTIAL=<{execution_id}'s credential> {shlex.join(argv)}")
        grpcurl = shutil.which("grpcurl", path=str(pathlib.Path(sys.executable).parent))
        done = subprocess.run(
            [grpcurl or "grpcurl", *argv[1:]],
            env={**os.environ, "FENCED_CREDENTIAL": credential},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode == 0:
            raise SystemExit(f"demo: the fenced attempt {execution_id} was answered")
        print((done.stdout + done.stderr).replace(credential, "<credential>").rstrip())

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.cli("swarm", SWARM, "status", "--json", show=False)))

    def wait_for(
        self, what: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> None:
        print(f"  waiting until {what} ...", flush=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check(self.status()):
                return
            time.sleep(0.3)
        raise SystemExit(f"demo: timed out waiting until {what}; logs are in {ROOT}")


def _card(status: dict[str, Any], seat: str) -> dict[str, Any] | None:
    cards = [c for c in status["handoffs"] if c["seat"] == seat]
    return cards[-1] if cards else None


def _stay_up(demo: Demo) -> None:
    """Print where everything is, then keep it running until Ctrl-C or SIGTERM."""
    env_file = ROOT / "env"
    lines = []
    # A new terminal has no virtualenv on PATH: the file puts the CLI there.
    bin_dir = pathlib.Path(os.path.abspath(sys.executable)).parent
    if (bin_dir / "agentihooks").exists():
        lines.append(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"')
    for name, value in (
        ("AGENTIHOOKS_CONTROL_ADDR", f"127.0.0.1:{demo.control_port}"),
        ("AGENTIHOOKS_TOKEN", demo.operator_token),
        ("CONTROL_URL", f"http://127.0.0.1:{demo.http_port}"),
        ("OPERATOR_TOKEN", demo.operator_token),
    ):
        lines.append(f"export {name}={shlex.quote(value)}")
    env_file.touch(0o600)
    env_file.write_text("\n".join(lines) + "\n")
    print(
        f"""
The system stays up. In another terminal:

  source {env_file.relative_to(ROOT.parent)}     # the CLI on PATH, its address, the operator token
  agentihooks swarm {SWARM} status
  agentihooks swarm {SWARM} events
  grpcurl -plaintext 127.0.0.1:{demo.control_port} list

Ledger page: http://127.0.0.1:{demo.http_port}/swarms/{SWARM}/ledger
  (it asks for the operator token once: `grep TOKEN {env_file.relative_to(ROOT.parent)}`)

Press Ctrl-C to stop everything.""",
        flush=True,
    )
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopping:
            for name, proc in demo.procs:
                if proc.poll() is not None:
                    print(f"\ndemo: {name} exited (code {proc.returncode}); see {ROOT}/{name}.log")
                    return
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n")[0])
    parser.add_argument("--exit", action="store_true", help="exit at the end (DEMO_EXIT=1)")
    parser.add_argument(
        "--free-ports", action="store_true", help="free ports only (DEMO_PORTS=free)"
    )
    args = parser.parse_args(argv)
    # Ctrl-C stops the demo even when it was started from a background job or a script, which
    # inherit SIGINT ignored (and Python then installs no KeyboardInterrupt for it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    exit_at_end = args.exit or os.environ.get("DEMO_EXIT", "") not in ("", "0")
    usual_ports = not (args.free_ports or os.environ.get("DEMO_PORTS") == "free")
    redis = shutil.which("redis-server")
    if redis is None:
        raise SystemExit("demo: redis-server is not installed (make setup installs it)")
    lock = _claim_folder()  # noqa: F841  (held until this process ends)
    demo = Demo(usual_ports=usual_ports)
    print("Starting the embedded default: local Redis, local checkpoint folder, local workers")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_")}
    common = {
        **base,
        "AGENTIHOOKS_REDIS_URL": f"redis://127.0.0.1:{demo.redis_port}/0",
        "AGENTIHOOKS_GRANT_KEY": demo.grant_key,
        "AGENTIHOOKS_CHECKPOINT_ROOT": str(ROOT / "checkpoints"),
    }
    try:
        demo.start(
            "redis",
            [
                redis,
                "--port",
                str(demo.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(ROOT),
            ],
            base,
            demo.redis_port,
        )
        demo.start(
            "checkpoint-store",
            [
                sys.executable,
                "-m",
                "services.checkpoint_store.main",
                "--listen",
                f"127.0.0.1:{demo.store_port}",
            ],
            common,
            demo.store_port,
        )
        bin_dir = _agent_bin()
        controller_env = {
            **common,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "AGENTIHOOKS_OPERATOR_TOKEN": demo.operator_token,
            "AGENTIHOOKS_WORKER_IMAGE": IMAGE,
            "AGENTIHOOKS_RUNTIME": "local",
            "AGENTIHOOKS_WORKDIR": str(ROOT / "workers"),
            "AGENTIHOOKS_STORE_ADDR": f"127.0.0.1:{demo.store_port}",
            "AGENTIHOOKS_CAPTURE_INTERVAL_S": "0.5",
            "AGENTIHOOKS_PASS_INTERVAL_MS": "300",
            "AGENTIHOOKS_LEASE_MS": "3000",
        }
        demo.start(
            "controller",
            [
                sys.executable,
                "-m",
                "services.controller.main",
                "--listen",
                f"127.0.0.1:{demo.control_port}",
                "--http",
                f"127.0.0.1:{demo.http_port}",
            ],
            controller_env,
            demo.control_port,
        )
        project = _project()
        document = ROOT / "swarm.yaml"
        document.write_text(
            f"""swarm: {SWARM}
worker_image: "{IMAGE}"
harness: claude_code
command: ["claude"]
restore_automation: true
checkpoint_remote: true
projects:
  - name: app
    repository: "{project}"
accounts:
  - name: demo-account
    slots: 4
seats:
  - seat: eng-1
    task: {{text: "Write the progress notes", awaiting: worker}}
  - seat: eng-2
    task: {{text: "Review the README", awaiting: worker}}
"""
        )
        demo.cli("swarm", SWARM, "apply", str(document))
        first = f"{SWARM}.eng-1.1"
        print("\neng-1 holds a native session; its worker captures a checkpoint.")
        print("eng-2 crashes before any conversation started.")
        _wait_logged(_attempt_folder(first) / "sidecar.log", "capture_reported")
        credential = _credential_of(first)
        print("eng-1's checkpoint reached the controller; now its worker crashes.")
        (ROOT / FAIL_NOW).touch()
        demo.wait_for(
            "eng-1 is fenced",
            lambda s: (c := _card(s, "eng-1")) is not None and c["execution_id"] == first,
        )
        print("\nThe controller fenced the lost attempt before anything else:")
        demo.show_fence("eng-1")
        print("\nThe fenced attempt can act no more: its worker credential is refused.")
        demo.try_as_fenced(first, credential)
        print()
        demo.wait_for(
            "eng-1 is resumed natively and its replacement reports",
            lambda s: (c := _card(s, "eng-1")) is not None and c["continuity"] == "native",
            timeout=90,
        )
        demo.wait_for(
            "eng-2 waits for a decision",
            lambda s: (c := _card(s, "eng-2")) is not None and c["decision"] == "recovery_pending",
        )
        demo.cli("swarm", SWARM, "status")
        print("\nNo checkpoint can resume eng-2 (fresh only): the operator chooses fresh.")
        demo.cli("swarm", SWARM, "restore-decision", "eng-2", "fresh")
        demo.wait_for(
            "eng-2's fresh replacement reports",
            lambda s: (c := _card(s, "eng-2")) is not None and c["continuity"] == "fresh",
        )
        demo.cli("swarm", SWARM, "status")
        final = demo.status()
        resumed = list((ROOT / "workers" / SWARM).glob("*.eng-1.2/work/RESUMED"))
        notes = list((ROOT / "workers" / SWARM).glob("*.eng-1.2/work/notes.md"))
        print("\nWhat the replacement of eng-1 found:")
        for path in resumed + notes:
            print(f"  {path.relative_to(ROOT.parent)}: {path.read_text().strip()}")
        for log in sorted((ROOT / "workers" / SWARM).glob("*/sidecar.log")):
            for line in log.read_text().splitlines():
                if '"restore_verified"' in line:
                    print(f"  {log.parent.name} sidecar: {line}")
        counts = final["restore_outcomes_by_type"]
        ok = counts.get("native") == 1 and counts.get("fresh") == 1 and resumed and notes
        print(f"\nrestore outcomes: {counts}")
        if not ok:
            raise SystemExit(f"demo: the recovery did not end as expected; logs are in {ROOT}")
        print("\ndemo finished: one native resume, one fresh replacement, nothing lost.")
        if not exit_at_end:
            _stay_up(demo)
    except KeyboardInterrupt:
        print("\ninterrupted")
    finally:
        print("\nStopping the demo's services.")
        demo.stop()


if __name__ == "__main__":
    main()
