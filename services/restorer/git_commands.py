"""Running the real `git` CLI for a capture or a restore, safely.

Git runs with no user or system configuration, no hooks, no prompts and no optional locks (a
capture never takes the running agent's index lock); stderr is dropped (it may quote file
contents or paths). A failing step raises `source_records.SourceError` with a short cause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
from collections.abc import Mapping, Sequence

from services.restorer import source_records

_PASSED_ENV = (
    "PATH",
    "HOME",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "protocol.file.allow=always",
    "protocol.ext.allow=never",
    "safe.directory=*",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
    "submodule.recurse=false",
)


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for git: no user or system config, no prompts, fixed identity.

    Only a few variables pass through (PATH, HOME, TLS and proxy settings); `extra` adds more,
    for example a `GIT_ASKPASS` that supplies the project's clone credential.
    """
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    env.update(
        {
            "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
            "GIT_AUTHOR_NAME": "agentihooks restorer",
            "GIT_AUTHOR_EMAIL": "restorer@agentihooks.invalid",
            "GIT_COMMITTER_NAME": "agentihooks restorer",
            "GIT_COMMITTER_EMAIL": "restorer@agentihooks.invalid",
        }
    )
    if extra:
        env.update(extra)
    return env


@dataclasses.dataclass(frozen=True)
class Result:
    """A git run: its exit status and stdout."""

    code: int
    out: bytes


async def run_git(
    args: Sequence[str],
    *,
    cwd: pathlib.Path,
    env: Mapping[str, str],
    stdin: bytes | None = None,
) -> tuple[int, bytes]:
    """Run git with the fixed safe configuration; (exit status, stdout). stderr is dropped (it
    may quote file contents or paths).

    Raises:
        source_records.SourceError: git is not installed.
    """
    result = await git(args, cwd=cwd, env=env, stdin=stdin)
    return result.code, result.out


async def git(
    args: Sequence[str],
    *,
    cwd: pathlib.Path,
    env: Mapping[str, str],
    stdin: bytes | None = None,
) -> Result:
    command = ["git"]
    for setting in _CONFIG:
        command += ["-c", setting]
    command += list(args)
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise source_records.SourceError("source: git is not installed") from None
    out, _ = await process.communicate(stdin)
    return Result(process.returncode or 0, out)


async def git_ok(
    args: Sequence[str], *, cwd: pathlib.Path, env: Mapping[str, str], error: str
) -> bytes:
    result = await git(args, cwd=cwd, env=env)
    if result.code != 0:
        raise source_records.SourceError(error)
    return result.out


async def optional(args: Sequence[str], *, cwd: pathlib.Path, env: Mapping[str, str]) -> str:
    result = await git(args, cwd=cwd, env=env)
    return result.out.decode("utf-8", errors="replace").strip() if result.code == 0 else ""
