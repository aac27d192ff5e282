"""`make demo` as a new user runs it: the story, then the system stays up until Ctrl-C.

The demo runs in a folder of its own (its `.demo/` is made there), on free ports.
"""

from __future__ import annotations

import asyncio
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


def _exports(path: pathlib.Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = value
    return found


async def test_the_demo_tells_its_story_then_stays_up_until_ctrl_c(tmp_path: pathlib.Path) -> None:
    """It ends the story with one native resume and one fresh replacement, prints the ledger
    page's address and the file of exports for the CLI (never the token itself), stays up for
    the CLI and the page, and stops every service cleanly on Ctrl-C. Started as a background
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
        env_file = tmp_path / ".demo" / "env"
        exports = _exports(env_file)
        assert oct(env_file.stat().st_mode & 0o777) == "0o600"
        assert exports["AGENTIHOOKS_TOKEN"] not in "".join(seen)
        cli = await asyncio.create_subprocess_exec(
            str(pathlib.Path(sys.executable).parent / "agentihooks"),
            "swarm",
            "demo",
            "status",
            "--json",
            env={**os.environ, **exports},
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(cli.communicate(), DEADLINE_S)
        assert cli.returncode == 0 and b'"handoffs"' in out
        url = ledger.split("Ledger page: ", 1)[1].strip()
        async with aiohttp.ClientSession() as http, http.get(url) as page:
            assert page.status == 200
        control_port = int(exports["AGENTIHOOKS_CONTROL_ADDR"].rpartition(":")[2])
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
