"""`make demo` as a new user runs it: the story, then the system stays up until Ctrl-C.

The demo runs in a folder of its own (its `.demo/` is made there), on free ports.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import signal
import socket
import sys

import aiohttp
import pytest

pytestmark = pytest.mark.slow

DEADLINE_S = 600.0
"""The story takes about 20 s on an idle machine."""


async def _line_matching(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> str:
    while True:
        raw = await stream.readline()
        if not raw:
            raise AssertionError("the demo ended early:\n" + "".join(seen[-40:]))
        line = raw.decode()
        seen.append(line)
        if re.search(pattern, line):
            return line


async def _in_a_new_terminal(cwd: pathlib.Path, script: str) -> tuple[int, str]:
    """Run `script` in bash as a new terminal would: no virtualenv on PATH, nothing of this
    process's environment but HOME."""
    shell = await asyncio.create_subprocess_exec(
        "/bin/bash",
        "--noprofile",
        "--norc",
        "-c",
        script,
        cwd=cwd,
        env={"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/local/bin:/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(shell.communicate(), DEADLINE_S)
    return shell.returncode or 0, out.decode()


async def _second_demo(cwd: pathlib.Path) -> tuple[int, str]:
    second = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.demo",
        cwd=cwd,
        env={**os.environ, "DEMO_PORTS": "free", "DEMO_EXIT": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(second.communicate(), DEADLINE_S)
    return second.returncode or 0, out.decode()


async def test_the_demo_tells_its_story_then_stays_up_until_ctrl_c(tmp_path: pathlib.Path) -> None:
    """It ends the story with one native resume and one fresh replacement, shows the fence (its
    event, then the fenced attempt's credential refused), prints the ledger page's address and
    the file of exports for the CLI (never the token itself), which works in a new terminal,
    refuses a second demo in the same folder while it runs (touching none of its files), stays
    up for the CLI and the page, and stops every service cleanly on Ctrl-C. Started as a background
    job or a script starts it (SIGINT ignored, inherited), Ctrl-C still stops it."""
    # Through sh, whose `trap '' INT` leaves SIGINT ignored across the exec, as `cmd &` in a
    # script does (not a preexec_fn: forking this process, which runs gRPC, is unsafe).
    process = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        'trap "" INT; exec "$0" -m services.demo',
        sys.executable,
        cwd=tmp_path,
        env={**os.environ, "DEMO_PORTS": "free", "DEMO_EXIT": ""},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(DEADLINE_S):
            await _line_matching(process.stdout, r"demo finished: one native resume", seen)
            ledger = await _line_matching(process.stdout, r"Ledger page: http://", seen)
            await _line_matching(process.stdout, r"Press Ctrl-C", seen)
        story = "".join(seen)
        # The fence is shown: its event, then the lost attempt's credential refused.
        fence = next(
            json.loads(line)
            for line in seen
            if line.startswith("{") and '"kind": "fence"' in line and '"eng-1"' in line
        )
        assert (fence["execution_id"], fence["detail"]["reason"]) == (
            "demo.eng-1.1",
            "application_exit",
        )
        # Issue 21: the sidecar's final capture, once the worker stopped, leaves no lost tail.
        assert fence["detail"]["lost_tail"] == {"after_watermark": 2, "length": "none"}
        assert "Code: PermissionDenied\n  Message: forbidden_scope" in story
        assert not re.search(r"eyJ[\w-]*\.[\w-]+\.[\w-]+", story), "a credential was printed"
        env_file = tmp_path / ".demo" / "env"
        assert oct(env_file.stat().st_mode & 0o777) == "0o600"
        exports = env_file.read_text()
        assert "$AGENTIHOOKS_TOKEN" not in exports
        # A second demo in the same folder refuses while this one runs and touches nothing.
        before = {p: p.stat().st_mtime_ns for p in (tmp_path / ".demo").rglob("*") if p.is_file()}
        code, said = await _second_demo(tmp_path)
        assert code == 1, said
        assert said.strip().startswith("demo: another demo is running in this folder (pid ")
        assert env_file.read_text() == exports
        assert all(p.exists() for p in before)
        # The file works in a new terminal: the CLI on PATH, its address and the token.
        code, out = await _in_a_new_terminal(
            tmp_path, "source .demo/env && agentihooks swarm demo status --json"
        )
        assert code == 0 and '"handoffs"' in out, out
        token = re.search(r"^export AGENTIHOOKS_TOKEN=(\S+)$", exports, re.M)
        assert token is not None and token.group(1) not in story
        code, out = await _in_a_new_terminal(
            tmp_path, 'source .demo/env && test "$OPERATOR_TOKEN" = "$AGENTIHOOKS_TOKEN"'
        )
        assert code == 0, out
        address = re.search(r"^export AGENTIHOOKS_CONTROL_ADDR=(\S+)$", exports, re.M)
        assert address is not None
        url = ledger.split("Ledger page: ", 1)[1].strip()
        async with aiohttp.ClientSession() as http, http.get(url) as page:
            assert page.status == 200
        control_port = int(address.group(1).rpartition(":")[2])
        process.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(process.communicate(), DEADLINE_S)
        assert process.returncode == 0, rest.decode()[-2000:]
        assert "Stopping the demo's services." in rest.decode()
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", control_port)) != 0, "the controller still runs"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
