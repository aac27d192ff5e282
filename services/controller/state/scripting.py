"""The one Redis script runner: every mutation of recovery state is one Lua script run here.

Scripts live in `scripts/*.lua`, one per transition. Each is declared once on this side
(`transitions`, `housekeeping`) as a `Call` (or a `Read`, run without the lease): a frozen
dataclass whose fields name the script's keys (`Key`) and arguments (`Arg`) in the order the
script reads them, and whose type parameter is the enum of the statuses it answers. `keys` and
`args` build KEYS and ARGV from it; nothing else indexes them, and a test compares each
declaration with the `KEYS[n]`/`ARGV[n]` its script reads.

Every mutating script is prefixed with `_prelude.lua`, which checks that the lease still names
this holder and epoch before anything else and otherwise writes nothing and returns
`lease_lost`; the runner turns that into `LeaseLost`. Scripts are loaded once (SCRIPT LOAD) and
called by hash (EVALSHA) through redis-py's `register_script`, which reloads a script a
restarted Redis forgot. Two scripts run without the lease: the acquisition that makes a holder,
and `pass_reads` (what a listing pass reads first, in one call), which writes nothing.

The runner counts its writes for the test-only failpoint (`failpoints`), inert unless its
environment variables are set: the end-to-end crash test SIGKILLs a controller process at an
exact write.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.resources
import json
import operator
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final, Generic, TypeVar

import orjson
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from services.common import redis_link
from services.controller.state import codec, failpoints

LEASE_LOST: Final = "lease_lost"
_LEASE_LOST_REPLIES: Final = frozenset({LEASE_LOST, LEASE_LOST.encode()})

_UNGUARDED: Final = frozenset({"lease_acquire", "pass_reads"})
"""Scripts without the lease check: acquiring is what makes a holder, and a read writes
nothing."""

SCRIPT_NAMES: Final = (
    "lease_acquire",
    "lease_renew",
    "lease_release",
    "apply_swarm",
    "fence",
    "release",
    "pend",
    "reoffer",
    "accept",
    "launched",
    "capture",
    "outcome",
    "refusal",
    "request",
    "drop_request",
    "pause",
    "state_lost",
    "settle",
    "absent",
    "listed",
    "restore",
    "pass_reads",
)


S = TypeVar("S", bound=enum.StrEnum)
T = TypeVar("T")


class _Role(enum.Enum):
    KEY = "key"
    KEYS = "keys"
    ARG = "arg"


Key = Annotated[str, _Role.KEY]
"""A field of a `Call` that is one of the script's keys."""
Keys = Annotated[tuple[str, ...], _Role.KEYS]
"""The last key field of a `Call` whose script takes any number of keys after its own."""
Arg = Annotated[T, _Role.ARG]
"""A field of a `Call` that is one of the script's arguments. How it is sent follows from its
value: text and numbers as they are, a boolean as `1`/`0`, None as `''`, anything else as
JSON."""


_ROLES: dict[type, tuple[tuple[str, _Role], ...]] = {}


def _roles(cls: type) -> tuple[tuple[str, _Role], ...]:
    """Each field of a declaration and what it is (worked out once per class: a script call
    is on every write's path)."""
    if cls not in _ROLES:
        hints = typing.get_type_hints(cls, include_extras=True)
        out = []
        for f in dataclasses.fields(cls):
            meta = getattr(hints[f.name], "__metadata__", ())
            roles = [m for m in meta if isinstance(m, _Role)]
            if len(roles) != 1:
                raise TypeError(f"{cls.__name__}.{f.name} is neither a Key, Keys nor an Arg")
            out.append((f.name, roles[0]))
        _ROLES[cls] = tuple(out)
    return _ROLES[cls]


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where a declaration's KEYS and ARGV come from, as getters made once per class."""

    keys: Callable[[Any], tuple[Any, ...]]
    """The `Key` fields' values, in KEYS order."""
    more: str | None
    """The `Keys` field (its keys follow the others), if any."""
    args: Callable[[Any], tuple[Any, ...]]
    """The `Arg` fields' values, in ARGV order."""


_LAYOUTS: dict[type, _Layout] = {}


def _getter(names: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A getter of the named attributes that always answers a tuple."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    return operator.attrgetter(*names)


def _layout(cls: type) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        roles = _roles(cls)
        keys = [name for name, role in roles if role is _Role.KEY]
        more = [name for name, role in roles if role is _Role.KEYS]
        key_order = [name for name, role in roles if role is not _Role.ARG]
        if more and (len(more) > 1 or key_order[-1] != more[0]):
            raise TypeError(f"{cls.__name__}: one Keys field, after every Key")
        args = [name for name, role in roles if role is _Role.ARG]
        layout = _LAYOUTS[cls] = _Layout(_getter(keys), more[0] if more else None, _getter(args))
    return layout


def prepare() -> None:
    """Work out now, for every script declared so far, what its first call works out (its
    fields' roles and getters, its statuses). A controller calls it as it starts (with
    `codec.prepare`): the first failure it handles must not pay for it."""
    for cls in codec.descendants(Declared):
        if dataclasses.is_dataclass(cls) and "script" in vars(cls):
            _layout(cls)
            if issubclass(cls, Call):
                cls.statuses()


def _argument(value: Any) -> str | int:
    if isinstance(value, bool):
        return "1" if value else "0"
    if value is None:
        return ""
    if isinstance(value, str | int):
        return value
    return json.dumps(value)


class Declared:
    """A script's declaration: its fields are its keys and arguments (see the module).

    Subclasses are frozen dataclasses, declared with the script's file name
    (`class Fence(Call[FenceStatus], script="fence")`).
    """

    script: ClassVar[str]
    guarded: ClassVar[bool] = True
    """Run under the lease: KEYS[1..2] and ARGV[1..2] are the lease's, the declared ones
    follow."""

    def __init_subclass__(cls, *, script: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if script:
            cls.script = script

    @classmethod
    def key_names(cls) -> tuple[str, ...]:
        """The declared keys, in KEYS order (a `Keys` field last, standing for any number)."""
        return tuple(name for name, role in _roles(cls) if role is not _Role.ARG)

    @classmethod
    def arg_names(cls) -> tuple[str, ...]:
        """The declared arguments, in ARGV order."""
        return tuple(name for name, role in _roles(cls) if role is _Role.ARG)

    @classmethod
    def takes_more_keys(cls) -> bool:
        return any(role is _Role.KEYS for _, role in _roles(cls))

    def keys(self) -> list[str]:
        """KEYS as the script reads them after the lease's."""
        layout = _layout(type(self))
        out: list[str] = list(layout.keys(self))
        if layout.more is not None:
            out.extend(getattr(self, layout.more))
        return out

    def args(self) -> list[str | int]:
        """ARGV as the script reads them after the lease's."""
        # Text and integers, most arguments, as they are without a call each.
        return [
            value if type(value) is str or type(value) is int else _argument(value)
            for value in _layout(type(self)).args(self)
        ]


class Call(Declared, Generic[S]):
    """A guarded script: it answers a JSON reply whose `status` is one of `S`."""

    _statuses: ClassVar[type[enum.StrEnum]]

    @classmethod
    def statuses(cls) -> type[enum.StrEnum]:
        """The enum of the statuses the script answers (the class's type parameter)."""
        if "_statuses" in cls.__dict__:
            found: type[enum.StrEnum] = cls.__dict__["_statuses"]
            return found
        for klass in cls.__mro__:
            for base in getattr(klass, "__orig_bases__", ()):
                if typing.get_origin(base) is Call:
                    found = typing.get_args(base)[0]
                    cls._statuses = found
                    return found
        raise TypeError(f"{cls.__name__} does not name its statuses")


class Read(Declared):
    """A script run without the lease: a read, or the acquisition that makes a holder."""

    guarded = False


@dataclasses.dataclass(frozen=True)
class Reply(Generic[S]):
    """A guarded script's answer: its status and the rest of its JSON reply."""

    status: S
    fields: Mapping[str, Any]


Guarded = tuple["Call[S]", str, int | None, Sequence[str]]
"""A guarded script to run in a batch (`Scripts.run_all`): the call, the holder, its epoch and
the lease's keys, as `Scripts.run` takes them."""


class LeaseLost(Exception):
    """This controller no longer holds the swarm's lease (or its epoch moved on): it wrote
    nothing and must stop its pass."""


def _source(name: str) -> str:
    folder = importlib.resources.files(__package__).joinpath("scripts")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if name in _UNGUARDED:
        return body
    return folder.joinpath("_prelude.lua").read_text(encoding="utf-8") + "\n" + body


_SOURCES: Final = {name: _source(name) for name in SCRIPT_NAMES}

AfterWrite = Callable[[str, Mapping[str, Any]], None]
"""A test hook called with each script's name and reply after it ran on Redis (it may raise to
simulate a crash right there)."""


def _sending(
    call: Call[S], holder: str, epoch: int | None, lease_keys: Sequence[str]
) -> tuple[list[str], list[str | int], int]:
    """KEYS and ARGV of a guarded call (the lease's first) and its number for the failpoint
    (counted here, before it is sent).

    Raises:
        LeaseLost: this holder never acquired (no epoch): nothing is sent.
    """
    if epoch is None:
        raise LeaseLost(call.script)
    keys = [*lease_keys, *call.keys()]
    failpoint = failpoints.FAILPOINT if call.script not in failpoints.UNCOUNTED else None
    number = failpoint.before_write(call.script, keys[0]) if failpoint is not None else 0
    return keys, [holder, epoch, *call.args()], number


class Scripts:
    """The registered scripts of one Redis client.

    Args:
        client: The Redis client (text or bytes responses both work).
        after_write: Called with the script's name and reply after each guarded script
            ran on Redis.
    """

    def __init__(self, client: redis_link.Client, *, after_write: AfterWrite | None = None) -> None:
        self._client = client
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(source) for name, source in _SOURCES.items()
        }
        self.after_write = after_write

    async def read(self, call: Read) -> Any:
        """Run a script without the lease (not a counted write); its raw reply."""
        return await self._scripts[call.script](keys=call.keys(), args=call.args())

    async def run(
        self, call: Call[S], *, holder: str, epoch: int | None, lease_keys: Sequence[str]
    ) -> Reply[S]:
        """Run a guarded script under the lease and return its typed reply.

        Args:
            call: The script and its keys and arguments.
            holder: This controller's lease holder id.
            epoch: The epoch of its acquisition; None when it never acquired.
            lease_keys: The lease key and the epoch key (KEYS[1] and KEYS[2]).

        Returns:
            The script's status and its JSON reply; lists that Lua left empty come back as
            `[]`.

        Raises:
            LeaseLost: the lease no longer names this holder and epoch; nothing was written.
        """
        keys, args, number = _sending(call, holder, epoch, lease_keys)
        raw = await self._scripts[call.script](keys=keys, args=args)
        return self._reply(call, keys[0], raw, number)

    async def run_all(self, guarded: Sequence[Guarded[S]]) -> list[Reply[S] | Exception]:
        """Run many guarded scripts in one pipeline: one round trip (per Redis node, on a
        Cluster) however many there are, each script still atomic on its own.

        Returns, in order, each call's reply or what it raised: `LeaseLost`, or the Redis
        error of that one call. Scripts Redis does not know (it restarted, or a replica was
        promoted) are loaded and their calls sent again in one more pipeline.

        Raises:
            Exception: the pipeline as a whole failed (Redis unreachable): nothing is known of
                any call.
        """
        out: dict[int, Reply[S] | Exception] = {}
        sent: list[tuple[int, list[str], list[str | int], int]] = []
        pipe = self._client.pipeline(transaction=False)
        for i, (call, holder, epoch, lease_keys) in enumerate(guarded):
            try:
                keys, args, number = _sending(call, holder, epoch, lease_keys)
            except LeaseLost as lost:
                out[i] = lost
                continue
            pipe.evalsha(self._scripts[call.script].sha, len(keys), *keys, *args)
            sent.append((i, keys, args, number))
        raws = list(await pipe.execute(raise_on_error=False)) if sent else []
        again = [k for k, raw in enumerate(raws) if isinstance(raw, NoScriptError)]
        if again:
            # Redis forgot its scripts (restarted, a replica promoted): each loaded once (on
            # every primary of a Cluster), then those calls sent again in one more pipeline,
            # never one by one (a thousand round trips would hold a round up for seconds).
            for name in sorted({guarded[sent[k][0]][0].script for k in again}):
                await self._client.script_load(self._scripts[name].script)
            pipe = self._client.pipeline(transaction=False)
            for k in again:
                i, keys, args, _ = sent[k]
                pipe.evalsha(self._scripts[guarded[i][0].script].sha, len(keys), *keys, *args)
            for k, raw in zip(again, await pipe.execute(raise_on_error=False), strict=True):
                raws[k] = raw
        for (i, keys, _, number), raw in zip(sent, raws, strict=True):
            call = guarded[i][0]
            try:
                if isinstance(raw, Exception):
                    raise raw
                out[i] = self._reply(call, keys[0], raw, number)
            except Exception as exc:
                out[i] = exc
        return [out[i] for i in range(len(guarded))]

    def _reply(self, call: Call[S], lease_key: str, raw: Any, number: int) -> Reply[S]:
        """A guarded script's raw answer as its typed reply (LeaseLost when it wrote nothing
        because the lease moved on)."""
        name = call.script
        if not isinstance(raw, bytes | str):
            raw = str(raw)
        if raw in _LEASE_LOST_REPLIES:
            raise LeaseLost(name)
        # orjson: every write's reply is read here (a storm reads thousands a second).
        reply: dict[str, Any] = orjson.loads(raw)
        # cjson writes an empty Lua table as {}: every list-valued field reads as a list.
        for field in ("events", "admitted", "updated"):
            if reply.get(field) == {}:
                reply[field] = []
        failpoint = failpoints.FAILPOINT if name not in failpoints.UNCOUNTED else None
        if failpoint is not None:
            failpoint.after_write(number, name, lease_key, reply)
        if self.after_write is not None:
            self.after_write(name, reply)
        status: S = typing.cast(S, call.statuses()(reply["status"]))
        return Reply(status, reply)
