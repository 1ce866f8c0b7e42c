"""Every exception agentlab raises on purpose.

One base class, :class:`AgentlabError`, so a notebook can catch everything of ours in one
``except``. Each subclass says what went wrong; its message says what to do about it. A missing
id is also a :class:`KeyError` (it carries the id), and bad arguments are also a
:class:`ValueError` or :class:`TypeError`, so generic handlers keep working.

Invariant shared by every raiser: when one of these is raised by a write, the agent's stored data
is exactly what it was before the call.
"""

from __future__ import annotations

from typing import Any


class AgentlabError(Exception):
    """Base class of every error agentlab raises on purpose."""


# --- store / agent ------------------------------------------------------------------------------


class InvalidNameError(AgentlabError, ValueError):
    """An agent or session name that cannot be used (empty, control characters, too long)."""


class AgentLockedError(AgentlabError):
    """Another process holds the agent's DuckDB file open for writing."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"The agent file {path} is locked by another process ({detail or 'conflicting lock'}). "
            "Close the agent there (agent.close()), or open it here with "
            "get_agent(..., read_only=True) while no writer holds it."
        )


class AgentClosedError(AgentlabError):
    """The agent was closed; get a fresh one with get_agent()."""


class AgentDestroyedError(AgentClosedError):
    """The agent was destroyed (its data and file deleted); get_agent() would create a new, empty one."""


class ReadOnlyAgentError(AgentlabError):
    """A write was attempted on an agent opened with read_only=True."""


class MigrationError(AgentlabError):
    """A schema migration failed; the database was left at the previous version."""


class AgentFileError(AgentlabError):
    """The file at an agent's path is not an agentlab agent file; it was left exactly as it was."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"{path} cannot be opened as an agentlab agent: {reason}. Nothing in it was changed; move it "
            "away (or restore it from an export) and open the agent again."
        )


class SchemaTooNewError(AgentFileError):
    """The file was written by a newer agentlab (it records migrations this version does not know)."""

    def __init__(self, path: str, *, file_version: str, known_version: str, unknown: list[str]) -> None:
        self.file_version = file_version
        self.known_version = known_version
        self.unknown = unknown
        AgentlabError.__init__(
            self,
            f"{path} was written by a newer agentlab: its schema is at {file_version}, this agentlab knows up "
            f"to {known_version} (unknown: {', '.join(unknown)}). Upgrade agentlab to write to it, or open it "
            "with read_only=True to read it.",
        )
        self.path = path
        self.reason = "newer schema"


class StoreInUseError(AgentlabError):
    """This process already has a live store on the file; two would corrupt it."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is already open in this process. Use the agent that holds it (get_agent() returns the "
            "live one), or close() it before opening the file again."
        )


class DiskFullError(AgentlabError):
    """A write failed because the disk is full; nothing was stored."""

    def __init__(self, path: str, doing: str) -> None:
        self.path = path
        super().__init__(
            f"The disk holding {path} is full ({doing} failed); nothing was stored. Free some space and retry."
        )


class CheckpointWarning(UserWarning):
    """A write was stored, but DuckDB could not checkpoint the file afterwards (see ``store.health``)."""


class AgentClassConflictError(AgentlabError):
    """Two different agent classes map to one file (their names kebab-case the same)."""


class SqlError(AgentlabError):
    """A SQL statement failed. ``query`` holds the statement, ``__cause__`` the DuckDB error."""

    def __init__(self, query: str, cause: BaseException) -> None:
        self.query = query
        self.cause = cause
        super().__init__(f"{cause}\nQuery: {query}")


# --- state ----------------------------------------------------------------------------------------


class StateError(AgentlabError):
    """Base class for state problems."""


class StateNotJSONError(StateError, TypeError):
    """The state (or part of it) cannot be stored as JSON. ``path`` names the offending value."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"State is not JSON at {path}: {reason}. Use dicts, lists, str, int, finite float, bool or None."
        )


class StateRejectedError(StateError):
    """validate_state_change() rejected the new state; nothing was stored or broadcast."""


class ReadonlyConnectionError(StateError):
    """A readonly connection tried to change state."""

    def __init__(self, message: str = "Connection is readonly") -> None:
        super().__init__(message)


class ConnectionClosedError(StateError):
    """The connection was closed; open a new one with agent.connect()."""


# --- session --------------------------------------------------------------------------------------


class SessionError(AgentlabError):
    """Base class for message-tree, search and compaction problems."""


class UnknownMessageError(SessionError, KeyError):
    """No message with this id in this session. ``id`` holds it."""

    def __init__(self, message_id: str, what: str = "message") -> None:
        self.id = message_id
        super().__init__(f"Unknown {what} id {message_id!r} in this session.")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class InvalidMessageError(SessionError, ValueError):
    """A message without a string id, a string role or a JSON list of parts."""


class UnknownSessionError(SessionError, KeyError):
    """No session with this id in this agent."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        super().__init__(f"Unknown session id {session_id!r}; list them with manager.list().")

    def __str__(self) -> str:
        return str(self.args[0])


class CompactionError(SessionError):
    """Compaction cannot run (for example no compaction function is registered)."""


class ForkedHistoryError(SessionError):
    """A message is shared with a fork (forks share rows, never copy them), so it cannot change."""


class ConversationFormatError(SessionError, ValueError):
    """A conversation to import (OpenAI or Anthropic messages) is not in the expected shape; nothing was stored."""


class SessionWarning(UserWarning):
    """A session call that upstream accepts silently did what upstream does, but probably not what was meant."""


class UnknownRoleWarning(SessionWarning):
    """A message role other than user, assistant, system or tool (often a typo); it was stored as given."""


class DuplicateMessageWarning(SessionWarning):
    """An append reused a stored id with different content; the stored message was kept (the first wins)."""


class UnknownLeafWarning(SessionWarning):
    """A history read named a leaf id this session does not store, so it returned []."""


class RowSizeWarning(SessionWarning):
    """A message over the row size limit was stored with its tool outputs (then texts) truncated."""


class HistoryTooDeepError(SessionError):
    """A branch is longer than the session's ``max_depth`` and the read asked for an error rather than a cut
    (``on_overflow="raise"``). ``leaf_id`` and ``max_depth`` hold what was asked."""

    def __init__(self, leaf_id: str, max_depth: int) -> None:
        self.leaf_id = leaf_id
        self.max_depth = max_depth
        super().__init__(
            f"The branch ending at {leaf_id!r} is longer than max_depth={max_depth:,}. Read it whole with "
            f"Session(..., max_depth=<a larger int>), or accept the newest {max_depth:,} messages with "
            "on_overflow='warn' (the default) or 'truncate'.")


class HistoryTruncatedWarning(SessionWarning):
    """A history read returned only the newest ``max_depth`` messages of a longer branch (``result.truncated``)."""


# --- context --------------------------------------------------------------------------------------


class ContextError(AgentlabError):
    """Base class for context-block problems. Messages follow upstream's wording."""


class BlockNotFoundError(ContextError, KeyError):
    """No context block with this label."""

    def __str__(self) -> str:
        return str(self.args[0])


class BlockReadonlyError(ContextError):
    """The block cannot be written."""


class BlockBudgetError(ContextError, ValueError):
    """A write would exceed the block's max_tokens."""


class EmbedderError(ContextError, ValueError):
    """An embedder returned vectors of the wrong shape, or NaN/infinite values."""


# --- chat -----------------------------------------------------------------------------------------


class ChatError(AgentlabError):
    """Base class for problems talking to Claude."""


class NoApiKeyError(ChatError):
    """No Anthropic API key is configured."""


class InvalidClientError(ChatError, TypeError):
    """use_client() was given something that is not an Anthropic client (an API key string, for instance)."""


class ModelAPIError(ChatError):
    """The Messages API failed (rate limit, overload, invalid request, connection)."""

    def __init__(self, message: str, *, status: int | None = None, kind: str = "api", cause: Any = None) -> None:
        self.status = status
        self.kind = kind
        self.cause = cause
        super().__init__(message)


# --- datasets / evaluation ------------------------------------------------------------------------


class DatasetError(AgentlabError, ValueError):
    """A dataset file or frame is not in the expected format."""


class EvaluationError(AgentlabError, ValueError):
    """An evaluation cannot run as asked (a selection, a strategy option, saved results)."""


class UnknownCategoryError(EvaluationError):
    """A question category that the dataset does not have; the message lists the ones it has, with their names."""


class EmptySelectionError(EvaluationError):
    """The chosen categories, question ids and limit leave no question with evidence to score."""


# --- context (continued) --------------------------------------------------------------------------


class ContextProviderError(ContextError):
    """A context block's provider raised; the block is left out of the prompt until a reload works."""

    def __init__(self, label: str, cause: BaseException) -> None:
        self.label = label
        self.cause = cause
        super().__init__(
            f'The provider of block "{label}" failed: {type(cause).__name__}: {cause}. The prompt was rendered '
            "without it; fix the provider and call refresh_system_prompt()."
        )


# --- chat (continued) -----------------------------------------------------------------------------


class ModelRateLimitError(ModelAPIError):
    """HTTP 429 after the SDK's retries: wait, then agent.retry()."""


class ModelOverloadedError(ModelAPIError):
    """HTTP 529 (overloaded) after the SDK's retries: wait, then agent.retry()."""


class ModelServerError(ModelAPIError):
    """Another 5xx after the SDK's retries."""


class InvalidModelRequestError(ModelAPIError):
    """HTTP 400/404/413/422: the request itself was refused (model name, options, size)."""


class ModelAuthError(ModelAPIError):
    """HTTP 401/403: the key was rejected or may not use this model."""


class ModelConnectionError(ModelAPIError):
    """The API could not be reached (no network, DNS, timeout) after the SDK's retries."""


class TurnError(ChatError):
    """A turn cannot start or continue from the given message (e.g. retry() from an assistant reply)."""


# --- full-text search -----------------------------------------------------------------------------


class InvalidSearchError(AgentlabError, ValueError):
    """A full-text index or search call with a bad argument (unknown mode, negative limit, bad namespace)."""


class SearchIndexWarning(UserWarning):
    """The search index beside an agent's file could not be written (a full disk); searches stay right, from
    memory, and the index is rebuilt from the file when next opened."""


class CorruptIndexError(AgentlabError):
    """A file of the derived search index is damaged or not an index file. The index catches it and rebuilds the
    file from the agent's DuckDB file, which holds the truth; it reaches a caller only from the index's own
    file-level functions. ``path`` names the file."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        super().__init__(f"The search index file {self.path} {reason}; it is rebuilt from the agent's file.")


# --- exports (agentlab/portable.py, agentlab/multi.py) ----------------------------------------------


class ExportError(AgentlabError):
    """An agent export (Parquet folder and manifest) that cannot be written, read or restored here."""


# --- arguments --------------------------------------------------------------------------------------


class InvalidArgumentError(AgentlabError, ValueError):
    """An argument a call cannot use: NaN, infinite, negative, out of range, or text that is not valid UTF-8."""


class ExportDiskFullError(ExportError):
    """The disk ran out of space while an export folder or an imported agent file was written.

    ``path`` is the destination that was being written. Nothing there changed: an earlier export in that folder
    is intact, and an import created no agent file.
    """

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"The disk holding {path} is full ({detail}). Nothing there was changed. Free some space on that "
            "disk, or choose a destination on another one, and try again."
        )


class ExportMismatchError(ExportError):
    """An export's Parquet file does not hold what its manifest says (rows or columns): damaged or edited.

    ``table`` names the table, ``what`` is ``"rows"`` or ``"columns"``, ``expected`` comes from the manifest and
    ``found`` from the file. It is raised before anything is written.
    """

    def __init__(self, table: str, file: str, what: str, expected: object, found: object) -> None:
        self.table = table
        self.what = what
        self.expected = expected
        self.found = found
        super().__init__(
            f"Table {table!r}: the manifest says {what} {expected!r} but {file} holds {found!r}. The export is "
            "damaged or was edited after it was written; export the agent again."
        )


# --- serving (agentlab/serve) -------------------------------------------------------------------------


class ServeError(AgentlabError):
    """A problem serving agents to remote clients, or reaching one as a client."""


class ServeConfigError(ServeError, ValueError):
    """Agent classes that cannot be served as given: not Agent classes, two with one URL name, or not importable."""


class ServeRootLockedError(ServeError):
    """Another agentlab server already serves this root folder; each agent file has one owner."""

    def __init__(self, root: str, holder: str = "") -> None:
        self.root = root
        self.holder = holder
        super().__init__(
            f"Another agentlab server ({holder or 'unknown process'}) already serves the agents in {root}. "
            "Stop it, or serve another root (--root DIR)."
        )


class AgentConnectionError(ServeError, ConnectionError):
    """The client's WebSocket to an agent could not be opened, or was closed.

    ``status`` is the HTTP status of a refused upgrade (401, 404...), ``code`` and ``reason`` the close frame's.
    """

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None, reason: str = "") -> None:
        self.status = status
        self.code = code
        self.reason = reason
        super().__init__(message)


class RpcError(ServeError):
    """A method called over the WebSocket failed on the agent; the message is the agent's error text."""

    def __init__(self, method: str, message: str) -> None:
        self.method = method
        super().__init__(message)


class RpcTimeoutError(RpcError, TimeoutError):
    """A method called over the WebSocket gave no answer in time; it may still run on the agent."""

# --- experiments (agentlab/experiments) ---------------------------------------------------------------


class ExperimentError(AgentlabError):
    """A memory-policy experiment cannot run as asked (a policy, a dataset point, a request cache)."""


class UnknownPolicyError(ExperimentError, KeyError):
    """No memory policy by this name. ``name`` holds it and the message lists the known ones."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        super().__init__(f"No memory policy named {name!r}; known policies: {', '.join(known)}. "
                         "Pass a Policy object to use your own.")

    def __str__(self) -> str:  # KeyError would print the repr of the whole message
        return str(self.args[0])


class PricingError(ExperimentError):
    """No price is known for a model, so the cost of a run cannot be estimated before it is sent."""


class BudgetExceededError(ExperimentError):
    """Sending the next requests could cost more than the budget allows; nothing more was sent.

    ``spent`` is what this run has already spent (USD), ``needed`` the upper bound of what was about to be sent,
    ``budget`` the cap. Results received so far stay in the request cache, so a re-run does not pay for them again.
    """

    def __init__(self, spent: float, needed: float, budget: float, unsent: int) -> None:
        self.spent, self.needed, self.budget, self.unsent = spent, needed, budget, unsent
        super().__init__(
            f"Budget ${budget:.2f} would be exceeded: ${spent:.2f} spent so far, up to ${needed:.2f} more for the "
            f"next {unsent:,} requests. Nothing more was sent; raise the budget or ask for fewer questions or runs "
            "(answers already received are cached and cost nothing on a re-run)."
        )


class BatchError(ExperimentError):
    """A Message Batch could not be created, polled or read (the API refused it or it never ended)."""

# --- cluster (agentlab/cluster) -------------------------------------------------------------------


class ClusterError(AgentlabError):
    """Running agents, evaluations or simulations on Ray failed (cluster unreachable, a call Ray could not run)."""


class RayNotInstalledError(ClusterError, ImportError):
    """Ray is needed (``backend="ray"``, ``executor="ray"``, ``--ray``) but not installed."""


class ActorLostError(ClusterError):
    """The actor owning an agent died during a call that is not safe to send twice (SQL that writes, ``ask``).

    The actor was recreated, so the next call works; whether the lost call took effect is unknown, so the caller
    looks (``sql``, ``get_history``) before repeating it. ``actor_name`` names the actor, ``method`` the call.
    """

    def __init__(self, actor_name: str, method: str, detail: str = "") -> None:
        self.actor_name = actor_name
        self.method = method
        self.detail = detail
        super().__init__(
            f"The Ray actor {actor_name!r} died during {method}(){f' ({detail})' if detail else ''}; it has been "
            "recreated, but whether the call took effect is unknown. Check the agent's data, then repeat the call "
            "if it is missing."
        )
