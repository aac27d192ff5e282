"""Each Lua script is declared once on the Python side (`transitions`): its keys and arguments
by name, in the order the script reads them. These tests read the scripts' text, so a script
that reads a key or argument its declaration does not name (or the other way round) fails
here instead of in Redis."""

from __future__ import annotations

import importlib.resources
import re

import pytest

from services.controller.state import housekeeping, scripting, transitions

DECLARED = {call.script: call for call in (*transitions.GUARDED, *transitions.UNGUARDED)}


def _text(name: str) -> str:
    folder = importlib.resources.files(scripting.__package__).joinpath("scripts")
    return folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")


def _used(name: str, table: str) -> set[int]:
    """The literal indexes the script's own code (comments left out) reads of KEYS or ARGV."""
    code = "\n".join(line.split("--", 1)[0] for line in _text(name).splitlines())
    return {int(n) for n in re.findall(rf"{table}\[(\d+)\]", code)}


def _documented(name: str, table: str) -> set[int]:
    """The indexes the script's header comment explains (`-- KEYS[3] seat, [4] …;
    ARGV[3] …`): each `[n]` or `[n..m]` belongs to the table last named before it."""
    header = []
    for line in _text(name).splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    found: set[int] = set()
    current = None
    for named, first, last in re.findall(r"(KEYS|ARGV)?\[(\d+)(?:\.\.(\d+))?\]", " ".join(header)):
        current = named or current
        if current == table:
            found |= set(range(int(first), int(last or first) + 1))
    return found


def _own(call: type[scripting.Declared], count: int) -> set[int]:
    first = 3 if call.guarded else 1
    return set(range(first, first + count))


def _fixed_keys(call: type[scripting.Declared]) -> tuple[str, ...]:
    names = call.key_names()
    return names[:-1] if call.takes_more_keys() else names


def test_every_script_is_declared_once() -> None:
    """One declaration per script file, and the runner loads exactly those."""
    assert sorted(DECLARED) == sorted(scripting.SCRIPT_NAMES)
    assert len(DECLARED) == len(transitions.GUARDED) + len(transitions.UNGUARDED)
    assert {c.script for c in transitions.UNGUARDED} == set(scripting._UNGUARDED)


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_a_script_reads_exactly_the_keys_and_arguments_declared(name: str) -> None:
    """Every declared key and argument is read by the script at the place its declaration
    gives it, and the script reads none beyond (KEYS and ARGV 1 and 2 are the lease's in a
    guarded script; a script taking any number of keys reads those past its own by offset)."""
    call = DECLARED[name]
    lease = {1, 2} if call.guarded else set()
    assert _used(name, "KEYS") - lease == _own(call, len(_fixed_keys(call))), call.key_names()
    assert _used(name, "ARGV") - lease == _own(call, len(call.arg_names())), call.arg_names()


@pytest.mark.parametrize("name", sorted(n for n in DECLARED if n != "lease_release"))
def test_a_script_header_explains_each_key_and_argument(name: str) -> None:
    """The header comment a reader of the script relies on lists the same places."""
    call = DECLARED[name]
    lease = {1, 2} if call.guarded else set()
    assert _documented(name, "KEYS") - lease == _own(call, len(_fixed_keys(call)))
    assert _documented(name, "ARGV") - lease == _own(call, len(call.arg_names()))


def test_a_call_builds_keys_and_arguments_in_declared_order() -> None:
    """KEYS and ARGV come from the fields in order; values are sent as the scripts read
    them: booleans as 1/0, None as '', lists and mappings as JSON."""
    call = housekeeping.Listed(
        expected="x:expected", refusals=("x:r1", "x:r2"), again=["e1"], finished=[]
    )
    assert call.keys() == ["x:expected", "x:r1", "x:r2"]
    assert call.args() == ['["e1"]', "[]"]
    settle = housekeeping.Settle(attention="a", seat="s", execution="e", fence="f", fenced=True)
    assert (settle.keys(), settle.args()) == (["a", "s", "e", "f"], ["1"])
    capture = transitions.Capture(
        seat="s",
        execution="e",
        execution_id="x.s.1",
        credential_id="c",
        generation=1,
        session_id=None,
        archive_watermark=0,
        checkpoint_id="",
        at="t",
        final=False,
    )
    assert capture.args() == ["x.s.1", "c", 1, "", 0, "", "t", "0"]
    assert transitions.Capture.statuses() is transitions.CaptureStatus


def test_prepared_scripts_work_nothing_out_on_their_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`scripting.prepare` (a controller's start) works out every declared script's keys and
    arguments beforehand: a first call reads no type hints (they cost the first failure a
    controller handles milliseconds)."""
    monkeypatch.setattr(scripting, "_ROLES", {})
    monkeypatch.setattr(scripting, "_LAYOUTS", {})
    scripting.prepare()
    assert set(DECLARED.values()) <= set(scripting._LAYOUTS)

    def read_hints(*_: object, **__: object) -> None:
        raise AssertionError("type hints read on a script's first call")

    monkeypatch.setattr(scripting.typing, "get_type_hints", read_hints)
    settle = housekeeping.Settle(attention="a", seat="s", execution="e", fence="f", fenced=True)
    assert (settle.keys(), settle.args()) == (["a", "s", "e", "f"], ["1"])
