from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DOWNLOADING: _ClassVar[ModelStatus]
    DOWNLOADED: _ClassVar[ModelStatus]
    ERROR: _ClassVar[ModelStatus]

class ModelProvider(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HUGGING_FACE: _ClassVar[ModelProvider]
    NGC: _ClassVar[ModelProvider]
    GCS: _ClassVar[ModelProvider]
    S3: _ClassVar[ModelProvider]
DOWNLOADING: ModelStatus
DOWNLOADED: ModelStatus
ERROR: ModelStatus
HUGGING_FACE: ModelProvider
NGC: ModelProvider
GCS: ModelProvider
S3: ModelProvider

class DeleteModelRequest(_message.Message):
    __slots__ = ("model_name", "provider")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    provider: ModelProvider
    def __init__(self, model_name: _Optional[str] = ..., provider: _Optional[_Union[ModelProvider, str]] = ...) -> None: ...

class DeleteModelResponse(_message.Message):
    __slots__ = ("success", "message")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    success: bool
    message: str
    def __init__(self, success: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class ModelDownloadRequest(_message.Message):
    __slots__ = ("model_name", "provider", "ignore_weights", "revision")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    IGNORE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    provider: ModelProvider
    ignore_weights: bool
    revision: str
    def __init__(self, model_name: _Optional[str] = ..., provider: _Optional[_Union[ModelProvider, str]] = ..., ignore_weights: _Optional[bool] = ..., revision: _Optional[str] = ...) -> None: ...

class ModelStatusUpdate(_message.Message):
    __slots__ = ("model_name", "status", "message", "provider", "resolved_revision")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_REVISION_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    status: ModelStatus
    message: str
    provider: ModelProvider
    resolved_revision: str
    def __init__(self, model_name: _Optional[str] = ..., status: _Optional[_Union[ModelStatus, str]] = ..., message: _Optional[str] = ..., provider: _Optional[_Union[ModelProvider, str]] = ..., resolved_revision: _Optional[str] = ...) -> None: ...

class ModelFilesRequest(_message.Message):
    __slots__ = ("model_name", "provider", "chunk_size", "file_selector", "ignore_weights", "revision")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    FILE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    IGNORE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    provider: ModelProvider
    chunk_size: int
    file_selector: ModelFileSelector
    ignore_weights: bool
    revision: str
    def __init__(self, model_name: _Optional[str] = ..., provider: _Optional[_Union[ModelProvider, str]] = ..., chunk_size: _Optional[int] = ..., file_selector: _Optional[_Union[ModelFileSelector, _Mapping]] = ..., ignore_weights: _Optional[bool] = ..., revision: _Optional[str] = ...) -> None: ...

class ModelFileSelector(_message.Message):
    __slots__ = ("paths",)
    PATHS_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, paths: _Optional[_Iterable[str]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("relative_path", "data", "offset", "total_size", "is_last_chunk", "is_last_file", "commit_hash")
    RELATIVE_PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    IS_LAST_CHUNK_FIELD_NUMBER: _ClassVar[int]
    IS_LAST_FILE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_HASH_FIELD_NUMBER: _ClassVar[int]
    relative_path: str
    data: bytes
    offset: int
    total_size: int
    is_last_chunk: bool
    is_last_file: bool
    commit_hash: str
    def __init__(self, relative_path: _Optional[str] = ..., data: _Optional[bytes] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ..., is_last_chunk: _Optional[bool] = ..., is_last_file: _Optional[bool] = ..., commit_hash: _Optional[str] = ...) -> None: ...

class ModelFileList(_message.Message):
    __slots__ = ("model_name", "files", "total_size")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    files: _containers.RepeatedCompositeFieldContainer[ModelFileInfo]
    total_size: int
    def __init__(self, model_name: _Optional[str] = ..., files: _Optional[_Iterable[_Union[ModelFileInfo, _Mapping]]] = ..., total_size: _Optional[int] = ...) -> None: ...

class ModelFileInfo(_message.Message):
    __slots__ = ("relative_path", "size")
    RELATIVE_PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    relative_path: str
    size: int
    def __init__(self, relative_path: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...
