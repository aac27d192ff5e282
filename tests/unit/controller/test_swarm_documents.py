"""The swarm document: YAML or JSON, validated by docs/swarm-v2/schemas/swarm.json, master
credentials hashed while parsing."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest
import yaml

from services.common import errors, tokens
from services.controller import swarms
from services.controller.state import records

ROOT = pathlib.Path(__file__).resolve().parents[3]
SECRET = "a-master-secret-that-is-long"


def doc(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "swarm": "example",
        "worker_image": "registry.local/agent-worker:1.4.2",
        "harness": "claude_code",
        "command": ["claude"],
        "projects": [{"name": "app", "repository": "https://git.example/app.git"}],
        "masters": [{"agent": "master@example-1", "credential": SECRET}],
        "accounts": [{"name": "acct", "slots": 2}],
        "seats": [
            {"seat": "eng-1", "task": {"text": "one"}},
            {
                "seat": "eng-2",
                "legacy_spawn": True,
                "task": {"id": "t-2", "text": "two", "awaiting": "review"},
            },
        ],
    }
    base.update(changes)
    return base


def test_docs_schema_and_packaged_copy_are_identical() -> None:
    """The schema lives in docs/ with an identical packaged copy."""
    docs = (ROOT / "docs/swarm-v2/schemas/swarm.json").read_bytes()
    packaged = (ROOT / "services/controller/swarm.schema.json").read_bytes()
    assert docs == packaged


def test_yaml_and_json_parse_alike_and_only_hashes_remain() -> None:
    """A swarm is declared from a document, YAML or JSON; masters are stored only as hashes."""
    from_json = swarms.parse(json.dumps(doc()))
    from_yaml = swarms.parse(yaml.safe_dump(doc()))
    assert from_json == from_yaml
    assert from_json.masters == {"master@example-1": tokens.hash_secret(SECRET)}
    assert SECRET not in repr(from_json)
    assert [s.task_id for s in from_json.seats] == ["t-eng-1", "t-2"]
    assert [s.legacy_spawn for s in from_json.seats] == [False, True]
    assert from_json.config.restore_automation is True


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"swarm": "Bad_Name"}, "swarm"),
        ({"harness": "vim"}, "harness"),
        ({"seats": []}, "seats"),
        ({"masters": [{"agent": "m", "credential": "short"}]}, "masters/0/credential"),
        (
            {"seats": [{"seat": "eng-1", "task": {"text": "t", "awaiting": "recovery_pending"}}]},
            "seats/0/task/awaiting",
        ),
        ({"unknown": 1}, "top level"),
        ({"accounts": [{"name": "acct", "slots": 0}]}, "accounts/0/slots"),
        ({"continuation_prompt": ""}, "continuation_prompt"),
        ({"continuation_prompt": "x" * 8193}, "continuation_prompt"),
        ({"continuation_prompt": 3}, "continuation_prompt"),
    ],
)
def test_schema_refusals_name_where_never_the_value(changes: dict[str, object], where: str) -> None:
    """A document the schema refuses is malformed; the message never echoes a value (it may be
    a credential)."""
    with pytest.raises(errors.Malformed) as caught:
        swarms.parse(doc(**changes))
    assert caught.value.reason == "malformed_document"
    assert where in caught.value.message
    assert "short" not in caught.value.message


def test_the_continuation_prompt_is_optional_and_kept_in_the_config() -> None:
    """The swarm's continuation prompt (at most 8192 characters) reaches its config and the
    config's hash; unset it is empty, and a hash written before the field existed reads as
    unset."""
    prompt = "The conversation was restored after a failure.\nContinue your task."
    config = swarms.parse(yaml.safe_dump(doc(continuation_prompt=prompt))).config
    assert config.continuation_prompt == prompt
    assert records.SwarmConfig.from_hash(config.to_hash()) == config
    assert swarms.parse(doc(continuation_prompt="x" * 8192)).config.continuation_prompt
    unset = swarms.parse(doc()).config
    assert unset.continuation_prompt == ""
    assert records.SwarmConfig.from_hash(unset.to_hash()) == unset
    older = {k: v for k, v in config.to_hash().items() if k != "continuation_prompt"}
    assert records.SwarmConfig.from_hash(older) == dataclasses.replace(
        config, continuation_prompt=""
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"seats": [{"seat": "a", "task": {"text": "x"}}, {"seat": "a", "task": {"text": "y"}}]},
        {"accounts": [{"name": "acct", "slots": 1}]},
        {"masters": [{"agent": "m", "credential": SECRET}, {"agent": "m", "credential": SECRET}]},
    ],
)
def test_cross_field_rules(changes: dict[str, object]) -> None:
    """Duplicate seats or masters, or fewer account slots than seats, are refused."""
    with pytest.raises(errors.Malformed):
        swarms.parse(doc(**changes))


def test_not_yaml_is_malformed() -> None:
    """A document that does not parse is malformed, with no detail of its content."""
    with pytest.raises(errors.Malformed, match="not YAML or JSON"):
        swarms.parse("seats: [unclosed")
