"""The launch record: parsed directive first, typed, grants kept out of every repr.

Spec: "The replacement's launch record carries a restore directive with four fields:
checkpoint_id, recovery (native, reconstructed or fresh), session_id (set only for native) and
watermark. A directive whose fields disagree, for example a fresh directive naming a checkpoint,
is refused as malformed."
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from agentihooks.swarm.v2 import recovery_pb2, types_pb2

from services.common import directives, errors
from services.restorer import launching

C = directives.Continuity


def _raw(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "scope": {
            "swarm": "example",
            "seat": "eng-2",
            "task_id": "t-eng-2",
            "task_generation": 1,
            "execution_id": "e-43",
            "execution_generation": 4,
        },
        "directive": {
            "checkpoint_id": "ckpt-7",
            "recovery": "native",
            "session_id": "s-1",
            "watermark": 412,
        },
        "registration": {
            "projects": [{"name": "app", "repository": "https://git.example/app.git"}],
            "worker_image": "registry.local/agent-worker:1.4.2",
            "harness": "claude_code",
        },
        "restores_from_generation": 3,
        "restore_grant": "eyJhbGciOiJIUzI1NiJ9.read-grant.sig",
        "capture_grant": "eyJhbGciOiJIUzI1NiJ9.write-grant.sig",
        "command": ["claude", "--model", "opus"],
        "checkpoint_remote": False,
        "store_addr": "",
    }
    raw.update(changes)
    return raw


def test_a_launch_record_parses_into_its_typed_form() -> None:
    """The four directive fields, the scope, the registration and the command."""
    record = launching.parse(_raw())
    assert record.directive == directives.Directive("ckpt-7", C.NATIVE, "s-1", 412)
    assert record.scope == launching.Scope("example", "eng-2", "t-eng-2", 1, "e-43", 4)
    assert record.projects == (launching.Project("app", "https://git.example/app.git"),)
    assert record.project("app") is not None and record.project("web") is None
    assert record.command == ("claude", "--model", "opus")
    assert record.store_addr is None and record.restores_from_generation == 3
    assert launching.parse(launching.to_json(record)) == record


def test_grants_never_appear_in_a_repr() -> None:
    """Secrets never reach logs: the record's repr holds no grant."""
    text = repr(launching.parse(_raw()))
    assert "read-grant" not in text and "write-grant" not in text


@pytest.mark.parametrize(
    ("directive", "why"),
    [
        ({"checkpoint_id": "ckpt-7", "recovery": "fresh"}, "a fresh directive names a checkpoint"),
        ({"recovery": "fresh", "watermark": 3}, "a fresh directive names a watermark"),
        (
            {"checkpoint_id": "c", "recovery": "native", "watermark": 1},
            "a native directive names no session",
        ),
        (
            {"recovery": "reconstructed", "watermark": 1},
            "a reconstructed directive names no checkpoint",
        ),
        (
            {"checkpoint_id": "c", "recovery": "reconstructed"},
            "a reconstructed directive has no watermark",
        ),
        ({"recovery": "resume"}, "unknown recovery kind"),
        ({"recovery": "native", "checkpoint_id": 7}, "checkpoint_id is not text"),
    ],
)
def test_a_directive_whose_fields_disagree_is_malformed_before_anything_else(
    directive: dict[str, Any], why: str
) -> None:
    """The directive is checked first: even a record whose other fields are broken is refused
    for its directive, as `malformed directive: …`, which names no values."""
    raw = _raw(directive=directive, scope=None, command="not a list", checkpoint_remote=True)
    with pytest.raises(launching.MalformedDirective) as raised:
        launching.parse(raw)
    assert raised.value.reason == f"malformed directive: {why}"
    assert isinstance(raised.value, errors.Malformed)
    assert raised.value.checkpoint_remote is True


def test_a_record_without_a_directive_is_malformed() -> None:
    """No directive at all is a malformed directive too."""
    raw = _raw()
    del raw["directive"]
    with pytest.raises(launching.MalformedDirective):
        launching.parse(raw)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"scope": None}, "scope"),
        ({"command": []}, "command is empty"),
        ({"command": ["claude", 3]}, "command"),
        ({"checkpoint_remote": "yes"}, "checkpoint_remote"),
        ({"restores_from_generation": -1}, "restores_from_generation"),
        ({"registration": {"projects": "app", "harness": "claude_code"}}, "projects"),
        ({"continuation_prompt": ["go on"]}, "continuation_prompt is not text"),
        ({"continuation_prompt": 7}, "continuation_prompt is not text"),
    ],
)
def test_other_broken_fields_name_the_field_not_the_value(
    change: dict[str, Any], field: str
) -> None:
    """A launch record that cannot be used is refused naming the field."""
    with pytest.raises(launching.MalformedLaunchRecord) as raised:
        launching.parse(_raw(**change))
    assert raised.value.reason.startswith("malformed launch record: ")
    assert field in raised.value.reason


def test_the_continuation_prompt_is_optional_and_round_trips() -> None:
    """The swarm's continuation prompt rides along; absent, empty or null it is unset (the
    restorer's default applies), and to_json writes what parse reads."""
    prompt = "The conversation was restored; carry on with the task."
    record = launching.parse(_raw(continuation_prompt=prompt))
    assert record.continuation_prompt == prompt
    assert launching.to_json(record)["continuation_prompt"] == prompt
    assert launching.parse(launching.to_json(record)) == record
    assert record != launching.parse(_raw())
    for unset in ({}, {"continuation_prompt": ""}, {"continuation_prompt": None}):
        assert launching.parse(_raw(**unset)).continuation_prompt == ""
    bare = launching.parse(_raw())
    assert launching.parse(launching.to_json(bare)) == bare


def test_the_mounted_file_is_read(tmp_path: pathlib.Path) -> None:
    """`AGENTIHOOKS_LAUNCH_RECORD` names a JSON file (tests, the local runtime)."""
    path = tmp_path / "launch.json"
    path.write_text(json.dumps(_raw()))
    assert launching.read_file(path).directive.checkpoint_id == "ckpt-7"
    with pytest.raises(launching.MalformedLaunchRecord):
        launching.read_file(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(launching.MalformedLaunchRecord):
        launching.read_file(path)


def test_the_message_form_parses_like_the_json_form() -> None:
    """Recovery.GetLaunchRecord's message gives the same record; an unset recovery enum is an
    unknown recovery kind, and an absent watermark stays absent."""
    message = recovery_pb2.LaunchRecord(
        scope=types_pb2.AttemptScope(
            swarm="example",
            seat="eng-2",
            task_id="t-eng-2",
            task_generation=1,
            execution_id="e-43",
            execution_generation=4,
        ),
        directive=types_pb2.RestoreDirective(
            checkpoint_id="ckpt-7",
            recovery=types_pb2.CONTINUITY_NATIVE,
            session_id="s-1",
            watermark=412,
        ),
        registration=types_pb2.Registration(
            projects=[types_pb2.Project(name="app", repository="https://git.example/app.git")],
            worker_image="registry.local/agent-worker:1.4.2",
            harness="claude_code",
        ),
        restores_from_generation=3,
        restore_grant="eyJhbGciOiJIUzI1NiJ9.read-grant.sig",
        capture_grant="eyJhbGciOiJIUzI1NiJ9.write-grant.sig",
        command=["claude", "--model", "opus"],
    )
    assert launching.from_pb(message) == launching.parse(_raw())
    message.continuation_prompt = "carry on"
    assert launching.from_pb(message) == launching.parse(_raw(continuation_prompt="carry on"))
    message.directive.recovery = types_pb2.CONTINUITY_UNSPECIFIED
    with pytest.raises(launching.MalformedDirective, match="unknown recovery kind"):
        launching.from_pb(message)
    fresh = recovery_pb2.LaunchRecord()
    fresh.CopyFrom(message)
    fresh.directive.Clear()
    fresh.directive.recovery = types_pb2.CONTINUITY_FRESH
    assert launching.from_pb(fresh).directive == directives.FRESH
