import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResult(_message.Message):
    __slots__ = ("user", "organizations", "url")
    USER_FIELD_NUMBER: _ClassVar[int]
    ORGANIZATIONS_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    user: str
    organizations: _containers.RepeatedScalarFieldContainer[str]
    url: str
    def __init__(self, user: _Optional[str] = ..., organizations: _Optional[_Iterable[str]] = ..., url: _Optional[str] = ...) -> None: ...

class SelectStackRequest(_message.Message):
    __slots__ = ("stack_name", "create", "secrets_provider")
    STACK_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    SECRETS_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    stack_name: str
    create: bool
    secrets_provider: str
    def __init__(self, stack_name: _Optional[str] = ..., create: _Optional[bool] = ..., secrets_provider: _Optional[str] = ...) -> None: ...

class SelectStackResult(_message.Message):
    __slots__ = ("summary",)
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: StackSummary
    def __init__(self, summary: _Optional[_Union[StackSummary, _Mapping]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResult(_message.Message):
    __slots__ = ("summary",)
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: StackSummary
    def __init__(self, summary: _Optional[_Union[StackSummary, _Mapping]] = ...) -> None: ...

class StackSummary(_message.Message):
    __slots__ = ("name", "last_update", "update_in_progress", "resource_count", "url")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    name: str
    last_update: _timestamp_pb2.Timestamp
    update_in_progress: bool
    resource_count: int
    url: str
    def __init__(self, name: _Optional[str] = ..., last_update: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_in_progress: _Optional[bool] = ..., resource_count: _Optional[int] = ..., url: _Optional[str] = ...) -> None: ...

class SetAllConfigRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _containers.RepeatedCompositeFieldContainer[ConfigItem]
    def __init__(self, config: _Optional[_Iterable[_Union[ConfigItem, _Mapping]]] = ...) -> None: ...

class ConfigItem(_message.Message):
    __slots__ = ("key", "path", "value", "value_from", "secret")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FROM_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    key: str
    path: bool
    value: _struct_pb2.Value
    value_from: ConfigValueFrom
    secret: bool
    def __init__(self, key: _Optional[str] = ..., path: _Optional[bool] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., value_from: _Optional[_Union[ConfigValueFrom, _Mapping]] = ..., secret: _Optional[bool] = ...) -> None: ...

class ConfigValueFrom(_message.Message):
    __slots__ = ("env", "path", "json")
    ENV_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    env: str
    path: str
    json: bool
    def __init__(self, env: _Optional[str] = ..., path: _Optional[str] = ..., json: _Optional[bool] = ...) -> None: ...

class SetAllConfigResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddEnvironmentsRequest(_message.Message):
    __slots__ = ("environment",)
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, environment: _Optional[_Iterable[str]] = ...) -> None: ...

class AddEnvironmentsResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InstallRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InstallResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RefreshRequest(_message.Message):
    __slots__ = ("parallel", "message", "expect_no_changes", "target", "run_program")
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPECT_NO_CHANGES_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    RUN_PROGRAM_FIELD_NUMBER: _ClassVar[int]
    parallel: int
    message: str
    expect_no_changes: bool
    target: _containers.RepeatedScalarFieldContainer[str]
    run_program: bool
    def __init__(self, parallel: _Optional[int] = ..., message: _Optional[str] = ..., expect_no_changes: _Optional[bool] = ..., target: _Optional[_Iterable[str]] = ..., run_program: _Optional[bool] = ...) -> None: ...

class RefreshStream(_message.Message):
    __slots__ = ("event", "result")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    event: _struct_pb2.Struct
    result: RefreshResult
    def __init__(self, event: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result: _Optional[_Union[RefreshResult, _Mapping]] = ...) -> None: ...

class RefreshResult(_message.Message):
    __slots__ = ("stdout", "stderr", "summary", "permalink", "project_info")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PERMALINK_FIELD_NUMBER: _ClassVar[int]
    PROJECT_INFO_FIELD_NUMBER: _ClassVar[int]
    stdout: str
    stderr: str
    summary: UpdateSummary
    permalink: str
    project_info: ProjectInfo
    def __init__(self, stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., summary: _Optional[_Union[UpdateSummary, _Mapping]] = ..., permalink: _Optional[str] = ..., project_info: _Optional[_Union[ProjectInfo, _Mapping]] = ...) -> None: ...

class PreviewRequest(_message.Message):
    __slots__ = ("parallel", "message", "expect_no_changes", "replace", "target", "target_dependents", "policy_pack", "refresh")
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPECT_NO_CHANGES_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_PACK_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    parallel: int
    message: str
    expect_no_changes: bool
    replace: _containers.RepeatedScalarFieldContainer[str]
    target: _containers.RepeatedScalarFieldContainer[str]
    target_dependents: bool
    policy_pack: _containers.RepeatedCompositeFieldContainer[PolicyPack]
    refresh: bool
    def __init__(self, parallel: _Optional[int] = ..., message: _Optional[str] = ..., expect_no_changes: _Optional[bool] = ..., replace: _Optional[_Iterable[str]] = ..., target: _Optional[_Iterable[str]] = ..., target_dependents: _Optional[bool] = ..., policy_pack: _Optional[_Iterable[_Union[PolicyPack, _Mapping]]] = ..., refresh: _Optional[bool] = ...) -> None: ...

class PolicyPack(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PreviewStream(_message.Message):
    __slots__ = ("event", "result")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    event: _struct_pb2.Struct
    result: PreviewResult
    def __init__(self, event: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result: _Optional[_Union[PreviewResult, _Mapping]] = ...) -> None: ...

class PreviewResult(_message.Message):
    __slots__ = ("stdout", "stderr", "summary", "permalink", "project_info")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PERMALINK_FIELD_NUMBER: _ClassVar[int]
    PROJECT_INFO_FIELD_NUMBER: _ClassVar[int]
    stdout: str
    stderr: str
    summary: UpdateSummary
    permalink: str
    project_info: ProjectInfo
    def __init__(self, stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., summary: _Optional[_Union[UpdateSummary, _Mapping]] = ..., permalink: _Optional[str] = ..., project_info: _Optional[_Union[ProjectInfo, _Mapping]] = ...) -> None: ...

class UpRequest(_message.Message):
    __slots__ = ("parallel", "message", "expect_no_changes", "replace", "target", "target_dependents", "policy_pack", "refresh", "continue_on_error")
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPECT_NO_CHANGES_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_PACK_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    parallel: int
    message: str
    expect_no_changes: bool
    replace: _containers.RepeatedScalarFieldContainer[str]
    target: _containers.RepeatedScalarFieldContainer[str]
    target_dependents: bool
    policy_pack: _containers.RepeatedCompositeFieldContainer[PolicyPack]
    refresh: bool
    continue_on_error: bool
    def __init__(self, parallel: _Optional[int] = ..., message: _Optional[str] = ..., expect_no_changes: _Optional[bool] = ..., replace: _Optional[_Iterable[str]] = ..., target: _Optional[_Iterable[str]] = ..., target_dependents: _Optional[bool] = ..., policy_pack: _Optional[_Iterable[_Union[PolicyPack, _Mapping]]] = ..., refresh: _Optional[bool] = ..., continue_on_error: _Optional[bool] = ...) -> None: ...

class UpStream(_message.Message):
    __slots__ = ("event", "result")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    event: _struct_pb2.Struct
    result: UpResult
    def __init__(self, event: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result: _Optional[_Union[UpResult, _Mapping]] = ...) -> None: ...

class UpResult(_message.Message):
    __slots__ = ("stdout", "stderr", "summary", "permalink", "outputs", "project_info")
    class OutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: OutputValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[OutputValue, _Mapping]] = ...) -> None: ...
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PERMALINK_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PROJECT_INFO_FIELD_NUMBER: _ClassVar[int]
    stdout: str
    stderr: str
    summary: UpdateSummary
    permalink: str
    outputs: _containers.MessageMap[str, OutputValue]
    project_info: ProjectInfo
    def __init__(self, stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., summary: _Optional[_Union[UpdateSummary, _Mapping]] = ..., permalink: _Optional[str] = ..., outputs: _Optional[_Mapping[str, OutputValue]] = ..., project_info: _Optional[_Union[ProjectInfo, _Mapping]] = ...) -> None: ...

class ProjectInfo(_message.Message):
    __slots__ = ("name", "runtime")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    runtime: str
    def __init__(self, name: _Optional[str] = ..., runtime: _Optional[str] = ...) -> None: ...

class OutputValue(_message.Message):
    __slots__ = ("value", "secret")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    secret: bool
    def __init__(self, value: _Optional[bytes] = ..., secret: _Optional[bool] = ...) -> None: ...

class UpdateSummary(_message.Message):
    __slots__ = ("start_time", "end_time", "result", "message")
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    result: str
    message: str
    def __init__(self, start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class DestroyRequest(_message.Message):
    __slots__ = ("parallel", "message", "target", "target_dependents", "refresh", "continue_on_error", "remove", "run_program")
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    RUN_PROGRAM_FIELD_NUMBER: _ClassVar[int]
    parallel: int
    message: str
    target: _containers.RepeatedScalarFieldContainer[str]
    target_dependents: bool
    refresh: bool
    continue_on_error: bool
    remove: bool
    run_program: bool
    def __init__(self, parallel: _Optional[int] = ..., message: _Optional[str] = ..., target: _Optional[_Iterable[str]] = ..., target_dependents: _Optional[bool] = ..., refresh: _Optional[bool] = ..., continue_on_error: _Optional[bool] = ..., remove: _Optional[bool] = ..., run_program: _Optional[bool] = ...) -> None: ...

class DestroyStream(_message.Message):
    __slots__ = ("event", "result")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    event: _struct_pb2.Struct
    result: DestroyResult
    def __init__(self, event: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result: _Optional[_Union[DestroyResult, _Mapping]] = ...) -> None: ...

class DestroyResult(_message.Message):
    __slots__ = ("stdout", "stderr", "summary", "permalink", "project_info")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PERMALINK_FIELD_NUMBER: _ClassVar[int]
    PROJECT_INFO_FIELD_NUMBER: _ClassVar[int]
    stdout: str
    stderr: str
    summary: UpdateSummary
    permalink: str
    project_info: ProjectInfo
    def __init__(self, stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., summary: _Optional[_Union[UpdateSummary, _Mapping]] = ..., permalink: _Optional[str] = ..., project_info: _Optional[_Union[ProjectInfo, _Mapping]] = ...) -> None: ...

class PulumiErrorInfo(_message.Message):
    __slots__ = ("code", "reason", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    message: str
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class PulumiVersionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PulumiVersionResult(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...
