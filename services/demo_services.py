"""The demo's running services (Redis, the checkpoint store, the controller) and what the
operator does with them: the CLI, the fence seen from the fenced attempt's side, the swarm's
status; and the system kept up to explore once the story ends.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from services import demo_setup


class Demo:
    def __init__(self, *, usual_ports: bool) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.operator_token = secrets.token_urlsafe(24)
        self.grant_key = secrets.token_urlsafe(48)
        ports = demo_setup.USUAL_PORTS if usual_ports else dict.fromkeys(demo_setup.USUAL_PORTS, 0)
        self.control_port = demo_setup.port(ports["control"])
        self.http_port = demo_setup.port(ports["http"])
        self.store_port = demo_setup.port(ports["store"])
        self.redis_port = demo_setup.port(ports["redis"])

    def start(self, name: str, argv: list[str], env: Mapping[str, str], port: int) -> None:
        root = demo_setup.ROOT
        log = root / f"{name}.log"
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.procs.append((name, proc))
        demo_setup.wait_port(port, name, proc, log)
        print(f"  started {name} on 127.0.0.1:{port} (log: {log.relative_to(root.parent)})")

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
        print(f"\n$ agentihooks swarm {demo_setup.SWARM} events   # the fence of {seat}")
        for line in self.cli("swarm", demo_setup.SWARM, "events", show=False).splitlines():
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
        return dict(json.loads(self.cli("swarm", demo_setup.SWARM, "status", "--json", show=False)))

    def wait_for(
        self, what: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> None:
        print(f"  waiting until {what} ...", flush=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check(self.status()):
                return
            time.sleep(0.3)
        raise SystemExit(f"demo: timed out waiting until {what}; logs are in {demo_setup.ROOT}")


def card(status: dict[str, Any], seat: str) -> dict[str, Any] | None:
    cards = [c for c in status["handoffs"] if c["seat"] == seat]
    return cards[-1] if cards else None


def stay_up(demo: Demo) -> None:
    """Print where everything is, then keep it running until Ctrl-C or SIGTERM."""
    root, swarm = demo_setup.ROOT, demo_setup.SWARM
    env_file = root / "env"
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

  source {env_file.relative_to(root.parent)}     # the CLI on PATH, its address, the operator token
  agentihooks swarm {swarm} status
  agentihooks swarm {swarm} events
  grpcurl -plaintext 127.0.0.1:{demo.control_port} list

Ledger page: http://127.0.0.1:{demo.http_port}/swarms/{swarm}/ledger
  (it asks for the operator token once: `grep TOKEN {env_file.relative_to(root.parent)}`)

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
                    print(f"\ndemo: {name} exited (code {proc.returncode}); see {root}/{name}.log")
                    return
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
