"""Every exception agentlab raises on purpose.

One base class, :class:`AgentlabError`, so a notebook can catch everything of ours in one
``except``. Each subclass says what went wrong; its message says what to do about it. A missing
id is also a :class:`KeyError` (it carries the id), and bad arguments are also a
:class:`ValueError` or :class:`TypeError`, so generic handlers keep working.

Invariant shared by every raiser: when one of these is raised by a write, the agent's stored data
is exactly what it was before the call.

The classes live in one module per layer or area (``base``, ``store``, ``state``, ``session``,
``context``, ``chat``, ``search``, ``evaluation``, ``exports``, ``serve``, ``experiments``,
``cluster``); import them from here, ``from agentlab.errors import SqlError``.
"""

from __future__ import annotations

from agentlab.errors._base import (
    AgentlabError,
    InvalidArgumentError,
)
from agentlab.errors._chat import (
    ChatError,
    InvalidClientError,
    InvalidModelRequestError,
    ModelAPIError,
    ModelAuthError,
    ModelConnectionError,
    ModelOverloadedError,
    ModelRateLimitError,
    ModelServerError,
    NoApiKeyError,
    TurnError,
)
from agentlab.errors._cluster import (
    ActorLostError,
    ClusterError,
    RayNotInstalledError,
)
from agentlab.errors._context import (
    BlockBudgetError,
    BlockNotFoundError,
    BlockReadonlyError,
    ContextError,
    ContextProviderError,
    EmbedderError,
)
from agentlab.errors._evaluation import (
    DatasetError,
    EmptySelectionError,
    EvaluationError,
    UnknownCategoryError,
)
from agentlab.errors._experiments import (
    BatchError,
    BudgetExceededError,
    ExperimentError,
    PricingError,
    UnknownPolicyError,
)
from agentlab.errors._exports import (
    ExportDiskFullError,
    ExportError,
    ExportMismatchError,
)
from agentlab.errors._search import (
    CorruptIndexError,
    InvalidSearchError,
    SearchIndexWarning,
)
from agentlab.errors._serve import (
    AgentConnectionError,
    RpcError,
    RpcTimeoutError,
    ServeConfigError,
    ServeError,
    ServeRootLockedError,
)
from agentlab.errors._session import (
    CompactionError,
    ConversationFormatError,
    DuplicateMessageWarning,
    ForkedHistoryError,
    HistoryTooDeepError,
    HistoryTruncatedWarning,
    InvalidMessageError,
    RowSizeWarning,
    SessionError,
    SessionWarning,
    UnknownLeafWarning,
    UnknownMessageError,
    UnknownRoleWarning,
    UnknownSessionError,
)
from agentlab.errors._state import (
    ConnectionClosedError,
    ReadonlyConnectionError,
    StateError,
    StateNotJSONError,
    StateRejectedError,
)
from agentlab.errors._store import (
    AgentClassConflictError,
    AgentClosedError,
    AgentDestroyedError,
    AgentFileError,
    AgentLockedError,
    CheckpointWarning,
    DiskFullError,
    InvalidNameError,
    MigrationError,
    ReadOnlyAgentError,
    SchemaTooNewError,
    SqlError,
    StoreInUseError,
)

__all__ = [
    "ActorLostError",
    "AgentClassConflictError",
    "AgentClosedError",
    "AgentConnectionError",
    "AgentDestroyedError",
    "AgentFileError",
    "AgentLockedError",
    "AgentlabError",
    "BatchError",
    "BlockBudgetError",
    "BlockNotFoundError",
    "BlockReadonlyError",
    "BudgetExceededError",
    "ChatError",
    "CheckpointWarning",
    "ClusterError",
    "CompactionError",
    "ConnectionClosedError",
    "ContextError",
    "ContextProviderError",
    "ConversationFormatError",
    "CorruptIndexError",
    "DatasetError",
    "DiskFullError",
    "DuplicateMessageWarning",
    "EmbedderError",
    "EmptySelectionError",
    "EvaluationError",
    "ExperimentError",
    "ExportDiskFullError",
    "ExportError",
    "ExportMismatchError",
    "ForkedHistoryError",
    "HistoryTooDeepError",
    "HistoryTruncatedWarning",
    "InvalidArgumentError",
    "InvalidClientError",
    "InvalidMessageError",
    "InvalidModelRequestError",
    "InvalidNameError",
    "InvalidSearchError",
    "MigrationError",
    "ModelAPIError",
    "ModelAuthError",
    "ModelConnectionError",
    "ModelOverloadedError",
    "ModelRateLimitError",
    "ModelServerError",
    "NoApiKeyError",
    "PricingError",
    "RayNotInstalledError",
    "ReadOnlyAgentError",
    "ReadonlyConnectionError",
    "RowSizeWarning",
    "RpcError",
    "RpcTimeoutError",
    "SchemaTooNewError",
    "SearchIndexWarning",
    "ServeConfigError",
    "ServeError",
    "ServeRootLockedError",
    "SessionError",
    "SessionWarning",
    "SqlError",
    "StateError",
    "StateNotJSONError",
    "StateRejectedError",
    "StoreInUseError",
    "TurnError",
    "UnknownCategoryError",
    "UnknownLeafWarning",
    "UnknownMessageError",
    "UnknownPolicyError",
    "UnknownRoleWarning",
    "UnknownSessionError",
]

# Tracebacks, reprs and pickles name each class by its public path (agentlab.errors.SqlError), which stays
# put if a class moves between the modules above.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
