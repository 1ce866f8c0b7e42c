"""Replaying conversations under memory policies, and recording what the model would see at each question.

:func:`replay` takes each conversation of a dataset and each :class:`~agentlab.experiments.policies.Policy`,
and appends the conversation's turns one by one (``Session.append_message``: the session's own automatic
compaction, through ``create_compact_function`` and ``compact_after``, fires exactly as it would live) into a
fresh session of its own agent: an in-memory DuckDB store, or with ``root=`` an agent file named
``"<policy>/<conversation>"`` under that folder. At each question's point in the conversation it reads what
the model would see (``session.get_history()``, ``session.estimate_tokens()``) and asks the session's search
tool (``session.search``) the question.

A question is asked after the turn named by its ``metadata["asked_after"]`` (a turn id; a ``asked_after``
column of a records file lands there), else after the conversation's last turn, which is how LoCoMo and
LongMemEval ask them. Evidence turns after that point are not counted (``evidence_unseen``).

Each evidence turn, at question time, is in exactly one state: ``verbatim`` (its message is in the visible
history as stored), ``summary`` (hidden, but a visible compaction summary carries it, by the policy's match
method, see :mod:`agentlab.experiments.matching`) or ``lost``; independently it is ``searchable`` when the
session's search ranks its message at or above the policy's ``k``. Search covers every stored message, so it
finds turns that compaction hid. After every compaction the state of every evidence turn seen so far is
recomputed, so the results say which evidence each compaction dropped and which summary later lost a fact it
had kept.

A policy with a memory design (:mod:`agentlab.experiments.designs`) also runs the design beside the session: it sees
every stored turn and the end of every dated session, and at each question it puts what its own retrieval finds
into the prompt (counted in ``prompt_tokens`` and ``retrieval_tokens``). For such a policy, and for any policy with
blocks, an evidence turn that is neither verbatim nor in a summary may be ``block`` (the blocks in the system prompt
carry it, by ``exact`` for rule-written blocks and ``fuzzy`` for model-written ones) or ``retrieved`` (the design's
recall shows the turn, or a written item derived from it, see :mod:`agentlab.experiments.memory_design`); for a
design, ``searchable`` means found by its own retrieval within its ``k``.

Invariants: stored messages are the dataset's turns as :func:`agentlab.eval.importing.turn_message` writes them,
one per turn, in order; two policies never share a store (search statistics are each session's own); under a
policy without compaction every evidence turn seen is verbatim.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import ExperimentError, InvalidArgumentError

from .matching import make_matcher
from .memory_design import DERIVED_MATCH, doc_of, recalled_rank
from .policies import Policy, resolve_policies

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation, Dataset, Question

    from .results import ReplayResults

__all__ = ["replay"]

_CHAT_ROLES = ("user", "assistant")


def _roles(conversation: Conversation) -> dict[str, str]:
    # The rule of agentlab.eval.importing: the first speaker is the user; LongMemEval's roles are kept.
    speakers = list(conversation.speakers) or list(dict.fromkeys(t.speaker for t in conversation.turns))
    if set(speakers) <= set(_CHAT_ROLES):
        return {s: s for s in speakers}
    return {s: ("user" if i == 0 else "assistant") for i, s in enumerate(speakers)}


def _joined_text(message: dict[str, Any]) -> str:
    return "\n".join(str(p.get("text") or "") for p in message.get("parts") or () if p.get("type") == "text")


@dataclass
class _Context:
    """What one policy's model sees at one question point (kept for answering with Claude)."""

    system: str
    messages: list[dict[str, Any]]  # visible history: {"kind": "turn"|"summary", "speaker", "date", "text"}
    prompt_tokens: int
    retrieved: dict[str, str] = field(default_factory=dict)  # question id -> what a design added for it


@dataclass
class _Run:
    """One policy replaying one conversation: its session, the evidence states and the logs."""

    policy: Policy
    conversation: Conversation
    session: Any
    matcher: Any
    evidence: dict[str, str]  # message id -> turn text, for every evidence turn of the questions in scope
    cited_by: dict[str, list[str]]
    turn_of: dict[str, str]  # message id -> turn id
    appended: int = 0
    state: dict[str, str] = field(default_factory=dict)  # message id -> verbatim | summary | lost
    compaction_rows: list[dict[str, Any]] = field(default_factory=list)
    drop_rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per question
    evidence_rows: list[dict[str, Any]] = field(default_factory=list)  # one per (question, evidence turn)
    design: Any = None  # the policy's DesignRun, if it has a design
    block_matcher: Any = None  # how evidence is found in the blocks of the system prompt

    def view(self) -> tuple[list[dict[str, Any]], set[str], Any]:
        """The visible history, its message ids, and its summaries prepared for matching."""
        history = self.session.get_history()
        ids = {m["id"] for m in history}
        summaries = [_joined_text(m) for m in history if str(m.get("id", "")).startswith("compaction_")]
        return history, ids, self.matcher.prepare("\n".join(summaries)) if summaries else None

    def status(self, mid: str, ids: set[str], prepared: Any) -> str:
        if mid in ids:
            return "verbatim"
        if prepared is not None and self.matcher.contains(self.evidence[mid], prepared):
            return "summary"
        return "lost"

    def on_compacted(self, event: dict[str, Any]) -> None:
        if event.get("type") != "compacted":
            return
        record = event.get("compaction") or {}
        history, ids, prepared = self.view()
        index = len(self.compaction_rows) + 1
        hidden = kept = lost = forgotten = 0
        for mid, before in list(self.state.items()):
            after = self.status(mid, ids, prepared)
            if after == before:
                continue
            self.state[mid] = after
            if before == "verbatim":
                hidden += 1
                kept += after == "summary"
                lost += after == "lost"
            elif before == "summary" and after == "lost":
                forgotten += 1
            self.drop_rows.append({
                "policy": self.policy.name, "conversation_id": self.conversation.id, "compaction": index,
                "compaction_id": record.get("id"), "appended_turns": self.appended,
                "turn_id": self.turn_of[mid], "before": before, "after": after,
                "cited_by": list(self.cited_by.get(mid, ())), "text": self.evidence[mid],
            })
        self.compaction_rows.append({
            "policy": self.policy.name, "conversation_id": self.conversation.id, "compaction": index,
            "compaction_id": record.get("id"), "appended_turns": self.appended,
            "tokens_before": record.get("tokens_before"), "tokens_after": record.get("tokens_after"),
            "messages_covered": record.get("messages_covered"), "history_messages": len(history),
            "evidence_hidden": hidden, "evidence_kept_in_summary": kept, "evidence_lost": lost,
            "evidence_dropped_from_summary": forgotten,
        })


def _session_for(policy: Policy, run_target: Any, conversation: Conversation, claude: Callable[[], Any] | None,
                 shared: Any) -> tuple[Any, Any]:
    """A session configured by ``policy`` (blocks, frozen prompt, compaction) on a fresh or cleared target, and the
    run of its memory design (or None)."""
    from agentlab.session import Session, create_compact_function

    session = Session(run_target, conversation.id)
    session.clear_messages()  # an agent file kept from an earlier run starts over
    for block in policy.blocks:
        session.with_context(block.label, description=block.description, max_tokens=block.max_tokens)
    design = None
    if policy.design is not None:
        design = policy.design.start(session, speakers=_speakers(conversation), claude=claude, shared=shared)
        design.configure()
    if policy.blocks or design is not None:
        for block in policy.blocks:
            session.set_block(block.label, "")
        session.refresh_system_prompt()  # frozen once; refreshed after compactions and between dataset sessions
    if policy.compaction is not None:
        c = policy.compaction
        summarize = _summarizer(policy, claude)
        session.on_compaction(create_compact_function(
            summarize, protect_head=c.protect_head, tail_token_budget=c.tail_token_budget,
            min_tail_messages=c.min_tail_messages)).compact_after(c.threshold)
    return session, design


def _writer_name(policy: Policy) -> str:
    """Who writes the blocks, for the ``auto`` block match: ``"extractive"`` (rules) or ``"claude"``."""
    writer = getattr(policy.design, "writer", None) if policy.design is not None else None
    claude = writer == "claude" or (policy.design is None and policy.memory_writer is not None)
    return "claude" if claude else "extractive"


def _speakers(conversation: Conversation) -> list[str]:
    return list(conversation.speakers) or list(dict.fromkeys(t.speaker for t in conversation.turns))


def _summarizer(policy: Policy, claude: Callable[[], Any] | None) -> Callable[[str], str]:
    name = policy.summarizer_name
    if callable(policy.summarizer):
        return policy.summarizer
    if name == "claude":
        from agentlab.chat import ClaudeSummarizer

        if claude is None:
            raise ExperimentError(f"Policy {policy.name!r} summarizes with Claude; pass client= or set "
                                  "ANTHROPIC_API_KEY.")
        return ClaudeSummarizer(claude())
    from agentlab.chat import ExtractiveSummarizer

    return ExtractiveSummarizer()


def _question_points(conversation: Conversation, questions: list[Question]) -> dict[int, list[Question]]:
    index = {t.id: i for i, t in enumerate(conversation.turns)}
    last = len(conversation.turns) - 1
    points: dict[int, list[Question]] = {}
    for q in questions:
        after = q.metadata.get("asked_after")
        if after is None:
            at = last
        elif str(after) in index:
            at = index[str(after)]
        else:
            raise ExperimentError(f"Question {q.id!r} is asked after turn {after!r}, which is not a turn of "
                                  f"conversation {conversation.id!r}.")
        points.setdefault(at, []).append(q)
    return points


def _measure(run: _Run, questions: list[Question], at: int, tokens_after: list[int], turn_index: dict[str, int],
             keep: dict[Any, _Context] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    session, policy, conversation, design = run.session, run.policy, run.conversation, run.design
    history, ids, prepared = run.view()
    prompt_tokens = session.estimate_tokens()
    system = session.system_prompt if policy.blocks or design is not None else ""
    blocks = "\n".join(b.content for b in session.get_context_blocks() if b.content) if system else ""
    in_blocks = run.block_matcher.prepare(blocks) if blocks else None
    point = conversation.turns[at].id
    context = None
    if keep is not None:
        context = keep[(policy.name, conversation.id, point)] = _Context(system, [_visible(m) for m in history],
                                                                          prompt_tokens)
    rows, evidence_rows = [], []
    compactions = len(session.get_compactions())
    retrieval = None if design is None else design.design.retrieval
    for q in questions:
        seen = [t for t in q.evidence if turn_index[t] <= at]
        recall = None if design is None else design.recall(q.question)
        rank: dict[str, int] = {}
        if recall is None:
            hits = session.search(q.question, mode=policy.search.mode, limit=policy.search.k)
            rank = {h.id: i + 1 for i, h in enumerate(hits)}
        elif context is not None:
            context.retrieved[q.id] = recall.text
        counts = {"verbatim": 0, "summary": 0, "block": 0, "retrieved": 0, "lost": 0}
        searchable = reachable = 0
        for t in seen:
            mid = f"{conversation.id}/{t}"
            state = run.status(mid, ids, prepared)
            if state == "lost" and in_blocks is not None and run.block_matcher.contains(run.evidence[mid], in_blocks):
                state = "block"
            found_at = rank.get(mid) if recall is None else recalled_rank(recall, mid, run.evidence[mid])
            if state == "lost" and recall is not None and found_at is not None:
                state = "retrieved"
            counts[state] += 1
            searchable += found_at is not None
            reachable += found_at is not None or state != "lost"
            turn = conversation.turns[turn_index[t]]
            evidence_rows.append({
                "policy": policy.name, "conversation_id": conversation.id, "question_id": q.id,
                "category": q.category, "turn_id": t, "dataset_session": turn.session_id,
                "distance_turns": at - turn_index[t], "distance_tokens": tokens_after[at] - tokens_after[turn_index[t]],
                "status": state, "search_rank": found_at, "searchable": found_at is not None,
            })
        in_prompt = counts["verbatim"] + counts["summary"] + counts["block"] + counts["retrieved"]
        extra = 0 if recall is None else recall.tokens
        rows.append({
            "policy": policy.name, "conversation_id": conversation.id, "question_id": q.id, "category": q.category,
            "asked_after": point, "prompt_tokens": prompt_tokens + extra, "history_messages": len(history),
            "evidence_total": len(seen), "evidence_verbatim": counts["verbatim"],
            "evidence_in_summary": counts["summary"], "summary_match": run.matcher.name,
            "evidence_searchable": searchable,
            "search_mode": policy.search.mode if retrieval is None else str(retrieval.method),
            "search_k": policy.search.k if retrieval is None else retrieval.k,
            "evidence_kept": counts["verbatim"] + counts["summary"], "evidence_reachable": reachable,
            "evidence_unseen": len(q.evidence) - len(seen), "compactions": compactions,
            "compaction_errors": len(run.errors), "evidence_in_block": counts["block"],
            "evidence_retrieved": counts["retrieved"], "evidence_in_prompt": in_prompt, "retrieval_tokens": extra,
            "block_match": run.block_matcher.name if in_blocks is not None or design is not None else None,
            "item_match": DERIVED_MATCH if design is not None else None,
        })
    return rows, evidence_rows


def _visible(message: dict[str, Any]) -> dict[str, Any]:
    meta = message.get("metadata") or {}
    if str(message.get("id", "")).startswith("compaction_"):
        return {"kind": "summary", "text": _joined_text(message)}
    return {"kind": "turn", "speaker": meta.get("speaker"), "date": meta.get("date"),
            "caption": meta.get("blip_caption"), "text": _joined_text(message)}


def _add_frame_columns(run: _Run) -> None:
    """Complete the compaction log from the session's own frame (``compactions_df``): summary size and ratio."""
    if not run.compaction_rows:
        return
    frame = run.session.compactions_df.arrow().to_pylist()
    stored = {r["id"]: r for r in frame if r["kind"] == "compaction"}
    for row in run.compaction_rows:
        record = stored.get(row["compaction_id"], {})
        row["summary_tokens"] = record.get("summary_tokens")
        row["compression_ratio"] = record.get("compression_ratio")


def _target(policy: Policy, conversation: Conversation, root: Path | None) -> Any:
    if root is None:
        from agentlab.store import Store

        return Store()
    from agentlab.agent import Agent, get_agent

    return get_agent(Agent, f"{policy.name}/{conversation.id}", root=root)


def _replay_one(policy: Policy, conversation: Conversation, questions: list[Question],
                points: dict[int, list[Question]], *, match: Any, root: Path | None,
                claude: Callable[[], Any] | None, keep: dict[Any, _Context] | None,
                writer: Callable[..., Any] | None, shared: Any = None) -> _Run:
    from agentlab.context import estimate_message_tokens
    from agentlab.eval.importing import turn_message

    roles = _roles(conversation)
    turns = conversation.turns
    messages = [turn_message(conversation, t, role=roles.get(t.speaker, "assistant"), offset=t.index) for t in turns]
    turn_index = {t.id: i for i, t in enumerate(turns)}
    tokens_after = [0] * len(turns)  # tokens_after[i]: estimated tokens of turns 0..i
    running = 0
    for i, m in enumerate(messages):
        running += estimate_message_tokens([m])
        tokens_after[i] = running
    cited: dict[str, list[str]] = {}
    turn_of: dict[str, str] = {}
    for q in questions:
        for t in q.evidence:
            mid = f"{conversation.id}/{t}"
            cited.setdefault(mid, []).append(q.id)
            turn_of[mid] = t
    evidence = {mid: turns[turn_index[t]].text for mid, t in turn_of.items()}
    target = _target(policy, conversation, root)
    try:
        session, design = _session_for(policy, target, conversation, claude, shared)
        run = _Run(policy, conversation, session, make_matcher(match, policy.summarizer_name), evidence, cited,
                   turn_of, design=design, block_matcher=make_matcher(match, _writer_name(policy)))
        session.on_compacted(run.on_compacted)
        session.on_compaction_error(run.errors.append)
        docs: list[Any] = []  # the stored turns of the current dataset session, for the design
        if design is not None:
            design.prepare([q.question for q in questions])
        for i, message in enumerate(messages):
            session.append_message(message)
            run.appended = i + 1
            mid = message["id"]
            if mid in evidence:
                run.state[mid] = "verbatim"
            if design is not None:
                docs.append(doc_of(message))
                design.appended(docs[-1])
            if (policy.blocks or design is not None) and (i + 1 == len(turns) or
                                                         turns[i + 1].session_id != turns[i].session_id):
                if writer is not None:
                    start = next(j for j in range(i, -1, -1)
                                 if j == 0 or turns[j - 1].session_id != turns[i].session_id)
                    writer(session, turns[start:i + 1])
                if design is not None:
                    design.session_ended(docs)
                    docs = []
                session.refresh_system_prompt()  # the next dataset session opens with the blocks as written
            if i in points:
                rows, evidence_rows = _measure(run, points[i], i, tokens_after, turn_index, keep)
                run.rows += rows
                run.evidence_rows += evidence_rows
        _add_frame_columns(run)
        return run
    finally:
        target.close()


def replay(
    dataset: Dataset,
    policies: Any = None,
    *,
    categories: Iterable[int | str] | None = None,
    conversations: int | Sequence[str] | None = None,
    match: Any = "auto",
    root: str | os.PathLike[str] | None = None,
    keep_prompts: bool = False,
    client: Any = None,
    cache: Any = "default",
    embeddings: Any = "default",
    progress: bool = True,
) -> ReplayResults:
    """Replay every conversation of ``dataset`` under every policy, and measure each question's point.

    Args:
        dataset: Conversations with questions (``agentlab.eval.datasets.load_locomo(path)``, ``load_bundled()``...).
        policies: Policy objects or names, a comma-separated string, or None for
            :data:`~agentlab.experiments.policies.DEFAULT_POLICIES`.
        categories: Only questions of these categories (all when None).
        conversations: Only the first n conversations, or those with these ids.
        match: How evidence is found in a summary: ``"auto"`` (exact for extractive summaries, fuzzy
            otherwise), ``"exact"``, ``"fuzzy"``, ``"fuzzy>=0.5"``, or a matcher object.
        root: Keep each (policy, conversation) agent as a DuckDB file under this folder (default: in memory).
        keep_prompts: Keep what the model sees at each question point (needed by
            :func:`agentlab.experiments.answer`).
        client: An ``anthropic.Anthropic`` client for policies that call Claude (default: from the settings).
        cache: Where Claude calls made while replaying are cached (see :class:`~agentlab.experiments.cache.
            RequestCache`); ``None`` keeps them in memory.
        embeddings: Where the embeddings of memory designs' dense retrieval are cached: ``"default"`` (the
            evaluation harness's file, ``$AGENTLAB_HOME/cache/embeddings.duckdb``), a path, an
            :class:`~agentlab.eval.EmbeddingCache`, or None (in memory for this replay).
        progress: Show a progress bar over (policy, conversation) pairs.

    Returns:
        :class:`~agentlab.experiments.results.ReplayResults`.

    Raises:
        UnknownPolicyError, InvalidArgumentError: A bad policy list or match method, or ``conversations`` or
            ``categories`` that select nothing.
        ExperimentError: A question names a turn its conversation lacks, or a policy needs Claude and no key
            or client is available.
    """
    from .results import ReplayResults

    chosen = resolve_policies(policies)
    for policy in chosen:
        make_matcher(match, policy.summarizer_name)  # a bad method fails before any work
    wanted = None if categories is None else set(categories)
    selected = list(dataset.conversations)
    if isinstance(conversations, bool) or (isinstance(conversations, int) and conversations < 1):
        raise InvalidArgumentError(f"conversations must be a whole number of 1 or more (the first n), or a list "
                                   f"of conversation ids, not {conversations!r}.")
    if isinstance(conversations, int):
        selected = selected[:conversations]
    elif conversations is not None:
        ids = {conversations} if isinstance(conversations, str) else set(conversations)
        selected = [c for c in selected if c.id in ids]
        if not selected:
            examples = ", ".join(c.id for c in dataset.conversations[:5])
            raise InvalidArgumentError(f"No conversation with the ids {sorted(map(str, ids))} in this dataset; its "
                                       f"ids are like {examples}.")
    asked = {c.id: [q for q in c.questions if wanted is None or q.category in wanted] for c in selected}
    if wanted is not None and not any(asked.values()):
        found = sorted({str(q.category) for c in selected for q in c.questions})
        raise InvalidArgumentError(f"No question of the categories {sorted(wanted, key=str)} in the conversations "
                                   f"chosen; their questions have the categories {', '.join(found) or 'none'}.")
    points = {c.id: _question_points(c, asked[c.id]) for c in selected}  # a bad asked_after fails before any work
    claude, opened = _claude_factory(chosen, client, cache)
    folder = Path(root) if root is not None else None
    keep: dict[Any, _Context] | None = {} if keep_prompts else None
    pairs = [(p, c) for p in chosen for c in selected]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pairs), desc="Replaying", unit="conversation")
    rows: list[dict[str, Any]] = []
    evidence_rows: list[dict[str, Any]] = []
    compaction_rows: list[dict[str, Any]] = []
    drop_rows: list[dict[str, Any]] = []
    seconds: dict[str, float] = {p.name: 0.0 for p in chosen}
    from .retrieval import Shared

    shared = Shared(embeddings)  # designs embed each text once across policies and conversations
    holding = shared.embedding_cache.hold()  # the cache file stays open for the replay, then is released
    holding.__enter__()
    try:
        for policy, conversation in pairs:
            started = time.perf_counter()
            if bar is not None:
                bar.set_postfix_str(f"{policy.name} {conversation.id}")
            run = _replay_one(policy, conversation, asked[conversation.id], points[conversation.id], match=match,
                              root=folder, claude=claude, keep=keep, writer=_writer(policy, claude), shared=shared)
            rows += run.rows
            evidence_rows += run.evidence_rows
            compaction_rows += run.compaction_rows
            drop_rows += run.drop_rows
            seconds[policy.name] += time.perf_counter() - started
            if bar is not None:
                bar.update(1)
    finally:
        holding.__exit__(None, None, None)
        if bar is not None:
            bar.close()
        if opened is not None:
            opened.close()  # a cache file opened here is released, so other processes may use it
    return ReplayResults.build(dataset, chosen, rows, evidence_rows, compaction_rows, drop_rows, seconds, keep)


def _claude_factory(policies: list[Policy], client: Any, cache: Any) -> tuple[Callable[[], Any] | None, Any]:
    """A function returning the (caching) client for policies that call Claude, or None when none does; and the
    cache when this call opened it (to be closed after the replay)."""
    if not any(p.needs_model for p in policies):
        return None, None
    from agentlab.chat import build_client, resolve_settings

    from .cache import CachedClient, RequestCache

    if client is None:
        client = build_client(resolve_settings())  # NoApiKeyError says how to configure a key
    store = RequestCache.open(cache)
    cached = CachedClient(client, store, model=resolve_settings().model)
    return (lambda: cached), (None if isinstance(cache, RequestCache) else store)


def _writer(policy: Policy, claude: Callable[[], Any] | None) -> Callable[..., Any] | None:
    if policy.memory_writer is None:
        return None
    if callable(policy.memory_writer):
        return policy.memory_writer
    from .memory import ClaudeMemoryWriter

    if claude is None:  # pragma: no cover - _claude_factory raised already
        raise ExperimentError(f"Policy {policy.name!r} writes memory with Claude; set ANTHROPIC_API_KEY.")
    return ClaudeMemoryWriter(claude())
