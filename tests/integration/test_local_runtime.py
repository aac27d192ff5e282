"""LocalRuntime with real worker processes: "the same contract with worker processes on this
machine" (DESIGN section 4), the embedded default for trying the system without a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import pathlib
import shutil
import sys
import time
from collections.abc import AsyncIterator

import pytest

from services.controller.pods import classifying, local, runtime
from tests.support import ports

TOKEN = "wk-local-secret-token-0042"
SLEEPER = ("-c", "import time; time.sleep(60)")

WAKE_S = 120.0
"""A generous deadline for a wake that comes in milliseconds on an idle machine."""


def spec(
    execution: str = "e-1", *code: str, seat: str = "eng-1", generation: int = 1
) -> runtime.LaunchSpec:
    return runtime.LaunchSpec(
        swarm="example",
        seat=seat,
        execution_id=execution,
        generation=generation,
        image="registry.local/agent-worker:1.4.2",
        command=(sys.executable, *(code or SLEEPER)),
        worker_credential=TOKEN,
        env={"AGENTIHOOKS_SEAT": seat},
    )


def running(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for init to reap it does not)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@pytest.fixture
async def workers(tmp_path: pathlib.Path) -> AsyncIterator[local.LocalRuntime]:
    rt = local.LocalRuntime(tmp_path, stop_grace=2.0)
    yield rt
    for attempt in await rt.list_attempts("example"):
        await rt.remove("example", attempt.execution_id)
    await rt.aclose()


async def settled(rt: local.LocalRuntime, execution: str, timeout: float = 5.0):
    """The attempt once its worker stopped running."""
    deadline = time.monotonic() + timeout
    while True:
        [attempt] = [a for a in await rt.list_attempts("example") if a.execution_id == execution]
        if not attempt.alive or time.monotonic() > deadline:
            return attempt
        await asyncio.sleep(0.05)


async def test_a_non_zero_exit_is_application_exit(workers) -> None:
    """application_exit "from any other non-zero exit": a worker exiting 3 failed that way."""
    await workers.launch(spec("e-1", "-c", "import sys; sys.exit(3)"))
    attempt = await settled(workers, "e-1")
    assert attempt == runtime.Attempt(
        "example", "eng-1", "e-1", 1, classifying.FailureReason.APPLICATION_EXIT, alive=False
    )


async def test_a_killed_worker_is_application_exit(workers) -> None:
    """A worker killed by SIGKILL (the OOM killer's signal: not knowable here) is
    application_exit."""
    await workers.launch(spec("e-1", "-c", "import os, signal; os.kill(os.getpid(), 9)"))
    attempt = await settled(workers, "e-1")
    assert attempt.failure is classifying.FailureReason.APPLICATION_EXIT


async def test_an_exit_zero_is_no_failure(workers) -> None:
    """A worker that finished with exit 0 is not a failure."""
    await workers.launch(spec("e-1", "-c", "pass"))
    attempt = await settled(workers, "e-1")
    assert (attempt.failure, attempt.alive) == (None, False)


async def test_the_worker_gets_its_credential_in_its_environment_only(
    workers, tmp_path: pathlib.Path
) -> None:
    """The credential reaches the worker as AGENTIHOOKS_WORKER_CREDENTIAL, in its attempt folder,
    and is written to no file of the runtime's; the controller's own secrets are not inherited."""
    os.environ["AGENTIHOOKS_OPERATOR_TOKEN"] = "operator-secret"
    try:
        script = (
            "import json, os; json.dump({'env': dict(os.environ), 'cwd': os.getcwd()},"
            " open('seen.json', 'w'))"
        )
        await workers.launch(spec("e-1", "-c", script))
        await settled(workers, "e-1")
    finally:
        del os.environ["AGENTIHOOKS_OPERATOR_TOKEN"]
    folder = tmp_path / "example" / "e-1"
    seen = json.loads((folder / "seen.json").read_text())
    assert seen["env"][runtime.CREDENTIAL_ENV] == TOKEN
    assert seen["env"]["AGENTIHOOKS_SEAT"] == "eng-1"
    assert "AGENTIHOOKS_OPERATOR_TOKEN" not in seen["env"]
    assert pathlib.Path(seen["cwd"]) == folder
    for path in folder.iterdir():
        if path.name != "seen.json":
            assert TOKEN not in path.read_text(errors="replace")


async def test_launch_is_idempotent_by_execution_id(workers, tmp_path: pathlib.Path) -> None:
    """Launching the same execution twice starts one worker."""
    await workers.launch(spec("e-1"))
    await asyncio.gather(workers.launch(spec("e-1")), workers.launch(spec("e-1")))
    [attempt] = await workers.list_attempts("example")
    assert attempt.alive
    state = json.loads((tmp_path / "example" / "e-1" / "attempt.json").read_text())
    assert state["pid"] is not None


async def test_remove_kills_a_running_worker_and_is_idempotent(
    workers, tmp_path: pathlib.Path
) -> None:
    """Remove stops what the fenced attempt held (its process); a second remove is fine."""
    await workers.launch(spec("e-1"))
    await workers.launch(spec("e-2", seat="eng-2"))
    pid = json.loads((tmp_path / "example" / "e-1" / "attempt.json").read_text())["pid"]
    await workers.remove("example", "e-1")
    await workers.remove("example", "e-1")
    await workers.remove("example", "never-launched")
    assert not running(pid)
    assert [a.execution_id for a in await workers.list_attempts("example")] == ["e-2"]
    await workers.launch(spec("e-1"))  # removed stays removed: nothing new
    assert [a.execution_id for a in await workers.list_attempts("example")] == ["e-2"]


@pytest.mark.parametrize("how", ["deleted", "renamed aside"])
async def test_a_worker_deleted_from_outside_is_launched_again(
    workers, tmp_path: pathlib.Path, how: str
) -> None:
    """The relaunch contract (runtime.py): launch creates the worker when it does not exist
    now. A local attempt's folder is its Pod: while it is listed (exited) a launch starts
    nothing; once the operator fixed the cause and deleted the folder, or renamed it aside to
    keep its log, the attempt is no longer listed and the next launch of the same spec starts
    it again."""
    fixed = tmp_path / "cause-fixed"
    again = spec(
        "e-1",
        "-c",
        "import os, sys, time\n"
        f"if not os.path.exists({str(fixed)!r}): print('refused: version_changed'); sys.exit(3)\n"
        "time.sleep(60)",
    )
    await workers.launch(again)
    assert (await settled(workers, "e-1")).failure is classifying.FailureReason.APPLICATION_EXIT
    fixed.touch()
    await workers.launch(again)  # still listed (exited): nothing new
    assert (await settled(workers, "e-1")).failure is classifying.FailureReason.APPLICATION_EXIT
    folder = tmp_path / "example" / "e-1"
    if how == "deleted":
        shutil.rmtree(folder)
    else:
        folder.rename(folder.with_name("e-1.refused"))
    assert await workers.list_attempts("example") == []
    await workers.launch(again)
    assert await workers.list_attempts("example") == [
        runtime.Attempt("example", "eng-1", "e-1", 1, None, alive=True)
    ]
    if how != "deleted":
        log = (folder.with_name("e-1.refused") / "worker.log").read_text()
        assert log.count("refused: version_changed") == 1


async def test_remove_kills_a_worker_that_ignores_sigterm(tmp_path: pathlib.Path) -> None:
    """A worker that ignores SIGTERM (and so outlives its wrapper) is killed once the stop grace
    runs out: remove stops the whole process group."""
    rt = local.LocalRuntime(tmp_path, stop_grace=0.3)
    try:
        stubborn = (
            "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            " open('ready.tmp', 'w').write(str(os.getpid())); os.rename('ready.tmp', 'ready');"
            " time.sleep(60)"
        )
        await rt.launch(spec("e-1", "-c", stubborn))
        ready = tmp_path / "example" / "e-1" / "ready"
        for _ in range(250):
            if ready.exists():
                break
            await asyncio.sleep(0.02)
        worker = int(ready.read_text())
        await rt.remove("example", "e-1")
        assert not running(worker)
        assert await rt.list_attempts("example") == []
    finally:
        await rt.aclose()


async def test_watch_wakes_when_a_worker_exits(workers) -> None:
    """The watch wakes the pass when a worker exits, so its failure is acted on promptly (the
    watch has no timed wakes: the exit is what wakes it)."""
    async with contextlib.aclosing(workers.watch("example")) as watch:
        await asyncio.wait_for(anext(watch), WAKE_S)
        await workers.launch(spec("e-1", "-c", "import time, sys; time.sleep(0.2); sys.exit(5)"))
        await asyncio.wait_for(anext(watch), WAKE_S)
    [attempt] = await workers.list_attempts("example")
    assert attempt.failure is classifying.FailureReason.APPLICATION_EXIT


async def test_a_new_runtime_on_the_same_workdir_refinds_attempts(tmp_path: pathlib.Path) -> None:
    """A restarted controller re-finds its attempts from the state files: running ones alive (and
    removable), exited ones with their exit code, via the wrapper's record."""
    first = local.LocalRuntime(tmp_path)
    await first.launch(spec("e-1", generation=2))
    await first.launch(spec("e-2", "-c", "import sys; sys.exit(4)", seat="eng-2"))
    await first.launch(spec("e-3", "-c", "import time; time.sleep(0.5)", seat="eng-3"))
    await first.aclose()
    second = local.LocalRuntime(tmp_path, stop_grace=2.0)
    try:
        await settled(second, "e-2")
        attempts = {a.execution_id: a for a in await second.list_attempts("example")}
        assert attempts["e-1"] == runtime.Attempt("example", "eng-1", "e-1", 2, None, alive=True)
        assert attempts["e-2"].failure is classifying.FailureReason.APPLICATION_EXIT
        async with contextlib.aclosing(second.watch("example")) as watch:
            await asyncio.wait_for(anext(watch), WAKE_S)
            await asyncio.wait_for(anext(watch), WAKE_S)  # e-3, not our child, exits
        assert (await settled(second, "e-3")).failure is None
        await second.remove("example", "e-1")
        assert {a.execution_id for a in await second.list_attempts("example")} == {"e-2", "e-3"}
    finally:
        await second.aclose()


async def test_unsafe_names_are_refused(workers) -> None:
    """Swarm and execution ids become folder names: anything that could escape is refused."""
    bad = runtime.LaunchSpec("example", "eng-1", "../escape", 1, "img", ("true",), TOKEN)
    with pytest.raises(runtime.PodsRefused):
        await workers.launch(bad)
    with pytest.raises(runtime.PodsRefused):
        await workers.launch(
            runtime.LaunchSpec(
                "example", "eng-1", "e-9", 1, "img", ("true",), TOKEN,
                {runtime.CREDENTIAL_ENV: "inline"},
            )
        )  # fmt: skip


async def test_a_worker_being_started_is_never_listed_as_failed(workers) -> None:
    """A pass that lists while a launch's spawn is under way (a decision launching a replacement
    beside the recovery loop) sees a worker starting, never one that already failed."""
    seen: list[runtime.Attempt] = []
    launching = asyncio.create_task(workers.launch(spec("e-starting")))
    while not launching.done():
        seen += [
            a for a in await workers.list_attempts("example") if a.execution_id == "e-starting"
        ]
        await asyncio.sleep(0)
    await launching
    seen += [a for a in await workers.list_attempts("example") if a.execution_id == "e-starting"]
    assert seen, "the attempt was never listed"
    assert all(a.failure is None and a.alive for a in seen), seen


SIDECAR_THEN_EXIT = (
    "-c",
    "import subprocess, sys; "
    "subprocess.Popen([sys.executable, '-c', "
    "'import os, time\\nwhile not os.path.exists(\"sidecar-done\"): time.sleep(0.05)']); "
    "sys.exit(3)",
)
"""A worker that leaves a child running (as the restorer sidecar does while it takes its final
capture) and exits 3; the child ends once the file `sidecar-done` exists in the folder."""


async def test_a_stopped_worker_waits_for_its_sidecars_final_capture(workers) -> None:
    """Issue 21: "The controller, seeing a worker container terminated while its sidecar runs,
    waits a short bounded time for that final report before it fences. Same on the local
    runtime": while the sidecar runs the attempt is alive with no failure; once it ended, the
    attempt failed and the watch woke."""
    await workers.launch(spec("e-1", *SIDECAR_THEN_EXIT))
    folder = workers._folder("example", "e-1")
    await ports.eventually(lambda: _exited(folder), timeout=WAKE_S)
    [attempt] = await workers.list_attempts("example")
    assert (attempt.failure, attempt.alive) == (None, True)
    (folder / "sidecar-done").touch()
    attempt = await settled(workers, "e-1", timeout=WAKE_S)
    assert (attempt.failure, attempt.alive) == (classifying.FailureReason.APPLICATION_EXIT, False)


async def test_a_sidecar_that_never_ends_delays_the_failure_only_so_long(
    workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait is bounded: a sidecar still running after `FINAL_CAPTURE_WAIT` no longer holds
    the failure back."""
    monkeypatch.setattr(classifying, "FINAL_CAPTURE_WAIT", datetime.timedelta(seconds=1))
    await workers.launch(spec("e-1", *SIDECAR_THEN_EXIT))
    folder = workers._folder("example", "e-1")
    attempt = await settled(workers, "e-1", timeout=WAKE_S)
    assert (attempt.failure, attempt.alive) == (classifying.FailureReason.APPLICATION_EXIT, False)
    assert (folder / "exit_code").read_text() == "3"
    (folder / "sidecar-done").touch()


async def _exited(folder: pathlib.Path) -> None:
    assert (folder / "exit_code").exists()


async def test_the_runtime_names_the_swarms_whose_workers_it_holds(workers) -> None:
    """`swarms()` (what a controller starting on an emptied Redis looks at): a swarm with an
    attempt not removed, finished or not; none once every attempt is removed."""
    assert await workers.swarms() == set()
    await workers.launch(spec("e-1", "-c", "import sys; sys.exit(0)"))
    await settled(workers, "e-1")
    assert await workers.swarms() == {"example"}
    await workers.remove("example", "e-1")
    assert await workers.swarms() == set()
