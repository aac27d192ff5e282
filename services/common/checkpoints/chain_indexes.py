"""Chain index objects (schema version 3): a long chain's segments kept in the store.

A capture about once a second leaves a session of thousands of small segments; a record that
listed each one (about 90 bytes a segment) would grow with every capture and, since records are
never deleted, the records' total with the square of the captures. Instead, a chain's segments
are grouped in runs kept in content-addressed index objects, like a binary counter:

- the newest segments stay inline in the record (`Chain.segments`) until there are
  `LEAF_SEGMENTS` of them; then they become one level 1 index object, which lists them;
- two runs of the same level at the end of the chain merge ("carry") into one index object of
  the next level, which lists those two runs (their names, sizes and the bytes each covers).

Every index object is written once and never again, so a capture uploads at most a few small
index objects (amortised: one level 1 object per `LEAF_SEGMENTS` segments and about as many
two-entry objects above them), the index bytes stored stay a small fixed share of the segment
list (about 53 bytes a segment: 40 in level 1 objects, 13 above), and a record names at most
one run per level, about log2(n / LEAF_SEGMENTS) runs, plus fewer than `LEAF_SEGMENTS` inline
segments.

An index object's bytes (fixed-width, so every byte has one meaning and no parser is needed):

    b"AHCI" | format (1 byte, 1) | level (1 byte, 1..MAX_LEVEL) | entries
    level 1 entry:  segment sha256 (32 bytes) | segment size (8 bytes, big-endian)
    higher entry:   run sha256 (32) | run object size (8) | bytes the run covers (8)

An entry of a higher level names an index object of the level below. Content addressing rules
out cycles (an object cannot name itself, directly or not, without a SHA-256 fixed point), and
the level, which falls by one at each step, bounds the depth.

Pure: no I/O (`index_reading` reads index objects through a store).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Final

from services.common.checkpoints import chains

MAGIC: Final = b"AHCI\x01"
HEADER_BYTES: Final = len(MAGIC) + 1
LEAF_SEGMENTS: Final = 8
"""Inline segments a record holds before they move to a level 1 index object."""
MAX_LEVEL: Final = 40
"""The highest level an index object may have (the schema's limit)."""
MAX_INDEX_BYTES: Final = 1024 * 1024
"""The largest index object a record may name (the schema's limit)."""
MAX_CHAIN_SEGMENTS: Final = 1 << 20
"""The most segments one chain may have: a chain whose index objects list more is refused
before they are all read (a small index can name the same runs over and over)."""

_SEGMENT = struct.Struct(">32sQ")
_RUN = struct.Struct(">32sQQ")


class Malformed(ValueError):
    """An index object's bytes are not an index object of the level expected."""


def encode_segments(segments: Sequence[chains.Segment]) -> bytes:
    """A level 1 index object listing `segments` in order."""
    return b"".join(
        [MAGIC, bytes([1]), *(_SEGMENT.pack(bytes.fromhex(s.sha256), s.size) for s in segments)]
    )


def encode_runs(level: int, runs: Sequence[chains.Run]) -> bytes:
    """An index object of `level` (2 or more) listing `runs` (each of `level - 1`) in order."""
    return b"".join(
        [
            MAGIC,
            bytes([level]),
            *(_RUN.pack(bytes.fromhex(r.sha256), r.size, r.bytes) for r in runs),
        ]
    )


def parse(data: bytes, level: int) -> tuple[chains.Segment, ...] | tuple[chains.Run, ...]:
    """The entries of an index object named as being of `level`: segments for level 1, runs
    of `level - 1` above.

    Raises:
        Malformed: the bytes are not an index object of that level, list nothing, or name a
            segment or run a record could not (empty, or over the size limits).
    """
    if not 1 <= level <= MAX_LEVEL or len(data) > MAX_INDEX_BYTES:
        raise Malformed("an index object is over the format's limits")
    if data[: len(MAGIC)] != MAGIC or len(data) < HEADER_BYTES or data[len(MAGIC)] != level:
        raise Malformed("not an index object of the level its reference names")
    body = memoryview(data)[HEADER_BYTES:]
    width = _SEGMENT.size if level == 1 else _RUN.size
    if not body or len(body) % width:
        raise Malformed("an index object's entries are not whole")
    if level == 1:
        segments = tuple(
            chains.Segment(digest.hex(), size) for digest, size in _SEGMENT.iter_unpack(body)
        )
        if any(not 0 < s.size <= chains.MAX_SEGMENT_BYTES for s in segments):
            raise Malformed("an indexed segment is empty or over the size limit")
        return segments
    runs = tuple(
        chains.Run(digest.hex(), size, level - 1, covered)
        for digest, size, covered in _RUN.iter_unpack(body)
    )
    if any(not HEADER_BYTES < r.size <= MAX_INDEX_BYTES or r.bytes < 1 for r in runs):
        raise Malformed("an indexed run is empty or over the size limit")
    return runs


def fold(
    chain: chains.Chain, leaf: int = LEAF_SEGMENTS
) -> tuple[chains.Chain, tuple[tuple[chains.Run, bytes], ...]]:
    """The chain with its inline segments moved into index objects while `leaf` or more of
    them wait, runs of equal level merged; and the new index objects with their bytes.

    Deterministic: the same chain always folds to the same index objects, so a transcript and
    the session file it is the same as fold alike. A chain of fewer than `leaf` inline
    segments and no runs is returned as it is (a short chain stays all inline).

    Raises:
        ValueError: `leaf` is below 2.
    """
    if leaf < 2:
        raise ValueError("an index object groups at least two segments")
    if len(chain.segments) < leaf:
        return chain, ()
    runs, tail = list(chain.runs), list(chain.segments)
    made: list[tuple[chains.Run, bytes]] = []

    def store(data: bytes, level: int, covered: int) -> chains.Run:
        run = chains.Run(hashlib.sha256(data).hexdigest(), len(data), level, covered)
        made.append((run, data))
        return run

    while len(tail) >= leaf:
        group, tail = tail[:leaf], tail[leaf:]
        runs.append(store(encode_segments(group), 1, sum(s.size for s in group)))
        while len(runs) >= 2 and runs[-1].level == runs[-2].level < MAX_LEVEL:
            pair = runs[-2:]
            level = pair[0].level + 1
            runs[-2:] = [store(encode_runs(level, pair), level, pair[0].bytes + pair[1].bytes)]
    return chains.Chain(chain.sha256, chain.size, tuple(tail), tuple(runs)), tuple(made)
