"""A manifest is read in one call sized to its file, never past the size limit.

`folder_files.read_at_most` reads a local store's manifests: sized to the file, it allocates
what the file holds instead of the whole limit. These pin what it returns when stat and the
file disagree (a file longer than stat said is still read to its end, up to the limit plus one
byte, so the caller refuses an oversized manifest as before).
"""

from __future__ import annotations

import io
import os
import pathlib

import pytest

from services.common.checkpoints import folder_files


def _read(path: pathlib.Path, size: int, limit: int) -> bytes:
    with io.FileIO(os.open(path, os.O_RDONLY), "r", closefd=True) as file:
        return folder_files.read_at_most(file, size, limit)


@pytest.mark.parametrize(
    ("length", "limit", "expected"),
    [
        (0, 10, 0),
        (5, 10, 5),
        (10, 10, 10),  # exactly at the limit: whole, and not over it
        (11, 10, 11),  # one over: the caller sees it is over
        (50, 10, 11),  # far over: no more than the limit plus one is read
    ],
)
def test_a_file_is_read_whole_up_to_one_byte_past_the_limit(
    tmp_path: pathlib.Path, length: int, limit: int, expected: int
) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(bytes(range(length)))
    assert _read(path, length, limit) == bytes(range(length))[:expected]


@pytest.mark.parametrize(("stated", "limit", "expected"), [(3, 100, 40), (3, 20, 21), (0, 39, 40)])
def test_a_file_longer_than_stat_said_is_read_on_to_its_end_or_the_limit(
    tmp_path: pathlib.Path, stated: int, limit: int, expected: int
) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(b"x" * 40)
    assert _read(path, stated, limit) == b"x" * expected


def test_a_file_shorter_than_stat_said_is_what_it_holds(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(b"abc")
    assert _read(path, 1000, 10) == b"abc"
