"""The restorer's one-shot commands (`agentihooks-restorer restore`, `capture`): one restore or
one capture in this process, its result printed as one JSON object.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from services.common import errors, settings
from services.restorer import (
    captures,
    capturing,
    entry,
    restores,
    serving,
    sidecar,
)


def _result_json(result: restores.Ready | restores.Refused) -> dict[str, Any]:
    if isinstance(result, restores.Refused):
        return {"state": "refused", "reason": result.reason}
    return {
        "state": "ready",
        "recovery": result.recovery.value,
        "checkpoint_id": result.checkpoint_id,
        "watermark": result.watermark,
        "cwd": result.cwd,
        "command": list(result.command),
        "stdin_path": result.stdin_path,
    }


async def _start_check(conf: settings.RestorerSettings, needed: Sequence[entry.Address]) -> bool:
    """Wait for `needed` to answer (one-shot commands); False, said on stderr, when one
    does not."""
    try:
        await serving.reach_all(needed, conf.start_timeout_s)
    except entry.Unreachable as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr, flush=True)
        return False
    return True


async def once(
    conf: settings.RestorerSettings,
    needed: Sequence[entry.Address],
    command: Callable[[settings.RestorerSettings, pathlib.Path], Awaitable[int]],
    worktree: pathlib.Path,
) -> int:
    """A one-shot command (`restore`, `capture`), once `needed` answers; else exit code 5."""
    if not await _start_check(conf, needed):
        return entry.EXIT_UNREACHABLE
    return await command(conf, worktree)


async def restore_once(conf: settings.RestorerSettings, worktree: pathlib.Path) -> int:
    service = sidecar.RestorerService(conf)
    service.start(str(worktree))
    result = await service.wait()
    print(json.dumps(_result_json(result), ensure_ascii=False))
    return 0 if isinstance(result, restores.Ready) else entry.EXIT_REFUSED


async def capture_once(conf: settings.RestorerSettings, worktree: pathlib.Path) -> int:
    try:
        launch = await sidecar.load_launch_record(conf)
    except errors.Refusal as error:
        print(json.dumps({"state": "failed", "reason": error.reason}))
        return 2
    places = sidecar.Places(conf.attempt_dir, conf.harness_home, conf.harness_env)
    capturer = capturing.Capturer(
        launch,
        places.attempt(worktree),
        conf.storage,
        control_addr=conf.control_addr,
        worker_credential=conf.worker_credential,
    )
    try:
        captured = await capturer.capture()
    except captures.CaptureError as error:
        print(json.dumps({"state": "failed", "reason": str(error)}))
        return 1
    print(
        json.dumps(
            {
                "state": "captured",
                "checkpoint_id": captured.checkpoint_id,
                "continuity": captured.continuity,
                "native_session_id": captured.native_session_id,
                "watermark": captured.watermark,
                "written": captured.written,
            }
        )
    )
    return 0
