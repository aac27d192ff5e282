"""The storage port: scopes, safe names, and the upload check every backend shares."""

from __future__ import annotations

import hashlib

import pytest

from services.common.checkpoints import storing


def test_the_scope_prefix_scopes_paths_by_swarm_task_and_task_generation() -> None:
    """The task generation is checked against the store's scope, which also scopes paths."""
    assert storing.StoreScope("example", "t-eng-2", 1).prefix == "example/t-eng-2/1"


@pytest.mark.parametrize(
    ("swarm", "task_id", "generation"),
    [
        ("..", "t", 1),
        ("a/b", "t", 1),
        ("", "t", 1),
        ("s", ".hidden", 1),
        ("s", "t\n", 1),
        ("s", "x" * 129, 1),
        ("s", "t", -1),
        ("s", "t", True),
        ("s", "t", "1"),
    ],
)
def test_an_unsafe_scope_is_refused(swarm: str, task_id: str, generation: object) -> None:
    """Every scope component is a safe name or a non-negative generation."""
    with pytest.raises(ValueError, match="scope"):
        storing.StoreScope(swarm, task_id, generation)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["A" * 64, "a" * 63, "../" + "a" * 61, "a" * 64 + "\n", 5])
def test_object_names_are_64_lowercase_hex(name: object) -> None:
    """Object names must match ^[0-9a-f]{64}$, else InvalidName."""
    with pytest.raises(storing.InvalidName):
        storing.check_object_name(name)


@pytest.mark.parametrize("name", ["../x", "x/y", ".x", "", "x" * 129, "ckpt-7\n"])
def test_checkpoint_ids_are_safe_names(name: str) -> None:
    """Checkpoint ids must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, else InvalidName."""
    with pytest.raises(storing.InvalidName):
        storing.check_checkpoint_id(name)


def test_the_upload_check_accepts_exact_bytes() -> None:
    """An upload passes when its size and hash match what it declared."""
    data = b"hello world"
    check = storing.UploadCheck(hashlib.sha256(data).hexdigest(), len(data), 100)
    check.feed(data[:5])
    check.feed(data[5:])
    check.finish()


def test_the_upload_check_refuses_mismatches() -> None:
    """A wrong hash, a short or a long stream, or an oversize declaration is refused."""
    data = b"hello world"
    digest = hashlib.sha256(data).hexdigest()
    with pytest.raises(storing.ObjectTooLarge):
        storing.UploadCheck(digest, len(data), len(data) - 1)
    long = storing.UploadCheck(digest, len(data), 100)
    with pytest.raises(storing.ObjectCorrupt):
        long.feed(data + b"!")
    short = storing.UploadCheck(digest, len(data), 100)
    short.feed(data[:-1])
    with pytest.raises(storing.ObjectCorrupt):
        short.finish()
    wrong = storing.UploadCheck("0" * 64, len(data), 100)
    wrong.feed(data)
    with pytest.raises(storing.ObjectCorrupt):
        wrong.finish()
    assert issubclass(storing.ObjectCorrupt, storing.StoreError)
