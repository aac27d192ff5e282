"""A malformed `AGENTIHOOKS_QUALIFIED_VERSIONS` stops the restorer at start, in one line.

Issue 24: "a setting that extends the qualified versions … read by capture and restore"; a bad
value "is refused at start with a message naming the variable" (design, section 6). Each
command runs as the real console script in its own process, before any restore or capture.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

RESTORER = pathlib.Path(sys.executable).parent / "agentihooks-restorer"
EXIT_SETTINGS = 2
TIMEOUT_S = 120.0


@pytest.mark.parametrize("command", ["serve", "restore", "capture"])
def test_a_malformed_setting_stops_the_restorer_with_one_line(
    command: str, tmp_path: pathlib.Path
) -> None:
    env = {
        "PATH": f"{RESTORER.parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AGENTIHOOKS_QUALIFIED_VERSIONS": "codex=latest",
        "AGENTIHOOKS_LAUNCH_RECORD": str(tmp_path / "launch.json"),
    }
    done = subprocess.run(
        [str(RESTORER), command],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == EXIT_SETTINGS
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "agentihooks-restorer: AGENTIHOOKS_QUALIFIED_VERSIONS must be"
        " HARNESS=VERSION[,HARNESS=VERSION…] with HARNESS claude-code or codex and VERSION a"
        " dotted number (e.g. codex=0.171,claude-code=2.2), not 'codex=latest'"
    ]
    assert list(tmp_path.iterdir()) == []
