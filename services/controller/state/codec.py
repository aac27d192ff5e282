"""One codec for every record kept as a Redis hash: dataclass fields <-> text hash fields.

Pure: no Redis here. In Redis every record is a hash of text fields (a missing field is
absent), so a Lua script can read and set one field without decoding a document. How a field is
written follows from its type; the few exceptions are named in its metadata (`meta`):

- `str` (and identifier `NewType`s) as is; `int` in decimal; `bool` as `1`/`0`; a `StrEnum` as
  its value; an optional field absent when None (an empty value reads back as None);
- a `Directive` flattened into `directive.recovery`, `directive.checkpoint_id`, … (checked
  first: a directive whose fields disagree is never written);
- anything else (tuples, mappings, JSON records with `to_json`/`from_json`) as JSON.

Empty values are left out of the hash (a record's absent field and empty field read alike),
unless the record keeps them (`Hashed`'s `keep_empty`). These are the encodings the Lua scripts
read and write, so they are the stored format: change none of them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

import orjson

from services.common import directives

Hash = Mapping[str, str]

_META = "hash_codec"

_NO_VALUE: Any = object()
"""No `missing` value: a hash without the field is read as the field's type says."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """How one dataclass field is kept in a hash (see `meta`)."""

    name: str | None = None
    missing: Any = _NO_VALUE
    blank: bool = False
    encode: Callable[[Any], Mapping[str, str]] | None = None
    decode: Callable[[Hash], Any] | None = None
    sort_keys: bool = False


def meta(
    *,
    name: str | None = None,
    missing: Any = _NO_VALUE,
    blank: bool = False,
    encode: Callable[[Any], Mapping[str, str]] | None = None,
    decode: Callable[[Hash], Any] | None = None,
    sort_keys: bool = False,
) -> dict[str, Spec]:
    """The metadata of a record field kept in its hash other than by its type alone
    (`dataclasses.field(metadata=codec.meta(...))`).

    Args:
        name: The hash field, when it is not the dataclass field's name.
        missing: The value when the hash lacks the field (a record written before it existed).
        blank: An empty value is written and reads back as the empty string, not None.
        encode: Writes the value as hash fields (any number of them).
        decode: Reads the value from the whole hash.
        sort_keys: JSON written with sorted keys.
    """
    return {_META: Spec(name, missing, blank, encode, decode, sort_keys)}


def text_hash(raw: Mapping[bytes | str, bytes | str]) -> dict[str, str]:
    """A hash as redis-py returns it (bytes or text) with text keys and values."""
    try:
        # A bytes client's answer (the controller's): every key and value is bytes.
        return {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]
    except AttributeError:
        return {_text(k): _text(v) for k, v in raw.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def directive_fields(d: directives.Directive) -> dict[str, str]:
    """A directive as flat execution fields, checked first: a disagreeing one is never written."""
    directives.checked(d)
    out: dict[str, str] = {"directive.recovery": d.recovery.value}
    for name, value in (
        ("checkpoint_id", d.checkpoint_id),
        ("session_id", d.session_id),
        ("watermark", d.watermark),
    ):
        if value is not None and value != "":
            out[f"directive.{name}"] = str(value)
    return out


def directive(h: Hash) -> directives.Directive:
    """The directive an execution's flat fields hold (fresh when they hold none)."""
    watermark = h.get("directive.watermark")
    return directives.checked(
        directives.Directive(
            checkpoint_id=h.get("directive.checkpoint_id") or None,
            recovery=directives.Continuity(h.get("directive.recovery") or "fresh"),
            session_id=h.get("directive.session_id") or None,
            watermark=int(watermark) if watermark else None,
        )
    )


@dataclasses.dataclass(frozen=True)
class _Field:
    attr: str
    key: str
    kind: Any
    optional: bool
    spec: Spec
    default: Any


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """The type a hint names, and whether None is allowed."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return hint, False


def _base(kind: Any) -> Any:
    while hasattr(kind, "__supertype__"):  # a NewType
        kind = kind.__supertype__
    return kind


_FIELDS: dict[type, tuple[_Field, ...]] = {}


def _fields(cls: type) -> tuple[_Field, ...]:
    """How each field of a record class is kept (worked out once per class)."""
    if cls in _FIELDS:
        return _FIELDS[cls]
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_META, Spec())
        kind, optional = _unwrap(hints[f.name])
        out.append(_Field(f.name, spec.name or f.name, _base(kind), optional, spec, f.default))
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def encode(record: Any, *, keep_empty: bool = False) -> dict[str, str]:
    """A record's hash fields."""
    out: dict[str, str] = {}
    for f in _fields(type(record)):
        value = getattr(record, f.attr)
        kind = type(value)
        # The common cases first, by exact type (a storm encodes thousands of records).
        if kind is str and f.spec.encode is None:
            if value or keep_empty or f.spec.blank:
                out[f.key] = value
        elif kind is int and f.spec.encode is None:
            out[f.key] = str(value)
        elif f.spec.encode is not None:
            out.update(f.spec.encode(value))
        elif f.kind is directives.Directive:
            if value is not None:
                out.update(directive_fields(value))
        elif value is None or (value == "" and not (keep_empty or f.spec.blank)):
            continue
        else:
            out[f.key] = _encoded(f, value)
    return out


def _encoded(f: _Field, value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, str | int):
        return str(value)
    return json.dumps(_jsonable(value), sort_keys=f.spec.sort_keys)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


def decode(cls: type[Any], h: Hash) -> Any:
    """A record read from its hash fields.

    Raises:
        KeyError: a field the record cannot do without is missing.
        ValueError: a field does not hold what its type allows.
    """
    decoder = _DECODERS.get(cls) or _decoder(cls)
    return decoder(h)


_DECODERS: dict[type, Callable[[Hash], Any]] = {}
"""Each record class's reader, made once (`_compiled_decoder`): a storm decodes thousands of
records, and every failure's path decodes half a dozen."""


def _decoder(cls: type) -> Callable[[Hash], Any]:
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = _compiled_decoder(cls)
    return decoder


def prepare() -> None:
    """Work out now, for every record class defined so far, what `encode` and `decode` work
    out on their first use of it (its fields' types, its reader: a few milliseconds in all).
    A controller calls it as it starts: the first failure it handles must not pay for it."""
    for cls in descendants(Hashed):
        if dataclasses.is_dataclass(cls):
            _decoder(cls)


def descendants(base: type) -> list[type]:
    """Every class defined so far that derives from `base`, however far down."""
    found: list[type] = []
    below: list[type] = base.__subclasses__()
    while below:
        cls = below.pop()
        if cls not in found:
            found.append(cls)
            below.extend(cls.__subclasses__())
    return found


def _compiled_decoder(cls: type) -> Callable[[Hash], Any]:
    """One function reading a whole record of `cls`, made once per class, as `dataclasses`
    makes `__init__`: each field's present, non-empty value is taken in line (text as is, an
    integer by `int`, a boolean as `1`, anything else by its converter); an absent field takes
    the value `_absent` gives it, worked out once; only an empty or false value (or an absent
    field the record cannot do without) calls the field's `_falsy`. The generated text holds
    nothing but names and the hash keys' reprs; every value it uses is passed in."""
    names: dict[str, Any] = {"_cls": cls}
    lines = ["def decode(h):", "    get = h.get"]
    values = []
    for i, f in enumerate(_fields(cls)):
        value = f"v{i}"
        values.append(value)
        if f.spec.decode is not None:
            names[f"d{i}"] = f.spec.decode
            lines.append(f"    {value} = d{i}(h)")
            continue
        if f.kind is directives.Directive:
            names[f"d{i}"] = _directive_reader(f.optional)
            lines.append(f"    {value} = d{i}(h)")
            continue
        convert = None if f.kind is str else _converter(f.kind)
        names[f"z{i}"] = _falsy_reader(f, convert)
        if f.kind is str:
            present = "r"
        elif f.kind is int:
            present = "int(r)"
        elif f.kind is bool:
            present = "r == '1'"
        else:
            names[f"c{i}"] = convert
            present = f"c{i}(r)"
        lines.append(f"    r = get({f.key!r})")
        try:
            # What an absent field reads as, worked out now when that is a value.
            names[f"a{i}"] = _absent(f, None)
        except KeyError:
            lines.append(f"    {value} = {present} if r else z{i}(r)")
        else:
            lines.append(f"    {value} = {present} if r else a{i} if r is None else z{i}(r)")
    # Positionally, in field order: every record field is an `__init__` parameter.
    lines.append(f"    return _cls({', '.join(values)})")
    exec("\n".join(lines), names)  # noqa: S102 (text made above from field names only)
    decoder: Callable[[Hash], Any] = names["decode"]
    return decoder


def _directive_reader(optional: bool) -> Callable[[Hash], Any]:
    def read_directive(h: Hash) -> Any:
        if optional and not h.get("directive.recovery"):
            return None
        return directive(h)

    return read_directive


def _falsy_reader(f: _Field, convert: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    def read_falsy(raw: Any) -> Any:
        return _falsy(f, raw, convert)

    return read_falsy


def _converter(kind: Any) -> Callable[[str], Any]:
    """How a present, non-empty text value of a field of type `kind` is read."""
    if kind is bool:
        return _is_one
    if kind is int:
        return int
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        # A member looked up by its value without the enum's call machinery; anything else
        # goes through it (and is refused there as before).
        members: dict[Any, Any] = {m.value: m for m in kind}
        enum_kind = kind

        def member(raw: str) -> Any:
            try:
                return members[raw]
            except (KeyError, TypeError):
                return enum_kind(raw)

        return member
    from_json = _json_reader(kind)

    def read_json(raw: str) -> Any:
        return from_json(orjson.loads(raw))

    return read_json


def _is_one(raw: str) -> bool:
    return raw == "1"


def _falsy(f: _Field, raw: Any, convert: Callable[[Any], Any] | None) -> Any:
    """A value that is not a present, non-empty text: absent or empty, or a false value a
    script's JSON reply holds (0, false), which is read as any other."""
    if raw is None or raw == "":
        return _absent(f, raw)
    return raw if convert is None else convert(raw)


def _absent(f: _Field, raw: str | None) -> Any:
    """A field the hash lacks (None) or holds empty ("")."""
    if raw == "" and f.kind is str and (f.spec.blank or not f.optional):
        return raw
    if f.optional:
        return None
    if f.spec.missing is not _NO_VALUE:
        return f.spec.missing
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.kind is bool:
        return False
    if raw is None:
        raise KeyError(f.key)
    raise ValueError(f"{f.key} is empty")


def _json_reader(kind: Any) -> Callable[[Any], Any]:
    """How a field of type `kind` is made from its loaded JSON (worked out once per field): a
    tuple item by item, a record by its `from_json`, anything else as loaded."""
    if typing.get_origin(kind) is tuple:
        item = _json_reader(typing.get_args(kind)[0])
        return lambda loaded: tuple(item(v) for v in loaded)
    if hasattr(kind, "from_json"):
        from_json: Callable[[Any], Any] = kind.from_json
        return from_json
    return lambda loaded: loaded


class Hashed:
    """A record kept as a Redis hash through this codec (see the module)."""

    keep_empty: ClassVar[bool] = False
    """Write empty text fields too (a record whose every field is always present)."""

    def to_hash(self) -> dict[str, str]:
        return encode(self, keep_empty=self.keep_empty)

    @classmethod
    def from_hash(cls, h: Hash) -> Self:
        decoded: Self = decode(cls, h)
        return decoded
