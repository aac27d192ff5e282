from agentihooks.swarm.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PutObjectHeader(_message.Message):
    __slots__ = ("sha256", "size")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size: int
    def __init__(self, sha256: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class PutObjectChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: PutObjectHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[PutObjectHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ObjectRef(_message.Message):
    __slots__ = ("sha256", "size", "existed")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size: int
    existed: bool
    def __init__(self, sha256: _Optional[str] = ..., size: _Optional[int] = ..., existed: _Optional[bool] = ...) -> None: ...

class CommitCheckpointRequest(_message.Message):
    __slots__ = ("record_json",)
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    record_json: str
    def __init__(self, record_json: _Optional[str] = ...) -> None: ...

class CommitCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint_id", "manifest_sha256")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_SHA256_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    manifest_sha256: str
    def __init__(self, checkpoint_id: _Optional[str] = ..., manifest_sha256: _Optional[str] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("compatibility_key", "verified_only")
    COMPATIBILITY_KEY_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_ONLY_FIELD_NUMBER: _ClassVar[int]
    compatibility_key: str
    verified_only: bool
    def __init__(self, compatibility_key: _Optional[str] = ..., verified_only: _Optional[bool] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[_types_pb2.CheckpointSummary]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[_types_pb2.CheckpointSummary, _Mapping]]] = ...) -> None: ...

class GetRecordRequest(_message.Message):
    __slots__ = ("checkpoint_id",)
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    def __init__(self, checkpoint_id: _Optional[str] = ...) -> None: ...

class GetRecordResponse(_message.Message):
    __slots__ = ("record_json", "manifest_sha256")
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_SHA256_FIELD_NUMBER: _ClassVar[int]
    record_json: str
    manifest_sha256: str
    def __init__(self, record_json: _Optional[str] = ..., manifest_sha256: _Optional[str] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("checkpoint_id",)
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    def __init__(self, checkpoint_id: _Optional[str] = ...) -> None: ...

class FetchObjectRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    def __init__(self, sha256: _Optional[str] = ...) -> None: ...

class ObjectChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...
