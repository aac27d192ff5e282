"""The checkpoint schema document: one JSON Schema 2020-12 for versions 1 and 2."""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from services.common.checkpoints import record_schema

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOC = ROOT / "docs/swarm-v2/schemas/checkpoint.json"
COPY = ROOT / "services/common/checkpoints/checkpoint.schema.json"


def test_the_run_time_copy_is_byte_identical_to_the_documented_schema() -> None:
    """Checkpoints are described by docs/swarm-v2/schemas/checkpoint.json; the code loads a
    byte-identical copy."""
    assert COPY.read_bytes() == DOC.read_bytes()


def test_the_schema_is_a_valid_2020_12_schema() -> None:
    """The format is JSON Schema 2020-12."""
    schema = json.loads(DOC.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert record_schema.load_schema() == schema


def _fields(node: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for name, value in node.get("properties", {}).items():
            yield f"{where}.{name}", value
        for key, value in node.items():
            yield from _fields(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _fields(value, f"{where}[{index}]")


def test_every_field_is_described() -> None:
    """Every field of the record is documented with a description."""
    schema = json.loads(DOC.read_text())
    definitions = schema["$defs"]
    undocumented = []
    for where, field in _fields(schema):
        if "/if" in where:
            continue  # conditions only select a branch; the fields are described elsewhere
        target = field
        if "description" not in field and "$ref" in field:
            target = definitions[field["$ref"].rsplit("/", 1)[1]]
        if "description" not in target:
            undocumented.append(where)
    assert undocumented == []


PATHS_OK = ["a", "notes/todo.txt", "projects/-work-app/x.jsonl", ".gitignore", "a/.github/x"]
PATHS_REFUSED = [
    "",
    "/etc/passwd",
    "../x",
    "a/../../x",
    "a/..",
    "./a",
    "a//b",
    "a/",
    "a\\b",
    ".git/config",
    "x/.git/hooks/pre-commit",
    ".GIT/config",
    ".git",
    "a\n",
    "a\x00b",
]


@pytest.mark.parametrize("path", PATHS_OK)
def test_relative_posix_paths_are_accepted(path: str) -> None:
    """Paths are relative POSIX paths."""
    pattern = json.loads(DOC.read_text())["$defs"]["relative_path"]["pattern"]
    assert re.search(pattern, path)


@pytest.mark.parametrize("path", PATHS_REFUSED)
def test_unsafe_paths_are_refused(path: str) -> None:
    """No leading /, no .. segment, no empty segment, no backslash, not under .git/."""
    pattern = json.loads(DOC.read_text())["$defs"]["relative_path"]["pattern"]
    assert not re.search(pattern, path)
