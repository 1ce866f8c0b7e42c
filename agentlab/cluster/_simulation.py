"""Simulated users: a dataset's conversations replayed as N users, one agent (one DuckDB file) each.

:func:`simulate` gives user ``i`` the conversation ``i % len(conversations)`` and appends its turns to the user's
default session one ``append_message`` at a time, as a live chat appends them: each turn is its own durable write,
and the session compacts automatically under the chosen :class:`CompactionPolicy` (by default the reference
compaction function with the offline :class:`~agentlab.chat.ExtractiveSummarizer`, so no API key is
needed). The first speaker of a conversation is the ``user``, the other the ``assistant``. Afterwards every
agent's messages are gathered into one DataFrame: with :func:`agentlab.open_many` over the files when this process
can read them (one machine, or a shared file system), else by each worker over the files it wrote.

With ``executor="ray"`` the users are spread over worker actors (one CPU each), each replaying its users one after
another with the agents open in its own process. An actor per user would cost a process per user (a Ray worker
with agentlab loaded is tens of MB; ``AgentHandle.memory()`` shows it), so a thousand users share a few workers.

Invariants: a user's files are written only by the worker replaying it and closed before gathering; a root that
already holds simulated users is refused (a second replay would only find duplicates); the frames do not depend on
the executor or the number of workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.agent import Agent
from agentlab.errors import InvalidArgumentError

from ._remote import dispatch, ensure_ray, guarded, process_memory, require_ray, unwrap

__all__ = ["CompactionPolicy", "SimulatedUser", "Simulation", "simulate"]


class SimulatedUser(Agent):
    """The agent of one simulated user (files under ``<root>/simulated-user/``)."""


@dataclass(frozen=True)
class CompactionPolicy:
    """How a simulated user's session compacts (see :func:`agentlab.create_compact_function`).

    Attributes:
        after_tokens: Compact after an append that leaves the session's estimate above this; ``None`` never does.
        protect_head: Messages at the start never summarised.
        tail_token_budget: Tokens of recent messages kept verbatim.
        min_tail_messages: Messages at the end never summarised.
        summarizer: ``prompt -> summary``; ``None`` is :class:`~agentlab.chat.ExtractiveSummarizer`.
    """

    after_tokens: int | None = 1200
    protect_head: int = 2
    tail_token_budget: int = 400
    min_tail_messages: int = 4
    summarizer: Callable[[str], str] | None = None

    def __post_init__(self) -> None:
        for key in ("protect_head", "tail_token_budget", "min_tail_messages"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgumentError(f"{key} must be an int of 0 or more, not {value!r}.")
        if self.after_tokens is not None:
            if not isinstance(self.after_tokens, int) or isinstance(self.after_tokens, bool) or self.after_tokens < 1:
                raise InvalidArgumentError(f"after_tokens must be a positive int or None, not {self.after_tokens!r}.")
            if self.tail_token_budget >= self.after_tokens:
                raise InvalidArgumentError(
                    f"tail_token_budget ({self.tail_token_budget}) must be below after_tokens ({self.after_tokens}): "
                    "a tail that large leaves nothing to compact, so every compaction would do nothing.")

    def apply(self, session: Any) -> Any:
        """Register this policy on ``session``; returns it."""
        if self.after_tokens is None:
            return session
        from agentlab.chat import ExtractiveSummarizer
        from agentlab.session import create_compact_function

        summarize = self.summarizer or ExtractiveSummarizer()
        fn = create_compact_function(summarize, protect_head=self.protect_head,
                                     min_tail_messages=self.min_tail_messages, tail_token_budget=self.tail_token_budget)
        return session.on_compaction(fn).compact_after(self.after_tokens)


@dataclass
class Simulation:
    """What :func:`simulate` did.

    Attributes:
        frames: One row per stored message of every user (``open_many(...).messages_df()``'s columns:
            ``agent``, ``session_id``, ``seq``, ``id``, ``role``, ``text``, ``tokens``...).
        users, messages, compactions: Users replayed, messages appended, compactions stored.
        seconds: Wall time of the replay (opening, appending, compacting, closing; not the gathering).
        root: The root the agents live under.
        workers: Per worker (one entry when run here): ``users``, ``messages``, ``seconds`` and the process's
            ``memory`` (``rss``, ``pss``, ``uss`` bytes) after its last user.
    """

    frames: Any
    users: int
    messages: int
    compactions: int
    seconds: float
    root: Path
    workers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def __repr__(self) -> str:
        return (f"Simulation(users={self.users}, messages={self.messages}, compactions={self.compactions}, "
                f"seconds={self.seconds:.1f}, {self.messages_per_second:,.0f} msg/s, workers={len(self.workers)})")


def conversation_messages(conversation: Any, turns: int | None = None) -> list[dict[str, Any]]:
    """The conversation's first ``turns`` turns (all when None) as chat messages, ids kept."""
    first = conversation.speakers[0] if conversation.speakers else None
    return [{"id": turn.id, "role": "user" if turn.speaker == first else "assistant",
             "parts": [{"type": "text", "text": turn.text}]} for turn in conversation.turns[:turns]]


def _replay(assignments: list[tuple[str, str]], conversations: dict[str, Any], root: str, policy: CompactionPolicy,
            turns: int | None, tick: Callable[[], None] | None = None) -> dict[str, Any]:
    from agentlab.agent import get_agent
    from agentlab.session import Session

    started = time.perf_counter()
    scripts: dict[str, list[dict[str, Any]]] = {}
    messages = compactions = 0
    for name, cid in assignments:
        script = scripts.get(cid)
        if script is None:
            script = scripts[cid] = conversation_messages(conversations[cid], turns)
        agent = get_agent(SimulatedUser, name, root=root)
        try:
            session = policy.apply(Session.create(agent))
            for message in script:
                session.append_message(message)
            messages += len(script)
            compactions += agent.sql("SELECT count(*) AS n FROM compactions")[0]["n"]
        finally:
            agent.close()
        if tick is not None:
            tick()
    return {"users": len(assignments), "messages": messages, "compactions": compactions,
            "seconds": time.perf_counter() - started, "memory": process_memory()}


def _readable_here(paths: list[str]) -> bool:
    """Whether this process sees every agent file (one machine, or a shared file system)."""
    return all(Path(p).is_file() for p in paths)


def _frames(paths: list[str]) -> Any:
    from agentlab.frames import open_many

    with open_many(paths) as many:
        return many.messages_df()


class SimulationWorker:
    """A Ray worker that replays its share of the users."""

    def __init__(self, conversations: dict[str, Any], root: str, policy: CompactionPolicy,
                 turns: int | None) -> None:
        self.conversations, self.root, self.policy, self.turns = conversations, root, policy, turns
        self.total = {"users": 0, "messages": 0, "compactions": 0, "seconds": 0.0}

    def replay(self, assignments: list[tuple[str, str]]) -> tuple[bool, Any]:
        def run() -> dict[str, Any]:
            done = _replay(assignments, self.conversations, self.root, self.policy, self.turns)
            for key in self.total:
                self.total[key] += done[key]
            return done

        return guarded(run)

    def summary(self) -> tuple[bool, Any]:
        return guarded(lambda: {**self.total, "memory": process_memory()})

    def frames(self, paths: list[str]) -> tuple[bool, Any]:
        return guarded(_frames, paths)


def _check(dataset: Any, users: Any, turns: Any, folder: Path) -> None:
    if not isinstance(users, int) or isinstance(users, bool) or users < 1:
        raise InvalidArgumentError(f"users must be a positive int, not {users!r}.")
    if turns is not None and (not isinstance(turns, int) or isinstance(turns, bool) or turns < 1):
        raise InvalidArgumentError(f"turns must be a positive int or None, not {turns!r}.")
    if not dataset.conversations:
        raise InvalidArgumentError(f"The dataset {dataset.name!r} has no conversations to replay.")
    existing = sum(1 for _ in folder.glob("*.duckdb")) if folder.is_dir() else 0
    if existing:
        raise InvalidArgumentError(f"{folder} already holds {existing} simulated users; choose another root, or "
                                   "delete that folder to replay again.")


def simulate(dataset: Any, users: int, *, turns: int | None = None, root: Any = None,
             policy: CompactionPolicy | None = None, executor: str = "local", address: str | None = None,
             workers: int | None = None, progress: bool = True) -> Simulation:
    """Replay ``dataset`` as ``users`` users, one agent each, then gather every agent's messages.

    Args:
        dataset: A :class:`~agentlab.eval.datasets.Dataset` (``load_locomo``, ``load_longmemeval``, ``load_bundled``).
        users: How many users; user ``i`` replays conversation ``i % len(dataset.conversations)``.
        turns: Replay only each conversation's first ``turns`` turns (default all).
        root: Where the agents live (default ``$AGENTLAB_HOME``, else ``./agentlab-data``); must not already hold
            simulated users.
        policy: The compaction policy (default :class:`CompactionPolicy()`).
        executor: ``"local"`` (this process) or ``"ray"`` (worker actors).
        address: The Ray cluster to join (``executor="ray"`` only; default a local Ray or ``$RAY_ADDRESS``).
        workers: Worker actors for ``"ray"`` (default: the cluster's CPUs, at most one per user).
        progress: Show a ``tqdm.auto`` bar over users.

    Raises:
        InvalidArgumentError: A bad count, an empty dataset, or a root that already holds simulated users.
        ClusterError: Ray could not be reached, or a worker died.
    """
    from agentlab.store import agent_path, kebab_case, resolve_root

    if executor not in ("local", "ray"):
        raise InvalidArgumentError(f"executor must be 'local' or 'ray', not {executor!r}.")
    policy = policy or CompactionPolicy()
    base = resolve_root(root)
    _check(dataset, users, turns, base / kebab_case(SimulatedUser.__name__))
    width = len(str(users - 1))
    conversations = {c.id: c for c in dataset.conversations}
    order = list(conversations)
    plan = [(f"user-{i:0{width}d}", order[i % len(order)]) for i in range(users)]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=users, desc="Simulating users" + (" on Ray" if executor == "ray" else ""), unit="user")
    try:
        if executor == "local":
            started = time.perf_counter()
            done = _replay(plan, conversations, str(base), policy, turns, (lambda: bar.update(1)) if bar else None)
            owners: dict[Any, Any] = {}
            seconds, per_worker = time.perf_counter() - started, [done]
        else:
            seconds, per_worker, owners = _on_ray(plan, conversations, str(base), policy, turns, address, workers, bar)
    finally:
        if bar is not None:
            bar.close()
    paths = [str(agent_path(SimulatedUser.__name__, name, base)) for name, _ in plan]
    try:
        # Where the files are on the workers' nodes, each worker gathers its own.
        frames = _frames(paths) if _readable_here(paths) else _gather_remote(owners, paths, plan)
    finally:
        for actor in owners:
            require_ray().kill(actor)
    total = {key: sum(w[key] for w in per_worker) for key in ("messages", "compactions")}
    return Simulation(frames, users, total["messages"], total["compactions"], seconds, base,
                      [{k: w[k] for k in ("users", "messages", "seconds", "memory")} for w in per_worker])


def _on_ray(plan: list[tuple[str, str]], conversations: dict[str, Any], root: str, policy: CompactionPolicy,
            turns: int | None, address: str | None, workers: int | None, bar: Any) -> tuple[float, list[Any], dict]:
    ensure_ray(address)
    ray = require_ray()
    from ray.exceptions import RayActorError

    from agentlab.errors import ClusterError

    count = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    count = max(1, min(count, len(plan)))
    shared = ray.put(conversations)
    actors = [ray.remote(SimulationWorker).options(num_cpus=1).remote(shared, root, policy, turns)
              for _ in range(count)]
    size = max(1, min(50, len(plan) // (count * 4) or 1))  # small enough to balance, large enough to be cheap
    chunks = [plan[i : i + size] for i in range(0, len(plan), size)]
    owners: dict[Any, list[str]] = {actor: [] for actor in actors}
    try:
        unwrap(ray.get(actors[0].summary.remote()), "a Ray simulation worker")  # started: time the replay only
        started = time.perf_counter()
        for chunk, reply, actor in dispatch(actors, chunks, lambda a, c: a.replay.remote(c)):
            unwrap(reply, "a Ray simulation worker")
            owners[actor] += [name for name, _ in chunk]
            if bar is not None:
                bar.update(len(chunk))
        seconds = time.perf_counter() - started
        per_worker = [unwrap(r, "a Ray simulation worker") for r in ray.get([a.summary.remote() for a in actors])]
    except RayActorError as exc:
        for actor in actors:
            ray.kill(actor)
        raise ClusterError(f"A Ray simulation worker died: {str(exc).strip().splitlines()[0]}") from None
    except BaseException:
        for actor in actors:
            ray.kill(actor)
        raise
    return seconds, per_worker, owners


def _gather_remote(owners: dict[Any, list[str]], paths: list[str], plan: list[tuple[str, str]]) -> Any:
    import pandas as pd

    ray = require_ray()
    by_name = dict(zip((name for name, _ in plan), paths))
    refs = [actor.frames.remote([by_name[n] for n in names]) for actor, names in owners.items() if names]
    frames = [unwrap(reply, "a Ray simulation worker") for reply in ray.get(refs)]
    return pd.concat(frames, ignore_index=True).sort_values(["agent", "seq"], ignore_index=True)
