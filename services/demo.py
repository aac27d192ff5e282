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
import os
import shutil
import signal
import sys

from services import demo_services, demo_setup


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
    lock = demo_setup.claim_folder()  # noqa: F841  (held until this process ends)
    demo = demo_services.Demo(usual_ports=usual_ports)
    print("Starting the embedded default: local Redis, local checkpoint folder, local workers")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_")}
    common = {
        **base,
        "AGENTIHOOKS_REDIS_URL": f"redis://127.0.0.1:{demo.redis_port}/0",
        "AGENTIHOOKS_GRANT_KEY": demo.grant_key,
        "AGENTIHOOKS_CHECKPOINT_ROOT": str(demo_setup.ROOT / "checkpoints"),
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
                str(demo_setup.ROOT),
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
        bin_dir = demo_setup.agent_bin()
        controller_env = {
            **common,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "AGENTIHOOKS_OPERATOR_TOKEN": demo.operator_token,
            "AGENTIHOOKS_WORKER_IMAGE": demo_setup.IMAGE,
            "AGENTIHOOKS_RUNTIME": "local",
            "AGENTIHOOKS_WORKDIR": str(demo_setup.ROOT / "workers"),
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
        project = demo_setup.project()
        document = demo_setup.ROOT / "swarm.yaml"
        document.write_text(
            f"""swarm: {demo_setup.SWARM}
worker_image: "{demo_setup.IMAGE}"
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
        demo.cli("swarm", demo_setup.SWARM, "apply", str(document))
        first = f"{demo_setup.SWARM}.eng-1.1"
        print("\neng-1 holds a native session; its worker captures a checkpoint.")
        print("eng-2 crashes before any conversation started.")
        demo_setup.wait_logged(demo_setup.attempt_folder(first) / "sidecar.log", "capture_reported")
        credential = demo_setup.credential_of(first)
        print("eng-1's checkpoint reached the controller; now its worker crashes.")
        (demo_setup.ROOT / demo_setup.FAIL_NOW).touch()
        demo.wait_for(
            "eng-1 is fenced",
            lambda s: (
                (c := demo_services.card(s, "eng-1")) is not None and c["execution_id"] == first
            ),
        )
        print("\nThe controller fenced the lost attempt before anything else:")
        demo.show_fence("eng-1")
        print("\nThe fenced attempt can act no more: its worker credential is refused.")
        demo.try_as_fenced(first, credential)
        print()
        demo.wait_for(
            "eng-1 is resumed natively and its replacement reports",
            lambda s: (
                (c := demo_services.card(s, "eng-1")) is not None and c["continuity"] == "native"
            ),
            timeout=90,
        )
        demo.wait_for(
            "eng-2 waits for a decision",
            lambda s: (
                (c := demo_services.card(s, "eng-2")) is not None
                and c["decision"] == "recovery_pending"
            ),
        )
        demo.cli("swarm", demo_setup.SWARM, "status")
        print("\nNo checkpoint can resume eng-2 (fresh only): the operator chooses fresh.")
        demo.cli("swarm", demo_setup.SWARM, "restore-decision", "eng-2", "fresh")
        demo.wait_for(
            "eng-2's fresh replacement reports",
            lambda s: (
                (c := demo_services.card(s, "eng-2")) is not None and c["continuity"] == "fresh"
            ),
        )
        demo.cli("swarm", demo_setup.SWARM, "status")
        final = demo.status()
        resumed = list(
            (demo_setup.ROOT / "workers" / demo_setup.SWARM).glob("*.eng-1.2/work/RESUMED")
        )
        notes = list(
            (demo_setup.ROOT / "workers" / demo_setup.SWARM).glob("*.eng-1.2/work/notes.md")
        )
        print("\nWhat the replacement of eng-1 found:")
        for path in resumed + notes:
            print(f"  {path.relative_to(demo_setup.ROOT.parent)}: {path.read_text().strip()}")
        for log in sorted((demo_setup.ROOT / "workers" / demo_setup.SWARM).glob("*/sidecar.log")):
            for line in log.read_text().splitlines():
                if '"restore_verified"' in line:
                    print(f"  {log.parent.name} sidecar: {line}")
        counts = final["restore_outcomes_by_type"]
        ok = counts.get("native") == 1 and counts.get("fresh") == 1 and resumed and notes
        print(f"\nrestore outcomes: {counts}")
        if not ok:
            raise SystemExit(
                f"demo: the recovery did not end as expected; logs are in {demo_setup.ROOT}"
            )
        print("\ndemo finished: one native resume, one fresh replacement, nothing lost.")
        if not exit_at_end:
            demo_services.stay_up(demo)
    except KeyboardInterrupt:
        print("\ninterrupted")
    finally:
        print("\nStopping the demo's services.")
        demo.stop()


if __name__ == "__main__":
    main()
