"""What the restorer's subcommands need at start, read from the environment: the settings, the
addresses that must answer, and the capture cadence. A setting that is missing or not of its
form stops the command before anything runs (exit code 2), named on stderr.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Mapping

from services.common import settings
from services.restorer import (
    capturing,
    entry,
    following,
)


def load(env: Mapping[str, str], listen: str | None) -> settings.RestorerSettings:
    values = dict(env)
    if listen:
        values[settings.PREFIX + "RESTORER_ADDR"] = listen
    try:
        return settings.load_restorer(values)
    except settings.SettingsError as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def missing(conf: settings.RestorerSettings, command: str) -> str | None:
    """The first setting `command` needs at start that is not set, as the line to print.

    A sidecar (or a one-shot restore or capture) without a mounted launch record fetches it
    from the controller with the attempt's own credential: both must be there before any
    restore step, or the attempt would only learn it once its restore is asked for.
    """
    if command not in ("serve", "restore", "capture") or conf.launch_record_file is not None:
        return None
    if conf.control_addr is None:
        return (
            f"{settings.PREFIX}CONTROL_ADDR is not set: the sidecar fetches its launch record"
            f" from the controller there (or set {settings.PREFIX}LAUNCH_RECORD to a file)"
        )
    if conf.worker_credential is None:
        return (
            f"{settings.PREFIX}WORKER_CREDENTIAL is not set: the sidecar fetches its launch"
            " record with the attempt's own credential"
        )
    return None


def needed(conf: settings.RestorerSettings, command: str) -> list[entry.Address]:
    """The addresses `command` needs answering at start, before any restore step, in order.

    The controller when the launch record is fetched from it (what `missing` asks for), and
    the checkpoint store when checkpoints go through it (`AGENTIHOOKS_CHECKPOINT_REMOTE`, set
    by the controller for such a swarm) and its address is given: the restore then reaches
    the store the launch record names, which the controller writes from that same setting.
    """
    if command not in ("serve", "restore", "capture"):
        return []
    needed: list[entry.Address] = []
    if conf.launch_record_file is None and conf.control_addr is not None:
        needed.append(
            entry.Address(
                settings.PREFIX + "CONTROL_ADDR",
                conf.control_addr,
                "the controller, where the sidecar fetches its launch record, was not reached",
            )
        )
    if conf.checkpoint_remote and conf.store_addr is not None:
        needed.append(
            entry.Address(
                settings.PREFIX + "STORE_ADDR",
                conf.store_addr,
                "the checkpoint store, through which the sidecar reads and writes"
                " checkpoints, was not reached",
            )
        )
    return needed


def capture_interval(env: Mapping[str, str]) -> float:
    """`AGENTIHOOKS_CAPTURE_INTERVAL_S` (the controller passes it to every worker Pod), else
    the default; a value that is not a number of seconds stops the sidecar at start."""
    return number(env, "CAPTURE_INTERVAL_S", capturing.DEFAULT_INTERVAL_S, "a number of seconds")


def number(env: Mapping[str, str], name: str, default: float, form: str) -> float:
    """The setting `AGENTIHOOKS_{name}`, a number not below zero, else `default`; any other
    value stops the sidecar at start (exit code 2), naming the variable."""
    raw = env.get(settings.PREFIX + name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        print(
            f"agentihooks-restorer: {settings.PREFIX}{name} must be {form}, not {raw!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return value


def capture_cadence(env: Mapping[str, str]) -> following.Cadence | None:
    """How the sidecar follows the attempt (`AGENTIHOOKS_CAPTURE_LAG_S`, `…_SOURCE_PERIOD_S`,
    `…_WATCH_MAX_DIRS`, `…_FORCE_POLLING`); None when `AGENTIHOOKS_CAPTURE_LAG_S` is 0
    (captures on the interval only). A malformed value stops the sidecar at start."""
    lag = number(env, "CAPTURE_LAG_S", following.DEFAULT_LAG_S, "a number of seconds")
    period = number(
        env, "CAPTURE_SOURCE_PERIOD_S", following.DEFAULT_SOURCE_PERIOD_S, "a number of seconds"
    )
    dirs = number(
        env, "CAPTURE_WATCH_MAX_DIRS", following.DEFAULT_MAX_WATCHED_DIRS, "a number of folders"
    )
    polling = env.get(settings.PREFIX + "CAPTURE_FORCE_POLLING", "").strip().lower()
    if polling not in ("", "true", "false"):
        print(
            f"agentihooks-restorer: {settings.PREFIX}CAPTURE_FORCE_POLLING must be true or"
            f" false, not {polling!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if lag == 0:
        return None
    return following.Cadence(
        lag_s=lag,
        source_period_s=period,
        max_watched_dirs=int(dirs),
        force_polling=polling == "true",
    )


def worktree(value: str) -> pathlib.Path:
    path = pathlib.Path(value)
    if not path.is_absolute():
        path = pathlib.Path.cwd() / path
    return path
