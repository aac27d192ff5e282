from agentihooks.swarm.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplySwarmRequest(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: str
    def __init__(self, document: _Optional[str] = ...) -> None: ...

class ApplySwarmResponse(_message.Message):
    __slots__ = ("swarm", "admitted_executions", "updated_seats")
    SWARM_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_SEATS_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    admitted_executions: _containers.RepeatedScalarFieldContainer[str]
    updated_seats: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, swarm: _Optional[str] = ..., admitted_executions: _Optional[_Iterable[str]] = ..., updated_seats: _Optional[_Iterable[str]] = ...) -> None: ...

class RestoreDecisionRequest(_message.Message):
    __slots__ = ("swarm", "execution_id", "seat", "choice", "agent")
    SWARM_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    execution_id: str
    seat: str
    choice: _types_pb2.Choice
    agent: str
    def __init__(self, swarm: _Optional[str] = ..., execution_id: _Optional[str] = ..., seat: _Optional[str] = ..., choice: _Optional[_Union[_types_pb2.Choice, str]] = ..., agent: _Optional[str] = ...) -> None: ...

class RestoreDecisionResponse(_message.Message):
    __slots__ = ("decision", "repeated")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REPEATED_FIELD_NUMBER: _ClassVar[int]
    decision: _types_pb2.Decision
    repeated: bool
    def __init__(self, decision: _Optional[_Union[_types_pb2.Decision, _Mapping]] = ..., repeated: _Optional[bool] = ...) -> None: ...

class RequestRestoreDecisionResponse(_message.Message):
    __slots__ = ("execution_id", "choice", "recorded", "since_event")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    SINCE_EVENT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    choice: _types_pb2.Choice
    recorded: bool
    since_event: str
    def __init__(self, execution_id: _Optional[str] = ..., choice: _Optional[_Union[_types_pb2.Choice, str]] = ..., recorded: _Optional[bool] = ..., since_event: _Optional[str] = ...) -> None: ...

class GetSwarmStatusRequest(_message.Message):
    __slots__ = ("swarm",)
    SWARM_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    def __init__(self, swarm: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "seat", "text", "awaiting", "recovery_json", "task_generation")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AWAITING_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_JSON_FIELD_NUMBER: _ClassVar[int]
    TASK_GENERATION_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    seat: str
    text: str
    awaiting: str
    recovery_json: str
    task_generation: int
    def __init__(self, task_id: _Optional[str] = ..., seat: _Optional[str] = ..., text: _Optional[str] = ..., awaiting: _Optional[str] = ..., recovery_json: _Optional[str] = ..., task_generation: _Optional[int] = ...) -> None: ...

class Seat(_message.Message):
    __slots__ = ("seat", "current_execution_id", "generation", "state")
    SEAT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    seat: str
    current_execution_id: str
    generation: int
    state: str
    def __init__(self, seat: _Optional[str] = ..., current_execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class HandoffCard(_message.Message):
    __slots__ = ("seat", "execution_id", "failure", "reason", "checkpoint", "resume_available", "resume_label", "continuity", "decision", "replacement_execution_id")
    SEAT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    RESUME_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    RESUME_LABEL_FIELD_NUMBER: _ClassVar[int]
    CONTINUITY_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    seat: str
    execution_id: str
    failure: str
    reason: str
    checkpoint: str
    resume_available: bool
    resume_label: str
    continuity: str
    decision: str
    replacement_execution_id: str
    def __init__(self, seat: _Optional[str] = ..., execution_id: _Optional[str] = ..., failure: _Optional[str] = ..., reason: _Optional[str] = ..., checkpoint: _Optional[str] = ..., resume_available: _Optional[bool] = ..., resume_label: _Optional[str] = ..., continuity: _Optional[str] = ..., decision: _Optional[str] = ..., replacement_execution_id: _Optional[str] = ...) -> None: ...

class SwarmStatus(_message.Message):
    __slots__ = ("swarm", "paused", "automation", "tasks", "seats", "handoffs", "restore_outcomes_by_type", "controller_epoch", "runtime")
    class RestoreOutcomesByTypeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SWARM_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    AUTOMATION_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    SEATS_FIELD_NUMBER: _ClassVar[int]
    HANDOFFS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_OUTCOMES_BY_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    paused: bool
    automation: bool
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    seats: _containers.RepeatedCompositeFieldContainer[Seat]
    handoffs: _containers.RepeatedCompositeFieldContainer[HandoffCard]
    restore_outcomes_by_type: _containers.ScalarMap[str, int]
    controller_epoch: int
    runtime: str
    def __init__(self, swarm: _Optional[str] = ..., paused: _Optional[bool] = ..., automation: _Optional[bool] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., seats: _Optional[_Iterable[_Union[Seat, _Mapping]]] = ..., handoffs: _Optional[_Iterable[_Union[HandoffCard, _Mapping]]] = ..., restore_outcomes_by_type: _Optional[_Mapping[str, int]] = ..., controller_epoch: _Optional[int] = ..., runtime: _Optional[str] = ...) -> None: ...

class WatchRecoveryRequest(_message.Message):
    __slots__ = ("swarm", "after")
    SWARM_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    after: str
    def __init__(self, swarm: _Optional[str] = ..., after: _Optional[str] = ...) -> None: ...

class RecoveryEvent(_message.Message):
    __slots__ = ("id", "kind", "swarm", "seat", "execution_id", "expected_generation", "observed_generation", "controller_epoch", "detail_json", "at")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SWARM_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DETAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    swarm: str
    seat: str
    execution_id: str
    expected_generation: int
    observed_generation: int
    controller_epoch: int
    detail_json: str
    at: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., swarm: _Optional[str] = ..., seat: _Optional[str] = ..., execution_id: _Optional[str] = ..., expected_generation: _Optional[int] = ..., observed_generation: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., detail_json: _Optional[str] = ..., at: _Optional[str] = ...) -> None: ...

class PauseRecoveryRequest(_message.Message):
    __slots__ = ("swarm",)
    SWARM_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    def __init__(self, swarm: _Optional[str] = ...) -> None: ...

class PauseState(_message.Message):
    __slots__ = ("swarm", "paused")
    SWARM_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    swarm: str
    paused: bool
    def __init__(self, swarm: _Optional[str] = ..., paused: _Optional[bool] = ...) -> None: ...

class GetLaunchRecordRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LaunchRecord(_message.Message):
    __slots__ = ("scope", "directive", "registration", "restores_from_generation", "restore_grant", "capture_grant", "command", "checkpoint_remote", "store_addr", "continuation_prompt")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVE_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    RESTORES_FROM_GENERATION_FIELD_NUMBER: _ClassVar[int]
    RESTORE_GRANT_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_GRANT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_REMOTE_FIELD_NUMBER: _ClassVar[int]
    STORE_ADDR_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    scope: _types_pb2.AttemptScope
    directive: _types_pb2.RestoreDirective
    registration: _types_pb2.Registration
    restores_from_generation: int
    restore_grant: str
    capture_grant: str
    command: _containers.RepeatedScalarFieldContainer[str]
    checkpoint_remote: bool
    store_addr: str
    continuation_prompt: str
    def __init__(self, scope: _Optional[_Union[_types_pb2.AttemptScope, _Mapping]] = ..., directive: _Optional[_Union[_types_pb2.RestoreDirective, _Mapping]] = ..., registration: _Optional[_Union[_types_pb2.Registration, _Mapping]] = ..., restores_from_generation: _Optional[int] = ..., restore_grant: _Optional[str] = ..., capture_grant: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., checkpoint_remote: _Optional[bool] = ..., store_addr: _Optional[str] = ..., continuation_prompt: _Optional[str] = ...) -> None: ...

class RestoreProgress(_message.Message):
    __slots__ = ("step", "status")
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    step: str
    status: str
    def __init__(self, step: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class RestoreRefusal(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RestoreReport(_message.Message):
    __slots__ = ("progress", "outcome", "refusal")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    progress: RestoreProgress
    outcome: _types_pb2.RestoreOutcome
    refusal: RestoreRefusal
    def __init__(self, progress: _Optional[_Union[RestoreProgress, _Mapping]] = ..., outcome: _Optional[_Union[_types_pb2.RestoreOutcome, _Mapping]] = ..., refusal: _Optional[_Union[RestoreRefusal, _Mapping]] = ...) -> None: ...

class RestoreReportAck(_message.Message):
    __slots__ = ("outcome", "repeated")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REPEATED_FIELD_NUMBER: _ClassVar[int]
    outcome: _types_pb2.RestoreOutcome
    repeated: bool
    def __init__(self, outcome: _Optional[_Union[_types_pb2.RestoreOutcome, _Mapping]] = ..., repeated: _Optional[bool] = ...) -> None: ...

class ReportCaptureRequest(_message.Message):
    __slots__ = ("native_session_id", "archive_watermark", "checkpoint_id", "final")
    NATIVE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    native_session_id: str
    archive_watermark: int
    checkpoint_id: str
    final: bool
    def __init__(self, native_session_id: _Optional[str] = ..., archive_watermark: _Optional[int] = ..., checkpoint_id: _Optional[str] = ..., final: _Optional[bool] = ...) -> None: ...

class ReportCaptureResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
