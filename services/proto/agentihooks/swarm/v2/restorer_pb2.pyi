from agentihooks.swarm.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RestoreRequest(_message.Message):
    __slots__ = ("worktree",)
    WORKTREE_FIELD_NUMBER: _ClassVar[int]
    worktree: str
    def __init__(self, worktree: _Optional[str] = ...) -> None: ...

class RestoreStep(_message.Message):
    __slots__ = ("step", "status")
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    step: str
    status: str
    def __init__(self, step: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class RestoreReady(_message.Message):
    __slots__ = ("recovery", "command", "checkpoint_id", "watermark", "cwd", "stdin_path")
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    STDIN_PATH_FIELD_NUMBER: _ClassVar[int]
    recovery: _types_pb2.Continuity
    command: _containers.RepeatedScalarFieldContainer[str]
    checkpoint_id: str
    watermark: int
    cwd: str
    stdin_path: str
    def __init__(self, recovery: _Optional[_Union[_types_pb2.Continuity, str]] = ..., command: _Optional[_Iterable[str]] = ..., checkpoint_id: _Optional[str] = ..., watermark: _Optional[int] = ..., cwd: _Optional[str] = ..., stdin_path: _Optional[str] = ...) -> None: ...

class RestoreRefused(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RestoreEvent(_message.Message):
    __slots__ = ("step", "ready", "refused")
    STEP_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    step: RestoreStep
    ready: RestoreReady
    refused: RestoreRefused
    def __init__(self, step: _Optional[_Union[RestoreStep, _Mapping]] = ..., ready: _Optional[_Union[RestoreReady, _Mapping]] = ..., refused: _Optional[_Union[RestoreRefused, _Mapping]] = ...) -> None: ...

class GetRestoreStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RestoreStatus(_message.Message):
    __slots__ = ("state", "ready", "refused", "restore_outcomes_by_type")
    class RestoreOutcomesByTypeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STATE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    RESTORE_OUTCOMES_BY_TYPE_FIELD_NUMBER: _ClassVar[int]
    state: str
    ready: RestoreReady
    refused: RestoreRefused
    restore_outcomes_by_type: _containers.ScalarMap[str, int]
    def __init__(self, state: _Optional[str] = ..., ready: _Optional[_Union[RestoreReady, _Mapping]] = ..., refused: _Optional[_Union[RestoreRefused, _Mapping]] = ..., restore_outcomes_by_type: _Optional[_Mapping[str, int]] = ...) -> None: ...
