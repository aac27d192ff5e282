"""Declaring a swarm from a document (`Recovery.ApplySwarm`).

The document (YAML or JSON) is validated by docs/swarm-v2/schemas/swarm.json (packaged here as
swarm.schema.json). Master credentials are hashed while parsing: the document carries the
secret, the state never does. Applying admits generation 1 of each new seat and asks the runtime
to launch it; re-applying updates task text and masters without touching running attempts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.resources
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

import jsonschema
import yaml

from services.common import directives, errors, logs, tokens
from services.controller import launching, pod_identities, replacing
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records

log = logging.getLogger("services.controller.swarms")

DEFAULT_AUTOMATION: Final = True
CONCURRENT_LAUNCHES: Final = 32


def load_schema() -> dict[str, Any]:
    """The swarm document's JSON Schema as packaged with this module."""
    text = importlib.resources.files(__package__).joinpath("swarm.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


_VALIDATOR: Final = jsonschema.Draft202012Validator(load_schema())


@dataclasses.dataclass(frozen=True)
class SeatSpec:
    """A seat as declared, with its task row."""

    seat: str
    task_id: str
    text: str
    awaiting: str
    legacy_spawn: bool


@dataclasses.dataclass(frozen=True)
class SwarmDocument:
    """A validated swarm document; masters hold credential hashes only."""

    config: records.SwarmConfig
    masters: Mapping[str, str] = dataclasses.field(repr=False)
    accounts: Mapping[str, int]
    seats: tuple[SeatSpec, ...]

    @property
    def swarm(self) -> str:
        return self.config.swarm


@dataclasses.dataclass(frozen=True)
class Applied:
    """What applying changed."""

    swarm: str
    admitted_executions: tuple[str, ...]
    updated_seats: tuple[str, ...]


def _where(error: jsonschema.ValidationError) -> str:
    path = "/".join(str(p) for p in error.absolute_path)
    return path or "the top level"


def _problem(error: jsonschema.ValidationError) -> str:
    # Name where and which rule, never the value: the value may be a master's credential.
    if error.validator in ("required", "additionalProperties"):
        return f"swarm document at {_where(error)}: {error.message}"
    return f"swarm document at {_where(error)}: fails {error.validator}"


def _duplicates(names: list[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def parse(document: str | Mapping[str, Any]) -> SwarmDocument:
    """Read and validate a swarm document.

    Raises:
        errors.Malformed: not YAML/JSON, or the schema or a cross-field rule refuses it (the
            message names where, never a value of the document).
    """
    if isinstance(document, str):
        try:
            raw = yaml.safe_load(document)
        except yaml.YAMLError:
            raise errors.Malformed(
                "malformed_document", "the swarm document is not YAML or JSON"
            ) from None
    else:
        raw = dict(document)
    if not isinstance(raw, dict):
        raise errors.Malformed("malformed_document", "the swarm document is not an object")
    problems = sorted(_VALIDATOR.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if problems:
        raise errors.Malformed("malformed_document", _problem(problems[0]))
    seats = tuple(
        SeatSpec(
            seat=s["seat"],
            task_id=s["task"].get("id") or f"t-{s['seat']}",
            text=s["task"]["text"],
            awaiting=s["task"].get("awaiting", ""),
            legacy_spawn=bool(s.get("legacy_spawn", False)),
        )
        for s in raw["seats"]
    )
    projects = tuple(records.Project(p["name"], p["repository"]) for p in raw.get("projects", []))
    masters = {m["agent"]: tokens.hash_secret(m["credential"]) for m in raw.get("masters", [])}
    accounts = {a["name"]: int(a["slots"]) for a in raw.get("accounts", [])}
    for what, names in (
        ("seat", [s.seat for s in seats]),
        ("task id", [s.task_id for s in seats]),
        ("project", [p.name for p in projects]),
        ("master agent", [m["agent"] for m in raw.get("masters", [])]),
        ("account", [a["name"] for a in raw.get("accounts", [])]),
    ):
        twice = _duplicates(names)
        if twice is not None:
            raise errors.Malformed("malformed_document", f"swarm document: {what} {twice} twice")
    if accounts and sum(accounts.values()) < len(seats):
        raise errors.Malformed(
            "malformed_document", "swarm document: the accounts offer fewer slots than seats"
        )
    config = records.SwarmConfig(
        swarm=raw["swarm"],
        worker_image=raw["worker_image"],
        harness=raw["harness"],
        command=tuple(raw["command"]),
        projects=projects,
        restore_automation=bool(raw.get("restore_automation", DEFAULT_AUTOMATION)),
        checkpoint_remote=bool(raw.get("checkpoint_remote", False)),
        continuation_prompt=raw.get("continuation_prompt", ""),
    )
    return SwarmDocument(config, masters, accounts, seats)


async def _running_identities(ctx: replacing.Context) -> dict[str, pod_identities.Identity]:
    """The identity each running worker of the swarm carries, by execution id (none when the
    swarm has no workers: a new swarm)."""
    found: dict[str, pod_identities.Identity] = {}
    try:
        listed = await ctx.runtime.list_attempts(ctx.swarm)
    except pods.PodsError as exc:
        # The apply goes on (launches wait for the runtime as always); a worker running from
        # before a loss of the records would then hold a credential the new records do not.
        logs.event(
            log,
            "workers_unlisted",
            logging.WARNING,
            swarm=ctx.swarm,
            exception=type(exc).__name__,
        )
        return found
    for attempt in listed:
        identity = pod_identities.read(attempt.identity)
        if identity is not None and attempt.alive and not attempt.departed:
            found[attempt.execution_id] = identity
    return found


async def apply(ctx: replacing.Context, document: SwarmDocument) -> Applied:
    """Declare or update the swarm under the lease, then launch each new seat's first attempt.

    Raises:
        errors.Malformed: the document names another swarm than this controller's, or changes
            an existing seat's task id.
        scripting.LeaseLost: this replica is not the lease holder; nothing was written.
    """
    if document.swarm != ctx.swarm:
        raise errors.Malformed("malformed_document", "the document declares another swarm")
    now = ctx.writer.clock()
    seats: list[dict[str, Any]] = []
    task_keys: list[str] = []
    running: dict[str, pod_identities.Identity] | None = None  # listed once, if a seat is new
    for order, spec in enumerate(document.seats):
        existing = await reading.seat(ctx.client, ctx.swarm, spec.seat)
        if existing is not None and existing.task_id != spec.task_id:
            raise errors.Malformed(
                "malformed_document", f"swarm document: seat {spec.seat} cannot change its task id"
            )
        first = replacing.new_execution(
            swarm=ctx.swarm,
            seat=spec.seat,
            generation=1,
            task_id=spec.task_id,
            task_generation=1,
            image=document.config.worker_image,
            directive=directives.FRESH,
            restores_from=None,
            legacy_spawn=spec.legacy_spawn,
            now=now,
        )
        if existing is None and running is None:
            running = await _running_identities(ctx)
        if existing is None and (identity := (running or {}).get(first.execution_id)):
            # Its records were lost while its first attempt runs: the attempt keeps the
            # credential and grants its worker holds, so they still answer (`pod_identities`).
            first = identity.token_ids.applied_to(first)
        seats.append(
            {
                "seat": spec.seat,
                "order": order,
                "text": spec.text,
                "execution_id": first.execution_id,
                "seat_fields": {
                    "seat": spec.seat,
                    "task_id": spec.task_id,
                    "current": first.execution_id,
                    "generation": "1",
                    "state": records.SeatState.RUNNING.value,
                },
                "task_fields": {
                    "task_id": spec.task_id,
                    "seat": spec.seat,
                    "text": spec.text,
                    "awaiting": spec.awaiting,
                    "task_generation": "1",
                    "held": "0",
                },
                "execution_fields": first.to_hash(),
            }
        )
        task_keys.append(keys.task(ctx.swarm, spec.task_id))
    applied = await ctx.writer.apply_swarm(
        document.config.to_hash(), document.masters, document.accounts, seats, task_keys
    )
    # An index for readers that only know an execution id; not recovery state.
    await ctx.client.sadd(keys.SWARMS, ctx.swarm)
    limit = asyncio.Semaphore(CONCURRENT_LAUNCHES)
    admitted, updated = applied.admitted, applied.updated
    new = await reading.executions(ctx.client, ctx.swarm, admitted)
    seats_now = {
        s.seat: s for s in await reading.seats(ctx.client, ctx.swarm, [e.seat for e in new])
    }

    async def launch(execution: records.Execution) -> None:
        async with limit:
            await launching.launch_or_defer(
                ctx, execution, config=document.config, seat=seats_now.get(execution.seat)
            )

    try:
        async with asyncio.TaskGroup() as group:
            for execution in new:
                group.create_task(launch(execution))
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None
    logs.event(log, "swarm_applied", swarm=ctx.swarm, admitted=admitted, updated=updated)
    return Applied(ctx.swarm, tuple(admitted), tuple(updated))
