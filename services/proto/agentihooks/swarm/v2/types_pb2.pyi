from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Continuity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTINUITY_UNSPECIFIED: _ClassVar[Continuity]
    CONTINUITY_NATIVE: _ClassVar[Continuity]
    CONTINUITY_RECONSTRUCTED: _ClassVar[Continuity]
    CONTINUITY_FRESH: _ClassVar[Continuity]

class FailureReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_REASON_UNSPECIFIED: _ClassVar[FailureReason]
    FAILURE_REASON_OOM_KILLED: _ClassVar[FailureReason]
    FAILURE_REASON_EVICTED: _ClassVar[FailureReason]
    FAILURE_REASON_NODE_LOST: _ClassVar[FailureReason]
    FAILURE_REASON_IMAGE_PULL: _ClassVar[FailureReason]
    FAILURE_REASON_APPLICATION_EXIT: _ClassVar[FailureReason]

class Choice(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHOICE_UNSPECIFIED: _ClassVar[Choice]
    CHOICE_RESUME: _ClassVar[Choice]
    CHOICE_FRESH: _ClassVar[Choice]

class DecisionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_STATE_UNSPECIFIED: _ClassVar[DecisionState]
    DECISION_STATE_RECOVERY_PENDING: _ClassVar[DecisionState]
    DECISION_STATE_ACCEPTED: _ClassVar[DecisionState]

class DecisionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_SOURCE_UNSPECIFIED: _ClassVar[DecisionSource]
    DECISION_SOURCE_AUTOMATIC: _ClassVar[DecisionSource]
    DECISION_SOURCE_OPERATOR: _ClassVar[DecisionSource]
    DECISION_SOURCE_MASTER: _ClassVar[DecisionSource]
    DECISION_SOURCE_LEGACY_SPAWN: _ClassVar[DecisionSource]
CONTINUITY_UNSPECIFIED: Continuity
CONTINUITY_NATIVE: Continuity
CONTINUITY_RECONSTRUCTED: Continuity
CONTINUITY_FRESH: Continuity
FAILURE_REASON_UNSPECIFIED: FailureReason
FAILURE_REASON_OOM_KILLED: FailureReason
FAILURE_REASON_EVICTED: FailureReason
FAILURE_REASON_NODE_LOST: FailureReason
FAILURE_REASON_IMAGE_PULL: FailureReason
FAILURE_REASON_APPLICATION_EXIT: FailureReason
CHOICE_UNSPECIFIED: Choice
CHOICE_RESUME: Choice
CHOICE_FRESH: Choice
DECISION_STATE_UNSPECIFIED: DecisionState
DECISION_STATE_RECOVERY_PENDING: DecisionState
DECISION_STATE_ACCEPTED: DecisionState
DECISION_SOURCE_UNSPECIFIED: DecisionSource
DECISION_SOURCE_AUTOMATIC: DecisionSource
DECISION_SOURCE_OPERATOR: DecisionSource
DECISION_SOURCE_MASTER: DecisionSource
DECISION_SOURCE_LEGACY_SPAWN: DecisionSource

class AttemptScope(_message.Message):
    __slots__ = ("swarm", "seat", "task_id", "task_generation", "execution_id", "execution_generation")
    SWARM_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_GENERATION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_GENERATION_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    seat: str
    task_id: str
    task_generation: int
    execution_id: str
    execution_generation: int
    def __init__(self, swarm: _Optional[str] = ..., seat: _Optional[str] = ..., task_id: _Optional[str] = ..., task_generation: _Optional[int] = ..., execution_id: _Optional[str] = ..., execution_generation: _Optional[int] = ...) -> None: ...

class RestoreDirective(_message.Message):
    __slots__ = ("checkpoint_id", "recovery", "session_id", "watermark")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    recovery: Continuity
    session_id: str
    watermark: int
    def __init__(self, checkpoint_id: _Optional[str] = ..., recovery: _Optional[_Union[Continuity, str]] = ..., session_id: _Optional[str] = ..., watermark: _Optional[int] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("kind", "released_at", "controller_epoch")
    KIND_FIELD_NUMBER: _ClassVar[int]
    RELEASED_AT_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    kind: str
    released_at: str
    controller_epoch: int
    def __init__(self, kind: _Optional[str] = ..., released_at: _Optional[str] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class LostTail(_message.Message):
    __slots__ = ("after_watermark", "length")
    AFTER_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    after_watermark: int
    length: str
    def __init__(self, after_watermark: _Optional[int] = ..., length: _Optional[str] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ("execution_id", "generation", "seat", "reason", "controller_epoch", "native_session_id", "archive_watermark", "lost_tail", "releases", "fenced_at")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NATIVE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOST_TAIL_FIELD_NUMBER: _ClassVar[int]
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    FENCED_AT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    seat: str
    reason: FailureReason
    controller_epoch: int
    native_session_id: str
    archive_watermark: int
    lost_tail: LostTail
    releases: _containers.RepeatedCompositeFieldContainer[Release]
    fenced_at: str
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., seat: _Optional[str] = ..., reason: _Optional[_Union[FailureReason, str]] = ..., controller_epoch: _Optional[int] = ..., native_session_id: _Optional[str] = ..., archive_watermark: _Optional[int] = ..., lost_tail: _Optional[_Union[LostTail, _Mapping]] = ..., releases: _Optional[_Iterable[_Union[Release, _Mapping]]] = ..., fenced_at: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("execution_id", "state", "choice", "source", "agent", "directive", "replacement_execution_id", "replacement_generation", "controller_epoch", "decided_at")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVE_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    state: DecisionState
    choice: Choice
    source: DecisionSource
    agent: str
    directive: RestoreDirective
    replacement_execution_id: str
    replacement_generation: int
    controller_epoch: int
    decided_at: str
    def __init__(self, execution_id: _Optional[str] = ..., state: _Optional[_Union[DecisionState, str]] = ..., choice: _Optional[_Union[Choice, str]] = ..., source: _Optional[_Union[DecisionSource, str]] = ..., agent: _Optional[str] = ..., directive: _Optional[_Union[RestoreDirective, _Mapping]] = ..., replacement_execution_id: _Optional[str] = ..., replacement_generation: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., decided_at: _Optional[str] = ...) -> None: ...

class RestoreOutcome(_message.Message):
    __slots__ = ("execution_id", "recovery", "checkpoint_id", "session_id", "watermark", "archive_watermark", "verified", "reported_at")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    recovery: Continuity
    checkpoint_id: str
    session_id: str
    watermark: int
    archive_watermark: int
    verified: bool
    reported_at: str
    def __init__(self, execution_id: _Optional[str] = ..., recovery: _Optional[_Union[Continuity, str]] = ..., checkpoint_id: _Optional[str] = ..., session_id: _Optional[str] = ..., watermark: _Optional[int] = ..., archive_watermark: _Optional[int] = ..., verified: _Optional[bool] = ..., reported_at: _Optional[str] = ...) -> None: ...

class Project(_message.Message):
    __slots__ = ("name", "repository")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_FIELD_NUMBER: _ClassVar[int]
    name: str
    repository: str
    def __init__(self, name: _Optional[str] = ..., repository: _Optional[str] = ...) -> None: ...

class Registration(_message.Message):
    __slots__ = ("projects", "worker_image", "harness")
    PROJECTS_FIELD_NUMBER: _ClassVar[int]
    WORKER_IMAGE_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    projects: _containers.RepeatedCompositeFieldContainer[Project]
    worker_image: str
    harness: str
    def __init__(self, projects: _Optional[_Iterable[_Union[Project, _Mapping]]] = ..., worker_image: _Optional[str] = ..., harness: _Optional[str] = ...) -> None: ...

class CheckpointSummary(_message.Message):
    __slots__ = ("checkpoint_id", "continuity", "compatibility_key", "native_session_id", "watermark", "sequence", "created_at", "task_generation", "execution_generation", "project")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CONTINUITY_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_KEY_FIELD_NUMBER: _ClassVar[int]
    NATIVE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    TASK_GENERATION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_GENERATION_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    continuity: str
    compatibility_key: str
    native_session_id: str
    watermark: int
    sequence: int
    created_at: str
    task_generation: int
    execution_generation: int
    project: str
    def __init__(self, checkpoint_id: _Optional[str] = ..., continuity: _Optional[str] = ..., compatibility_key: _Optional[str] = ..., native_session_id: _Optional[str] = ..., watermark: _Optional[int] = ..., sequence: _Optional[int] = ..., created_at: _Optional[str] = ..., task_generation: _Optional[int] = ..., execution_generation: _Optional[int] = ..., project: _Optional[str] = ...) -> None: ...

class Verdict(_message.Message):
    __slots__ = ("ok", "reason")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...
