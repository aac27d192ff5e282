"""The installed `agentihooks` command run as an operator's script runs it: a real process with
only the operator's environment, its exit code and both outputs kept."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import sys
from collections.abc import Mapping

from tests.support import controller_server as cs

RUN_TIMEOUT_S = 120.0


@dataclasses.dataclass
class Ran:
    code: int
    out: str
    err: str


async def agentihooks(
    *args: str,
    token: str = cs.OPERATOR_TOKEN,
    control: str = "",
    env: Mapping[str, str] | None = None,
) -> Ran:
    """Run the installed `agentihooks` console script with the operator's environment (and
    `env` beside it)."""
    executable = pathlib.Path(sys.executable).parent / "agentihooks"
    env = {"PATH": f"{executable.parent}:/usr/bin:/bin", "AGENTIHOOKS_TOKEN": token, **(env or {})}
    if control:
        env["AGENTIHOOKS_CONTROL_ADDR"] = control
    process = await asyncio.create_subprocess_exec(
        str(executable),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT_S)
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())
