"""Codex's rollout files and session index, as the harness reads them.

A session is one rollout file `~/.codex/sessions/YYYY/MM/DD/rollout-<timestamp>-<id>.jsonl`,
possibly compressed (`.jsonl.zst`); its first record holds the session's metadata. The session
index holds one JSON object a line. See `codex` for the whole layout.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import re

import zstandard

from services.restorer.harness import base, homes

CODEX = ".codex"
SESSIONS = "sessions"
ROLLOUT = re.compile(
    r"rollout-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2})-([A-Za-z0-9_-]+)\.jsonl(\.zst)?"
)
COMPRESSED = ".zst"
MAX_ROLLOUT_BYTES = 1 << 30
"""The most a compressed rollout may expand to when its records are read (a bomb stops here)."""
_DATE_DIRS = (re.compile(r"\d{4}"), re.compile(r"\d{2}"), re.compile(r"\d{2}"))
_FIRST_LINE_LIMIT = 1 << 20


def rollout_segments(segments: tuple[str, ...]) -> str | None:
    """The session id when `segments` is `.codex/sessions/YYYY/MM/DD/rollout-…-ID.jsonl`."""
    if len(segments) != 6 or segments[:2] != (CODEX, SESSIONS):
        return None
    if not all(
        pattern.fullmatch(part) for pattern, part in zip(_DATE_DIRS, segments[2:5], strict=True)
    ):
        return None
    match = ROLLOUT.fullmatch(segments[5])
    return match.group(2) if match else None


def first_record(path: pathlib.Path) -> dict[str, object] | None:
    """The first JSON record of a rollout (compressed or not), read without following a
    symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if path.name.endswith(COMPRESSED):
            try:
                with zstandard.ZstdDecompressor().stream_reader(handle) as reader:
                    head = reader.read(_FIRST_LINE_LIMIT)
            except zstandard.ZstdError:
                return None
            line = head.split(b"\n", 1)[0]
        else:
            line = handle.readline(_FIRST_LINE_LIMIT)
    return homes.load_json_object(line)


def expand(rollout: base.SessionFile) -> bytes:
    """A rollout's records: its bytes, decompressed when Codex compressed the file.

    Raises:
        HarnessError: a compressed rollout that does not decompress, or expands past
            `MAX_ROLLOUT_BYTES`.
    """
    if not rollout.path.endswith(COMPRESSED):
        return rollout.data
    try:
        with zstandard.ZstdDecompressor().stream_reader(rollout.data) as reader:
            data = reader.read(MAX_ROLLOUT_BYTES + 1)
    except zstandard.ZstdError:
        raise base.HarnessError("harness: a compressed rollout does not decompress") from None
    if len(data) > MAX_ROLLOUT_BYTES:
        raise base.HarnessError("harness: a compressed rollout expands past the limit")
    return data


def meta(record: dict[str, object] | None) -> dict[str, object]:
    """The session metadata of a first record (`session_meta` payload, or older bare form)."""
    if record is None:
        return {}
    payload = record.get("payload")
    if record.get("type") == "session_meta" and isinstance(payload, dict):
        return payload
    return record


def index_lines(data: bytes) -> list[tuple[bytes, dict[str, object] | None]]:
    """Each non-empty index line with its parsed object (None when it does not parse)."""
    return [(line, homes.load_json_object(line)) for line in data.split(b"\n") if line.strip()]


def now() -> str:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
