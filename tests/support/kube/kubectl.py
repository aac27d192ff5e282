"""The real kubectl against the Kubernetes API emulator: a kubeconfig naming it, and commands
run beside the emulator's event loop (never blocking it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping

import pytest
import yaml


def binary() -> str:
    """kubectl 1.27 or later (it embeds kustomize v5, which deploy/k8s/ needs), or fail the
    test saying what is missing: never skipped."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl was not found on PATH: install kubectl 1.27 or later (it embeds kustomize v5)"
        )
    version = subprocess.run(
        [found, "version", "--client"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    match = re.search(r"Kustomize Version: v(\d+)", version)
    if match is None or int(match.group(1)) < 5:
        first = version.splitlines()[0] if version else "no version"
        pytest.fail(
            f"{found} ({first}) does not embed kustomize v5: install kubectl 1.27 or later "
            "(Debian bookworm's kubernetes-client is 1.20)"
        )
    return found


def environment(folder: pathlib.Path, server: str) -> dict[str, str]:
    """This process's environment with KUBECONFIG (written in `folder`) naming `server`, its own
    discovery cache, and kubectl's folder first on PATH."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emulator", "cluster": {"server": server}}],
                "users": [{"name": "operator", "user": {}}],
                "contexts": [
                    {"name": "emulator", "context": {"cluster": "emulator", "user": "operator"}}
                ],
                "current-context": "emulator",
            }
        )
    )
    kubectl = pathlib.Path(binary())
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "KUBECACHEDIR": str(folder / "kube-cache"),
        "PATH": f"{kubectl.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


async def shell(
    script: str, *, cwd: pathlib.Path, env: Mapping[str, str], timeout: float = 300
) -> tuple[int, str, str]:
    """Run `script` with bash (-eu, pipefail): exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        script,
        cwd=cwd,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        return -1, out.decode(), err.decode() + f"\n(killed after {timeout} s)"
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def succeed(
    script: str, *, cwd: pathlib.Path, env: Mapping[str, str], timeout: float = 300
) -> str:
    """`shell`, failing the test with both streams unless it exits 0; its stdout."""
    code, out, err = await shell(script, cwd=cwd, env=env, timeout=timeout)
    if code != 0:
        pytest.fail(f"exit {code} from:\n{script}\nstdout:\n{out}\nstderr:\n{err}")
    return out


@contextlib.asynccontextmanager
async def background(
    command: str,
    *,
    cwd: pathlib.Path,
    env: Mapping[str, str],
    ready: str,
    timeout: float = 300,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run `command` (bash) in the background, as a shell's ``&``, until the block ends; yields
    once a line of its output contains `ready` (failing the test with its output if it exits or
    `timeout` passes first). It is killed, with its children, on the way out."""
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        command,
        cwd=cwd,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            while ready not in "".join(seen):
                line = await process.stdout.readline()
                if not line:
                    await process.wait()
                    pytest.fail(f"{command!r} exited {process.returncode}:\n{''.join(seen)}")
                seen.append(line.decode(errors="replace"))
    except TimeoutError:
        pytest.fail(f"{command!r} did not print {ready!r} in {timeout} s:\n{''.join(seen)}")
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
