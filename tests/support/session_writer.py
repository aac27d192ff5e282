"""A stand-in agent that appends records to a native session file, in a process of its own.

Run as `python -m tests.support.session_writer FILE`; it reads one command a line on stdin and
answers `ok` on stdout once the command's bytes are written (each write is flushed to the file
at once, as a harness writes its session):

- `append N [PAUSE_MS]`: N complete records, one write each, PAUSE_MS apart (default 0);
- `partial`: the first half of a record, without its newline;
- `finish`: the rest of the record `partial` began.

`Writer` drives one from a test (asyncio).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import time

_REPO = pathlib.Path(__file__).resolve().parents[2]
_PENDING = json.dumps({"type": "assistant", "text": "a record written in two parts"}) + "\n"


def _record(n: int) -> bytes:
    return (json.dumps({"type": "assistant", "n": n, "text": f"record {n}"}) + "\n").encode()


def main(argv: list[str]) -> int:
    path = pathlib.Path(argv[1])
    written = 0
    half = len(_PENDING) // 2
    with path.open("ab", buffering=0) as session:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "append":
                pause = float(words[2]) / 1000 if len(words) > 2 else 0.0
                for _ in range(int(words[1])):
                    session.write(_record(written))
                    written += 1
                    if pause:
                        time.sleep(pause)
            elif words[0] == "partial":
                session.write(_PENDING[:half].encode())
            elif words[0] == "finish":
                session.write(_PENDING[half:].encode())
            print("ok", flush=True)
    return 0


class Writer:
    """One stand-in writer process appending to `path`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    async def start(cls, path: pathlib.Path) -> Writer:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.session_writer",
            str(path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=_REPO,
        )
        return cls(process)

    async def say(self, command: str) -> None:
        """Send one command and wait for its bytes to be written."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(command.encode() + b"\n")
        await self._process.stdin.drain()
        answer = await asyncio.wait_for(self._process.stdout.readline(), 60)
        assert answer == b"ok\n", answer

    async def stop(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        await asyncio.wait_for(self._process.wait(), 30)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
