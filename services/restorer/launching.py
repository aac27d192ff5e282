"""The launch record: what an attempt launches with, fetched or read, checked directive first.

The sidecar fetches its launch record with the attempt's own worker credential
(`Recovery.GetLaunchRecord`), or reads it from a mounted JSON file (`AGENTIHOOKS_LAUNCH_RECORD`)
in tests and the local runtime. Either way the restore directive is checked before any other
field is read: "A directive whose fields disagree, for example a fresh directive naming a
checkpoint, is refused as malformed" before anything else happens.

The JSON file has the shape of the `LaunchRecord` message with the spec's lowercase words for
the directive (the form `directives.Directive.to_json` writes):

    {"scope": {"swarm": "example", "seat": "eng-2", "task_id": "t-eng-2", "task_generation": 1,
               "execution_id": "e-43", "execution_generation": 4},
     "directive": {"checkpoint_id": "ckpt-7", "recovery": "native", "session_id": "…",
                   "watermark": 412},
     "registration": {"projects": [{"name": "app", "repository": "https://…/app.git"}],
                      "worker_image": "registry.local/agent-worker:1.4.2",
                      "harness": "claude_code"},
     "restores_from_generation": 3, "restore_grant": "…", "capture_grant": "…",
     "command": ["claude", "--model", "opus"], "checkpoint_remote": false, "store_addr": "",
     "continuation_prompt": ""}

`continuation_prompt` is optional: empty or absent, a natively resumed harness continues with
the restorer's default prompt.

Grants never appear in a repr, a log or an error message.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import grpc
from agentihooks.swarm.v2 import recovery_pb2, recovery_pb2_grpc, types_pb2

from services.common import directives, errors, tls
from services.restorer import retrying

MALFORMED_RECORD = "malformed launch record"
MAX_FILE_BYTES = 1 << 20

_CONTINUITY_WORDS: Mapping[types_pb2.Continuity, str] = {
    types_pb2.CONTINUITY_NATIVE: directives.Continuity.NATIVE.value,
    types_pb2.CONTINUITY_RECONSTRUCTED: directives.Continuity.RECONSTRUCTED.value,
    types_pb2.CONTINUITY_FRESH: directives.Continuity.FRESH.value,
}


class MalformedDirective(errors.Malformed):
    """The directive's fields disagree (or are of the wrong kind); nothing else was read.

    `reason` is `malformed directive: <the disagreement>`; it names no values.
    `checkpoint_remote` is the record's flag and `execution_id` the scope's execution id, as
    far as they could be read, so the refusal can still be reported and logged with what is
    known.
    """

    def __init__(self, why: str, *, checkpoint_remote: bool, execution_id: str = "") -> None:
        super().__init__(f"{directives.MALFORMED}: {why}")
        self.checkpoint_remote = checkpoint_remote
        self.execution_id = execution_id


class MalformedLaunchRecord(errors.Malformed):
    """A launch record that cannot be used: the message names the field, never its value."""

    def __init__(self, why: str) -> None:
        super().__init__(f"{MALFORMED_RECORD}: {why}")


@dataclasses.dataclass(frozen=True)
class Scope:
    """The attempt's scope (the `AttemptScope` message)."""

    swarm: str
    seat: str
    task_id: str
    task_generation: int
    execution_id: str
    execution_generation: int


@dataclasses.dataclass(frozen=True)
class Project:
    """A project of the worker's registration."""

    name: str
    repository: str


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """What an attempt launches with; its directive's fields agree."""

    scope: Scope
    directive: directives.Directive
    projects: tuple[Project, ...]
    worker_image: str
    harness: str
    restores_from_generation: int
    restore_grant: str = dataclasses.field(repr=False)
    capture_grant: str = dataclasses.field(repr=False)
    command: tuple[str, ...]
    checkpoint_remote: bool
    store_addr: str | None
    continuation_prompt: str = ""
    """The prompt a natively resumed harness continues with; empty: the restorer's default."""

    def project(self, name: str) -> Project | None:
        """The registered project called `name`, or None."""
        for project in self.projects:
            if project.name == name:
                return project
        return None


def _remote_flag(raw: Mapping[str, Any]) -> bool:
    return raw.get("checkpoint_remote") is True


def _known_execution_id(raw: Mapping[str, Any]) -> str:
    """The scope's execution id when it is plain text, else empty (read before the rest)."""
    scope = raw.get("scope")
    value = scope.get("execution_id") if isinstance(scope, Mapping) else None
    return value if isinstance(value, str) and value.isprintable() and len(value) <= 256 else ""


def parse(raw: object) -> LaunchRecord:
    """Parse a launch record from its JSON form, checking the directive first.

    Raises:
        MalformedDirective: the directive is absent, of the wrong kind, or its fields disagree.
        MalformedLaunchRecord: any other field is missing or of the wrong type.
    """
    if not isinstance(raw, Mapping):
        raise MalformedLaunchRecord("not a JSON object")
    remote = _remote_flag(raw)
    known = _known_execution_id(raw)
    raw_directive = raw.get("directive")
    if not isinstance(raw_directive, Mapping):
        raise MalformedDirective(
            "the launch record has no directive", checkpoint_remote=remote, execution_id=known
        )
    try:
        directive = directives.from_json(raw_directive)
    except directives.DirectiveError as error:
        raise MalformedDirective(str(error), checkpoint_remote=remote, execution_id=known) from None
    scope = _mapping(raw, "scope")
    registration = _mapping(raw, "registration")
    projects = registration.get("projects", [])
    if not isinstance(projects, list):
        raise MalformedLaunchRecord("registration.projects is not a list")
    command = raw.get("command", [])
    if not isinstance(command, list) or not all(isinstance(w, str) and w for w in command):
        raise MalformedLaunchRecord("command is not a list of text")
    if not command:
        raise MalformedLaunchRecord("command is empty")
    checkpoint_remote = raw.get("checkpoint_remote", False)
    if not isinstance(checkpoint_remote, bool):
        raise MalformedLaunchRecord("checkpoint_remote is not true or false")
    return LaunchRecord(
        scope=Scope(
            swarm=_text(scope, "swarm"),
            seat=_text(scope, "seat"),
            task_id=_text(scope, "task_id"),
            task_generation=_count(scope, "task_generation"),
            execution_id=_text(scope, "execution_id"),
            execution_generation=_count(scope, "execution_generation"),
        ),
        directive=directive,
        projects=tuple(_project(p) for p in projects),
        worker_image=_text(registration, "worker_image", required=False),
        harness=_text(registration, "harness"),
        restores_from_generation=_count(raw, "restores_from_generation", default=0),
        restore_grant=_text(raw, "restore_grant", required=False),
        capture_grant=_text(raw, "capture_grant", required=False),
        command=tuple(command),
        checkpoint_remote=checkpoint_remote,
        store_addr=_text(raw, "store_addr", required=False) or None,
        continuation_prompt=_text(raw, "continuation_prompt", required=False),
    )


def parse_bytes(data: bytes) -> LaunchRecord:
    """Parse a launch record from JSON bytes (see `parse`)."""
    try:
        raw = json.loads(data)
    except ValueError:
        raise MalformedLaunchRecord("not JSON") from None
    return parse(raw)


def read_file(path: str | os.PathLike[str]) -> LaunchRecord:
    """Read and parse a mounted launch record file.

    Raises:
        MalformedLaunchRecord: the file is missing, too large, or not a launch record.
        MalformedDirective: see `parse`.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        raise MalformedLaunchRecord("the launch record file cannot be read") from None
    if len(data) > MAX_FILE_BYTES:
        raise MalformedLaunchRecord("the launch record file is too large")
    return parse_bytes(data)


def to_json(record: LaunchRecord) -> dict[str, Any]:
    """The JSON form `parse` reads (grants included: this is for writing the mounted file)."""
    return {
        "scope": dataclasses.asdict(record.scope),
        "directive": record.directive.to_json(),
        "registration": {
            "projects": [dataclasses.asdict(p) for p in record.projects],
            "worker_image": record.worker_image,
            "harness": record.harness,
        },
        "restores_from_generation": record.restores_from_generation,
        "restore_grant": record.restore_grant,
        "capture_grant": record.capture_grant,
        "command": list(record.command),
        "checkpoint_remote": record.checkpoint_remote,
        "store_addr": record.store_addr or "",
        "continuation_prompt": record.continuation_prompt,
    }


def from_pb(message: Any) -> LaunchRecord:
    """Parse a `LaunchRecord` message as `Recovery.GetLaunchRecord` returns it.

    Raises:
        MalformedDirective, MalformedLaunchRecord: see `parse`.
    """
    d = message.directive
    raw_directive: dict[str, Any] = {
        "checkpoint_id": d.checkpoint_id or None,
        "recovery": _CONTINUITY_WORDS.get(d.recovery, "unspecified"),
        "session_id": d.session_id or None,
        "watermark": d.watermark if d.HasField("watermark") else None,
    }
    s, r = message.scope, message.registration
    return parse(
        {
            "scope": {
                "swarm": s.swarm,
                "seat": s.seat,
                "task_id": s.task_id,
                "task_generation": s.task_generation,
                "execution_id": s.execution_id,
                "execution_generation": s.execution_generation,
            },
            "directive": raw_directive,
            "registration": {
                "projects": [{"name": p.name, "repository": p.repository} for p in r.projects],
                "worker_image": r.worker_image,
                "harness": r.harness,
            },
            "restores_from_generation": message.restores_from_generation,
            "restore_grant": message.restore_grant,
            "capture_grant": message.capture_grant,
            "command": list(message.command),
            "checkpoint_remote": message.checkpoint_remote,
            "store_addr": message.store_addr,
            "continuation_prompt": message.continuation_prompt,
        }
    )


def continuity_pb(kind: directives.Continuity) -> types_pb2.Continuity:
    """The wire enum of a continuity word."""
    for number, word in _CONTINUITY_WORDS.items():
        if word == kind.value:
            return number
    raise ValueError("unknown continuity")


# --- field readers: messages name the field, never the value ---------------------------------


def _mapping(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name)
    if not isinstance(value, Mapping):
        raise MalformedLaunchRecord(f"{name} is not an object")
    return value


def _text(raw: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    value = raw.get(name, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise MalformedLaunchRecord(f"{name} is not text")
    if required and not value:
        raise MalformedLaunchRecord(f"{name} is missing")
    return value


def _count(raw: Mapping[str, Any], name: str, *, default: int | None = None) -> int:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedLaunchRecord(f"{name} is not a non-negative whole number")
    return value


def _project(raw: object) -> Project:
    if not isinstance(raw, Mapping):
        raise MalformedLaunchRecord("a registration project is not an object")
    return Project(name=_text(raw, "name"), repository=_text(raw, "repository", required=False))


async def fetch(
    control_addr: str,
    worker_credential: str,
    *,
    retry: retrying.Retry = retrying.DEFAULT,
    timeout_s: float = 10.0,
) -> LaunchRecord:
    """Fetch this attempt's launch record with its own worker credential.

    Raises:
        MalformedDirective, MalformedLaunchRecord: see `parse`.
        errors.Unavailable: the controller could not be reached after the retries.
        errors.Refused: the controller refused the credential (the reason it sent is kept).
    """
    async with tls.channel(control_addr) as channel:
        stub = recovery_pb2_grpc.RecoveryStub(channel)

        async def call() -> Any:
            return await stub.GetLaunchRecord(
                recovery_pb2.GetLaunchRecordRequest(),
                metadata=retrying.bearer(worker_credential),
                timeout=timeout_s,
            )

        try:
            message = await retry.call(call)
        except grpc.aio.AioRpcError as error:
            if error.code() in retrying.TRANSIENT:
                raise errors.Unavailable("controller unavailable") from None
            raise errors.Refused(f"launch record refused: {retrying.reason_of(error)}") from None
    return from_pb(message)
