"""What the kubelet holds of a Pod and its containers while it runs them, and the errors that
keep them waiting."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import hashlib
from pathlib import Path
from typing import Any

HOST_IP = "127.0.0.1"


MINIMUM_GRACE = 2.0


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ConfigError(Exception):
    """A container cannot be configured (CreateContainerConfigError)."""


class MountError(Exception):
    """A Pod's volumes cannot be set up (its containers stay ContainerCreating)."""


@dataclasses.dataclass(eq=False)
class Container:
    spec: dict[str, Any]
    kind: str  # "init", "sidecar" or "main"
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    last_state: dict[str, Any] = dataclasses.field(default_factory=dict)
    restart_count: int = 0
    started: bool = False
    ready: bool = False
    done: bool = False
    container_id: str | None = None
    proc: asyncio.subprocess.Process | None = None
    cgroup: Path | None = None
    started_at: str | None = None
    runs: int = 0
    exit_code: int | None = None
    probes: list[asyncio.Task[None]] = dataclasses.field(default_factory=list)
    started_event: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    exited: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    supervisor: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


@dataclasses.dataclass(eq=False)
class Pod:
    obj: dict[str, Any]
    folder: Path
    logs: Path
    init: list[Container]
    main: list[Container]
    start_time: str = dataclasses.field(default_factory=now)
    deleting: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    gone: bool = False
    terminating: bool = False
    sandbox: asyncio.subprocess.Process | None = None
    sandbox_ready: bool = False
    initialized: bool = False
    final_phase: str | None = None
    message: str | None = None
    cgroup: Path | None = None
    task: asyncio.Task[None] | None = None
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    written: dict[str, Any] | None = None
    transitions: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    ip: str = HOST_IP
    """The Pod's address: its own with a Pod network, else the host's."""

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.obj.get("spec") or {})

    @property
    def containers(self) -> list[Container]:
        return [*self.init, *self.main]

    def container(self, name: str) -> Container | None:
        return next((c for c in self.containers if c.name == name), None)


def mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def terminated(code: int, reason: str, message: str | None = None) -> dict[str, Any]:
    at = now()
    state: dict[str, Any] = {
        "exitCode": code,
        "reason": reason,
        "startedAt": at,
        "finishedAt": at,
    }
    if message:
        state["message"] = message
    return {"terminated": state}


def image_id(image: str) -> str:
    repository = image.rsplit("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def grace_period(pod: Pod) -> float:
    return float(pod.spec.get("terminationGracePeriodSeconds", 30))
