"""The offline tour behind ``agentlab demo``: each step prints what it did.

Later features add their own steps here; each step uses only the public API.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TextIO

from agentlab.agent import Agent, get_agent


class DemoAgent(Agent):
    """The agent the demo creates: a tiny counter state."""

    initial_state: ClassVar[Any] = {"visits": 0, "notes": []}

    def validate_state_change(self, next_state: Any, source: Any) -> None:
        if not isinstance(next_state, dict) or next_state.get("visits", 0) < 0:
            raise ValueError("visits must be a non-negative count")


def _step_agent(root: Path, say: Callable[[str], None]) -> None:
    agent = get_agent(DemoAgent, "demo-user", root=root)
    say(f"opened agent {agent.name!r} in {agent.path.relative_to(root)}")
    say(f"initial state: {agent.state}")
    agent.merge_state({"visits": agent.state["visits"] + 1, "notes": ["likes espresso"]})
    say(f"state after merge_state: {agent.state}")
    try:
        agent.set_state({"visits": -1})
    except Exception as exc:  # the validator's refusal is part of the tour
        say(f"rejected a bad state change: {exc}")
    agent.sql("CREATE TABLE IF NOT EXISTS notes (id INTEGER, body VARCHAR)")
    agent.sql("INSERT INTO notes VALUES (?, ?), (?, ?)", 1, "first", 2, "Robert'); DROP TABLE notes;--")
    rows = agent.sql("SELECT id, body FROM notes WHERE id >= ? ORDER BY id", 1)
    say(f"SQL with bound parameters returned {len(rows)} rows: {rows}")
    agent.close()


def _step_session(root: Path, say: Callable[[str], None]) -> None:
    from agentlab.chat import ExtractiveSummarizer
    from agentlab.session import Session, create_compact_function

    agent = get_agent(DemoAgent, "demo-user", root=root)
    session = Session.create(agent)

    def text(mid: str, role: str, body: str) -> dict:
        return {"id": mid, "role": role, "parts": [{"type": "text", "text": body}]}

    session.append_message(text("q1", "user", "Where should I travel in spring? I like trains and old towns."))
    session.append_message(text("r1", "assistant", "Try Porto: old town, river views, and trains from Lisbon."))
    session.append_message(text("r2", "assistant", "Try Ljubljana: a small old town with trains to Vienna."),
                           parent_id="q1")
    say(f"two replies to q1 make two branches: {[m['id'] for m in session.get_branches('q1')]}")
    say(f"history of r1: {[m['id'] for m in session.get_history('r1')]}; current leaf: {session.latest_leaf_id()}")
    for i in range(8):
        session.append_message(text(f"u{i}", "user", f"Day {i + 1}: tell me about museums and food in town {i}."))
        session.append_message(text(f"a{i}", "assistant", f"Day {i + 1}: the museum opens at nine; try stew {i}."))
    hits = session.search("trains", mode="any")
    say(f"BM25 search 'trains' finds {[h.id for h in hits]} (on current branch: {[h.on_current_branch for h in hits]})")
    session.on_compaction(create_compact_function(ExtractiveSummarizer(), protect_head=1, tail_token_budget=60))
    before = session.estimate_tokens()
    result = session.compact()
    assert result is not None, "the demo's history is long enough to compact"
    history = session.get_history()
    say(f"compaction {result['from_message_id']}..{result['to_message_id']}: {before} -> "
        f"{session.estimate_tokens()} estimated tokens; {len(history)} messages read, "
        f"{session.path_length()} stored (nothing deleted)")
    frame = session.messages_df()
    say(f"messages_df(): {len(frame)} rows x {len(frame.columns)} columns, "
        f"{int(frame['covered_by_compaction'].notna().sum())} covered by the compaction")
    agent.close()


def _step_context_and_chat(root: Path, say: Callable[[str], None]) -> None:
    from agentlab.chat import ChatAgent, OfflineClaude

    class DemoChat(ChatAgent):
        def configure_session(self, session: Any) -> Any:
            return session.with_context("memory", description="Facts about the user", max_tokens=200)

    agent = get_agent(DemoChat, "demo-user", root=root)
    agent.use_client(OfflineClaude().client())  # the real anthropic SDK against an in-process stand-in
    say(f"tools the model gets: {[t['name'] for t in agent.session.tools()]}")
    turn = agent.ask("Remember that I take my coffee black.")
    say(f"offline turn: {turn.steps} API calls, tools used {[c.name for c in turn.tool_calls]}, "
        f"memory now {agent.session.get_context_block('memory').content!r}")
    agent.session.refresh_system_prompt()
    prompt = agent.session.freeze_system_prompt()
    say("system prompt after a refresh:\n      " + prompt.replace("\n", "\n      "))
    agent.close()


def _step_eval(root: Path, say: Callable[[str], None]) -> None:
    # Offline and quick: BM25, and a hybrid whose dense half is the model-free HashEmbedder
    # (MiniLM would add ~10 s of imports). Embeddings stay in memory; nothing is written.
    from agentlab.eval.datasets import load_bundled
    from agentlab.eval.runner import run as evaluate
    from agentlab.eval.strategies import BM25, STOP_WORDS, Dense, Hybrid, Phrase, Recency
    from agentlab.search import HashEmbedder

    dataset = load_bundled()
    strategies = [Recency(), Phrase(), BM25(stopwords=STOP_WORDS),
                  Hybrid([BM25(stopwords=STOP_WORDS), Dense(HashEmbedder(256))], name="hybrid-hash"),
                  BM25(stopwords=STOP_WORDS, unit="window", name="bm25-window")]
    results = evaluate(dataset, strategies, ks=(5, 10), cache=None, progress=False, n_boot=200)
    n = len(results.per_question) // len(strategies)
    say(f"ranked the turns of {len(dataset.conversations)} conversations for {n} questions ({dataset.name})")
    table = results.table(["recall@5", "recall@10", "mrr"])
    for name in results.seconds:
        row = table.loc[(name, "overall")]
        say(f"{name:<12} recall@5 {row['recall@5']:.2f}  recall@10 {row['recall@10']:.2f}  MRR {row['mrr']:.2f}")
    say("same on LoCoMo: agentlab eval locomo --data locomo10.json --strategies bm25,dense,hybrid")


def run(root: Path, out: TextIO) -> int:
    """Run every demo step under ``root``; return a process exit code."""

    def say(text: str) -> None:
        print(f"  {text}", file=out, flush=True)

    print(f"agentlab demo (data in {root})", file=out)
    print("1. a named agent on its own DuckDB file", file=out)
    _step_agent(root, say)
    print("2. a session: branches, search, compaction (extractive summarizer, no LLM)", file=out)
    _step_session(root, say)
    print("3. context memory and a Claude turn (offline stand-in, no key needed)", file=out)
    _step_context_and_chat(root, say)
    print("4. retrieval evaluation on the bundled dataset (recall of evidence turns)", file=out)
    _step_eval(root, say)
    print("done.", file=out)
    return 0
