"""Lizard's Python SDK: create code-interpreter sandboxes and run Python, JavaScript and Bash in
stateful kernels, with live streamed output, rich results and typed errors.

    from lizard import CodeSandbox

    with CodeSandbox.create(project="my-project") as sandbox:
        sandbox.run_code("x = 42")
        print(sandbox.run_code("print(x * 2)").stdout)   # "84\\n"

``CodeSandbox`` is the synchronous client, ``AsyncCodeSandbox`` its asyncio twin (``Volumes`` and
``AsyncVolumes`` manage persistent volumes, ``Templates`` and ``AsyncTemplates`` build and manage
user templates, ``Snapshots`` and ``AsyncSnapshots`` list and delete snapshots, ``Secrets`` and
``AsyncSecrets`` manage a project's write-only secrets); all read
``LIZARD_API_URL`` and ``LIZARD_API_KEY`` when not given ``api_url``/``api_key``. This package only
talks to a Lizard server over HTTP; it does not start servers, sandboxes or kernels itself.
"""

from ._version import __version__
from .async_sandbox import AsyncCodeSandbox
from .errors import (
    AuthenticationError,
    CommandExitError,
    ConflictError,
    InvalidArgumentError,
    LizardError,
    NotFoundError,
    RateLimitError,
    SandboxError,
    TemplateBuildError,
    TemplateInUseError,
    TimeoutError,
    VolumeInUseError,
)
from .models import (
    CommandResult,
    Context,
    ContextLimits,
    ForkedContext,
    EntryInfo,
    Execution,
    ExecutionError,
    ExecutionUsage,
    FilesystemEvent,
    ContextReport,
    HibernationReport,
    LostItem,
    ProcessInfo,
    Result,
    SandboxInfo,
    SandboxLimits,
    SandboxVolume,
    SandboxNetwork,
    SecretInfo,
    NetworkLog,
    MirrorTraffic,
    EgressTraffic,
    RefusedRequest,
    SnapshotInfo,
    VolumeInfo,
    StateItem,
    TemplateBuildLog,
    TemplateBuildStep,
    TemplateInfo,
    TemplateVersion,
)
from .sandbox import CodeSandbox, CommandHandle, PtyHandle, WatchHandle
from .async_sandbox import AsyncCommandHandle, AsyncPtyHandle, AsyncWatchHandle
from .templates import AsyncTemplates, Templates
from .volumes import AsyncVolumes, Volumes
from .snapshots import AsyncSnapshots, Snapshots
from .secrets import AsyncSecrets, Secrets

__all__ = [
    "__version__",
    "CodeSandbox",
    "AsyncCodeSandbox",
    "CommandHandle",
    "AsyncCommandHandle",
    "PtyHandle",
    "AsyncPtyHandle",
    "WatchHandle",
    "AsyncWatchHandle",
    "Execution",
    "ExecutionError",
    "ExecutionUsage",
    "Result",
    "Context",
    "ForkedContext",
    "ContextLimits",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxVolume",
    "SandboxNetwork",
    "Secrets",
    "AsyncSecrets",
    "SecretInfo",
    "NetworkLog",
    "MirrorTraffic",
    "EgressTraffic",
    "RefusedRequest",
    "Volumes",
    "AsyncVolumes",
    "VolumeInfo",
    "Snapshots",
    "AsyncSnapshots",
    "SnapshotInfo",
    "Templates",
    "AsyncTemplates",
    "TemplateInfo",
    "TemplateVersion",
    "TemplateBuildStep",
    "TemplateBuildLog",
    "HibernationReport",
    "ContextReport",
    "StateItem",
    "LostItem",
    "CommandResult",
    "ProcessInfo",
    "EntryInfo",
    "FilesystemEvent",
    "CommandExitError",
    "LizardError",
    "AuthenticationError",
    "NotFoundError",
    "InvalidArgumentError",
    "ConflictError",
    "VolumeInUseError",
    "TemplateBuildError",
    "TemplateInUseError",
    "RateLimitError",
    "TimeoutError",
    "SandboxError",
]
