"""Path safety: hostile relative paths and symlinks pointing out are refused; none followed."""

from __future__ import annotations

import os
import pathlib
import stat
from collections.abc import Iterator

import pytest

from services.restorer import paths
from tests.support import trees

HOSTILE = [
    "",
    "/etc/passwd",
    "//etc/passwd",
    "../x",
    "a/../../x",
    "a/..",
    "..",
    ".",
    "a/./b",
    "a//b",
    "a/",
    "a\\b",
    "..\\x",
    "a\x00b",
    "a\nb",
    "a\tb",
    "a\x7fb",
    ".git/config",
    "sub/.git/hooks/pre-commit",
    ".GIT/config",
    ".Git",
]
SAFE = ["a", "a/b.txt", ".gitignore", ".github/workflows/ci.yml", "..a/b", "a..b", "ünï/cödé.txt"]


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


_tree = trees.tree


@pytest.mark.parametrize("relative", HOSTILE)
def test_hostile_forms_are_refused(tmp_path: pathlib.Path, relative: str) -> None:
    """Record paths: no leading `/`, no `..`, no empty segment, no backslash, not under `.git/`."""
    with pytest.raises(paths.UnsafePath):
        paths.check_relative(relative)
    with pytest.raises(paths.UnsafePath):
        paths.safe_join(tmp_path, relative)
    with pytest.raises(paths.UnsafePath):
        paths.write_file_no_follow(tmp_path, relative, b"x", 0o644)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("relative", SAFE)
def test_plain_relative_paths_are_joined(tmp_path: pathlib.Path, relative: str) -> None:
    """A plain relative path lands under the resolved root."""
    assert paths.safe_join(tmp_path, relative) == tmp_path.resolve().joinpath(*relative.split("/"))


def test_an_unsafe_path_message_does_not_name_the_path(tmp_path: pathlib.Path) -> None:
    """A hostile record's values stay out of messages."""
    with pytest.raises(paths.UnsafePath) as raised:
        paths.safe_join(tmp_path, "../secret-name")
    assert "secret-name" not in str(raised.value)


def test_a_symlink_pointing_out_is_refused(tmp_path: pathlib.Path) -> None:
    """An existing symlink on the way that leads outside the root is refused, at any depth."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "deep").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "deep" / "up").symlink_to("../../outside")
    (root / "file-link").symlink_to(outside / "target.txt")
    for relative in ["link/x", "link", "deep/up/x", "file-link"]:
        with pytest.raises(paths.UnsafePath):
            paths.safe_join(root, relative)
        with pytest.raises(paths.UnsafePath):
            paths.write_file_no_follow(root, relative, b"escaped", 0o644)
    assert list(outside.iterdir()) == []


def test_a_symlink_inside_the_root_is_allowed(tmp_path: pathlib.Path) -> None:
    """A symlink that stays inside the root is followed to its real place."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    assert paths.safe_join(tmp_path, "alias/x") == tmp_path.resolve() / "alias" / "x"
    paths.write_file_no_follow(tmp_path, "alias/x", b"inside", 0o644)
    assert (tmp_path / "real" / "x").read_bytes() == b"inside"


def test_the_root_may_be_reached_through_a_symlink(tmp_path: pathlib.Path) -> None:
    """The root itself is resolved first; paths under it are checked against the real root."""
    (tmp_path / "real").mkdir()
    (tmp_path / "root-link").symlink_to(tmp_path / "real")
    paths.write_file_no_follow(tmp_path / "root-link", "a/b", b"ok", 0o600)
    assert (tmp_path / "real" / "a" / "b").read_bytes() == b"ok"


def test_write_sets_exact_modes_and_creates_parents(
    tmp_path: pathlib.Path, loose_umask: None
) -> None:
    """The file gets exactly the record's permission bits and parents get dir_mode."""
    written = paths.write_file_no_follow(tmp_path, "a/b/run.sh", b"#!", 0o755, dir_mode=0o700)
    assert written.read_bytes() == b"#!"
    assert stat.S_IMODE(written.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    paths.write_file_no_follow(tmp_path, "a/b/run.sh", b"again", 0o4777)
    assert stat.S_IMODE(written.stat().st_mode) == 0o777  # no setuid from a record
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["run.sh"]


def test_a_symlink_at_the_final_component_is_replaced_not_followed(tmp_path: pathlib.Path) -> None:
    """The final component is never followed, even when it points inside the root."""
    (tmp_path / "target.txt").write_text("keep")
    (tmp_path / "name").symlink_to("target.txt")
    paths.write_file_no_follow(tmp_path, "name", b"new", 0o644)
    assert (tmp_path / "target.txt").read_text() == "keep"
    assert not (tmp_path / "name").is_symlink()
    assert (tmp_path / "name").read_bytes() == b"new"


def test_a_hard_link_at_the_target_is_not_written_into(tmp_path: pathlib.Path) -> None:
    """Content goes to a new file renamed into place: a hard link's other name keeps its bytes."""
    root, outside = tmp_path / "root", tmp_path / "outside.txt"
    root.mkdir()
    outside.write_text("keep")
    os.link(outside, root / "linked")
    paths.write_file_no_follow(root, "linked", b"new", 0o644)
    assert outside.read_text() == "keep"
    assert (root / "linked").read_bytes() == b"new"


def test_a_parent_that_is_a_file_is_refused(tmp_path: pathlib.Path) -> None:
    """A parent that exists and is not a directory cannot be written under."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(paths.UnsafePath):
        paths.write_file_no_follow(tmp_path, "file/child", b"x", 0o644)
    assert _tree(tmp_path) == {"file": b"x"}


def test_owner_applies_to_the_file_and_created_directories(tmp_path: pathlib.Path) -> None:
    """Written files and the directories created for them can be given to the worker user."""
    owner = (4242, 4343) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    written = paths.write_file_no_follow(tmp_path, "d/f", b"x", 0o600, owner=owner)
    for path in (written, tmp_path / "d"):
        assert (path.stat().st_uid, path.stat().st_gid) == owner


def test_read_refuses_symlinks_and_special_files(tmp_path: pathlib.Path) -> None:
    """Reading never follows a symlink and never blocks on a FIFO."""
    (tmp_path / "real").write_bytes(b"data")
    (tmp_path / "link").symlink_to("real")
    os.mkfifo(tmp_path / "fifo")
    assert paths.read_file_no_follow(tmp_path / "real") == b"data"
    for name in ("link", "fifo"):
        with pytest.raises(paths.UnsafePath):
            paths.read_file_no_follow(tmp_path / name)
