from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ApiRequest(_message.Message):
    __slots__ = ("id", "action", "payload")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    id: str
    action: str
    payload: bytes
    def __init__(self, id: _Optional[str] = ..., action: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class ApiResponse(_message.Message):
    __slots__ = ("success", "data", "error")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    success: bool
    data: bytes
    error: str
    def __init__(self, success: _Optional[bool] = ..., data: _Optional[bytes] = ..., error: _Optional[str] = ...) -> None: ...
