"""Who every worker Pod runs as: the cluster's record of an attempt's identity and epoch.

Every worker carries, in one JSON annotation (`pods.ANNOTATION_ATTEMPT`,
``agentihooks.io/attempt``), the lease epoch it was launched under and the ids of the
credential and grants it holds. Redis replication is asynchronous and a Redis without
persistence restarts empty, so these outlive what Redis lost:

- the **epoch**: a controller never acquires a swarm's lease at or below the newest epoch its
  Pods were launched under (`leasing.Lease.acquire`'s floor), and a Pod launched under a newer
  epoch than the lease now holds tells that Redis came back older (`losses`);
- the **token ids**: a seat's first attempt re-admitted after its records were lost keeps the
  identity its running worker holds (`swarms.apply`), so the worker's credential and grants
  still answer; a replacement's decision, with the same ids, is in `witnesses`.

What it holds: numbers and token *ids*. An id is the handle a revocation uses; a token cannot
be made from one without the controller's signing key, and the worker's credential itself stays
in its Secret.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

from services.controller.pods import runtime as pods
from services.controller.state import records

VERSION = 1
"""The annotation's format; a Pod carrying another version is not read."""


@dataclasses.dataclass(frozen=True)
class TokenIds:
    """The ids an attempt's credential and grants were minted under."""

    credential_id: str
    credential_issued_at: int
    capture_grant_id: str
    restore_grant_id: str | None

    @classmethod
    def of(cls, execution: records.Execution) -> TokenIds:
        return cls(
            execution.credential_id,
            execution.credential_issued_at,
            execution.capture_grant_id,
            execution.restore_grant_id,
        )

    def to_json(self) -> dict[str, Any]:
        """As the annotations write them (`token_ids`)."""
        out: dict[str, Any] = {
            "credential": self.credential_id,
            "credential_issued_at": self.credential_issued_at,
            "capture_grant": self.capture_grant_id,
        }
        if self.restore_grant_id:
            out["restore_grant"] = self.restore_grant_id
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TokenIds:
        """Raises `ValueError` or `TypeError` when a field is missing or of another type."""
        return cls(
            credential_id=required_text(raw["credential"]),
            credential_issued_at=required_number(raw["credential_issued_at"]),
            capture_grant_id=required_text(raw["capture_grant"]),
            restore_grant_id=text(raw.get("restore_grant")),
        )

    def applied_to(self, execution: records.Execution) -> records.Execution:
        """`execution` holding these ids instead of its own."""
        return dataclasses.replace(
            execution,
            credential_id=self.credential_id,
            credential_issued_at=self.credential_issued_at,
            capture_grant_id=self.capture_grant_id,
            restore_grant_id=self.restore_grant_id,
        )


@dataclasses.dataclass(frozen=True)
class Identity:
    """What a worker Pod says of its attempt."""

    epoch: int
    token_ids: TokenIds


def pod_annotations(execution: records.Execution, epoch: int) -> dict[str, str]:
    """The annotation every worker carries: `execution`'s token ids, launched under `epoch`."""
    value = {"version": VERSION, "epoch": epoch, "token_ids": TokenIds.of(execution).to_json()}
    return {pods.ANNOTATION_ATTEMPT: json.dumps(value, sort_keys=True, separators=(",", ":"))}


READ_MEMORY = 1 << 16
"""Annotation values whose identity is kept once read (a Pod's annotation never changes)."""


@functools.lru_cache(maxsize=READ_MEMORY)
def read(value: str | None) -> Identity | None:
    """The identity an annotation's value names; None when absent, of another version, or not
    well formed (a Pod launched before the annotation existed carries none).

    Every resync asks this of every listed worker (`newest_epoch`): each value is parsed once
    and its (immutable) identity kept, up to `READ_MEMORY` values."""
    if not value:
        return None
    try:
        raw = json.loads(value)
        if not isinstance(raw, Mapping) or raw.get("version") != VERSION:
            return None
        epoch = required_number(raw["epoch"])
        if epoch < 1:
            return None
        return Identity(epoch, TokenIds.from_json(raw["token_ids"]))
    except (KeyError, ValueError, TypeError):
        return None


def newest_epoch(attempts: Iterable[pods.Attempt]) -> int:
    """The newest epoch any of `attempts` was launched under; 0 when none says."""
    return max(
        (identity.epoch for a in attempts if (identity := read(a.identity)) is not None),
        default=0,
    )


def text(value: Any) -> str | None:
    """A string field of an annotation; None for null or empty."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def required_text(value: Any) -> str:
    found = text(value)
    if found is None:
        raise ValueError("a required field is empty")
    return found


def number(value: Any) -> int | None:
    """An integer field of an annotation; None for null (a boolean is no integer)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("expected an integer")
    return value


def required_number(value: Any) -> int:
    found = number(value)
    if found is None:
        raise ValueError("a required field is empty")
    return found
