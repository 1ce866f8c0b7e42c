"""A catalogue of hostile inputs across the public API.

Each case either raises a typed agentlab error (or returns a defined result) and, in every case,
leaves everything stored exactly as it was, unless the case says what it adds. The benchmark
prints the totals (cases tried, cases that lost or corrupted data).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from agentlab import Agent, get_agent
from agentlab.agent._portable import MANIFEST, export, import_
from agentlab.chat._settings import ChatSettings, resolve_settings
from agentlab.chat._usage import Usage, record_usage
from agentlab.errors import AgentlabError, DuplicateMessageWarning, UnknownLeafWarning
from agentlab.search._embedders import HashEmbedder
from agentlab.search._vectors import VectorStore
from agentlab.session._compact_function import create_compact_function
from agentlab.session._manager import SessionManager
from agentlab.session._messages import MAX_MESSAGE_NESTING
from agentlab.session._session import Session

from .snapshot import snapshot


class Target(Agent):
    initial_state = {"ok": True}


def _text(mid, text="hello", role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def _deep(levels):
    value: Any = "bottom"
    for _ in range(levels):
        value = {"x": value}
    return value


def _circular():
    loop: dict = {}
    loop["self"] = loop
    return loop


def _block(session, label):
    session.context.load()
    return session.get_context_block(label).content


def _nested_message(mid, levels=MAX_MESSAGE_NESTING + 1):
    # The message, its parts and the part are three levels; the value inside makes up the rest.
    return {"id": mid, "role": "user", "parts": [{"type": "data", "value": _deep(levels - 3)}]}


def _raiser(prompt):
    raise RuntimeError("summarizer exploded")


def _tampered_import(env, change):
    """Export the agent, let ``change(manifest, folder)`` tamper with the export, import it under a new name."""
    folder = export(env.agent, Path(env.agent.root) / "exports" / "tampered")
    manifest = json.loads((folder / MANIFEST).read_text())
    change(manifest, folder)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return import_(folder, Target, name="copy", root=Path(env.agent.root) / "imported")


def _absolute_entry(manifest, folder):
    outside = folder.parent / "outside.parquet"
    outside.write_bytes((folder / "messages.parquet").read_bytes())
    manifest["tables"]["messages"]["file"] = str(outside)


def _climbing_entry(manifest, folder):
    _absolute_entry(manifest, folder)
    manifest["tables"]["messages"]["file"] = "../outside.parquet"


def _rewrite_messages(folder, columns, tail=""):
    file = folder / "messages.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT {columns} FROM read_parquet('{file}') {tail}) TO '{file}.new' (FORMAT parquet)")
    con.close()
    os.replace(f"{file}.new", file)


def _cut_messages(manifest, folder):
    _rewrite_messages(folder, "*", "LIMIT 1")


def _dropped_column(manifest, folder):
    _rewrite_messages(folder, "* EXCLUDE (search_seq)")


def _export_over_papers(env):
    folder = Path(env.agent.root) / "papers"
    folder.mkdir()
    (folder / "draft.tex").write_text("precious")
    return export(env.agent, folder, overwrite=True)


@dataclass
class Env:
    agent: Any
    session: Session


def build(root) -> Env:
    agent = get_agent(Target, "hostile", root=root)
    session = (
        Session.create(agent)
        .with_context("soul", provider=_Soul(), description="who you are")
        .with_context("memory", description="facts", max_tokens=20)
    )
    session.append_messages([_text("m1", "plan a trip"), _text("m2", "sure, where to?", "assistant"), _text("m3", "Lisbon")])
    session.set_block("memory", "likes trains")
    # A named session whose block was stored as "memory_a_b" before blocks had a session column.
    SessionManager(agent).create("trip", session_id="a_b")
    Session(agent, "a_b").with_context("memory").set_block("memory", "a_b's facts")
    _ = agent.state
    session.tools()
    return Env(agent, session)


class _Soul:
    def get(self):
        return "You are careful."


def _warned(category: type[Warning], fn: Any, *args: Any) -> Any:
    """``fn(*args)``, which must warn with ``category`` (a misuse upstream accepts silently, said out loud)."""
    with pytest.warns(category):
        return fn(*args)


# (name, action, expected): expected is an exception class that must be raised (and be ours),
# or a function checking the returned value.
CASES: list[tuple[str, Callable[[Env], Any], Any]] = [
    # names
    ("empty agent name", lambda e: get_agent(Target, ""), AgentlabError),
    ("NUL in agent name", lambda e: get_agent(Target, "a\x00b"), AgentlabError),
    ("513-character agent name", lambda e: get_agent(Target, "x" * 513), AgentlabError),
    ("agent name that is not a string", lambda e: get_agent(Target, 42), AgentlabError),  # type: ignore[arg-type]
    ("lone surrogate in agent name", lambda e: get_agent(Target, "a\ud800"), AgentlabError),
    ("session id that is not a string", lambda e: Session(e.agent, 5), TypeError),  # type: ignore[arg-type]
    # message shapes
    ("message without id", lambda e: e.session.append_message({"role": "user", "parts": []}), AgentlabError),
    ("message with empty id", lambda e: e.session.append_message({"id": "", "role": "user", "parts": []}), AgentlabError),
    ("message without role", lambda e: e.session.append_message({"id": "x", "parts": []}), AgentlabError),
    ("parts that are a string", lambda e: e.session.append_message({"id": "x", "role": "user", "parts": "hi"}), AgentlabError),
    ("a part that is not an object", lambda e: e.session.append_message({"id": "x", "role": "user", "parts": ["hi"]}), AgentlabError),
    ("parts holding a set", lambda e: e.session.append_message({"id": "x", "role": "user", "parts": [{"type": "text", "text": {1}}]}), AgentlabError),
    ("parts holding NaN", lambda e: e.session.append_message({"id": "x", "role": "user", "parts": [{"type": "x", "v": math.nan}]}), AgentlabError),
    ("parts holding infinity", lambda e: e.session.append_message({"id": "x", "role": "user", "parts": [{"type": "x", "v": -math.inf}]}), AgentlabError),
    ("lone surrogate in message text", lambda e: e.session.append_message(_text("x", "bad \udc00 text")), AgentlabError),
    ("JSON nested 100,000 levels", lambda e: e.session.append_message({"id": "x", "role": "user", "parts": [_deep(100_000)]}), AgentlabError),
    ("message that is a list", lambda e: e.session.append_message(["id", "role"]), AgentlabError),  # type: ignore[arg-type]
    ("unknown parent id", lambda e: e.session.append_message(_text("x"), parent_id="nope"), AgentlabError),
    ("parent id that is a number", lambda e: e.session.append_message(_text("x"), parent_id=7), AgentlabError),
    ("a bad message in the middle of a bulk import", lambda e: e.session.append_messages([_text("a1"), {"id": "a2", "role": "user"}, _text("a3")]), AgentlabError),
    ("duplicate id with other content (first wins)", lambda e: _warned(DuplicateMessageWarning, e.session.append_message, _text("m1", "overwrite?")), lambda r: r.duplicate is True),
    ("update of an unknown message", lambda e: e.session.update_message(_text("ghost")), AgentlabError),
    ("update that changes nothing valid", lambda e: e.session.update_message({"id": "m1", "role": "user", "parts": "x"}), AgentlabError),
    ("delete of unknown ids", lambda e: e.session.delete_messages(["ghost", "ghost2"]), lambda r: r == 0),
    ("history of an unknown leaf", lambda e: _warned(UnknownLeafWarning, e.session.get_history, "ghost"), lambda r: r == []),
    ("branches of an unknown id", lambda e: e.session.get_branches("ghost"), lambda r: r == []),
    # state
    ("state holding a set", lambda e: e.agent.set_state({"s": {1, 2}}), AgentlabError),
    ("state holding NaN", lambda e: e.agent.set_state({"v": math.nan}), AgentlabError),
    ("state holding infinity", lambda e: e.agent.set_state([math.inf]), AgentlabError),
    ("circular state", lambda e: e.agent.set_state(_circular()), AgentlabError),
    ("state nested 100,000 levels", lambda e: e.agent.set_state(_deep(100_000)), AgentlabError),
    ("state with a lone surrogate", lambda e: e.agent.set_state({"s": "\ud83d"}), AgentlabError),
    ("state with a non-string key", lambda e: e.agent.set_state({("a",): 1}), AgentlabError),
    ("merge_state with a list", lambda e: e.agent.merge_state([1]), TypeError),
    # SQL
    ("SQL injection through a parameter", lambda e: e.agent.sql("SELECT ? AS v", "x'); DROP TABLE messages;--"), lambda r: r == [{"v": "x'); DROP TABLE messages;--"}]),
    ("SQL syntax error", lambda e: e.agent.sql("SELEC 1"), AgentlabError),
    ("SQL with too few parameters", lambda e: e.agent.sql("SELECT ? + ?", 1), AgentlabError),
    ("SQL parameter of an unsupported type", lambda e: e.agent.sql("SELECT ?", object()), AgentlabError),
    # search
    ("search with a double quote", lambda e: e.session.search('Lisbon"'), lambda r: [h.id for h in r] == ["m3"]),
    ("search with FTS operators", lambda e: e.session.search('NEAR(trip OR plan) AND "x" * : ^', mode="any"), lambda r: {h.id for h in r} == {"m1"}),
    ("search with unbalanced parentheses", lambda e: e.session.search("((((trip", mode="all"), lambda r: [h.id for h in r] == ["m1"]),
    ("empty search", lambda e: e.session.search(""), lambda r: r == []),
    ("whitespace search", lambda e: e.session.search(" \t\n "), lambda r: r == []),
    ("search of 200,000 characters", lambda e: e.session.search("trip " * 40_000, mode="any"), lambda r: [h.id for h in r] == ["m1"]),
    ("search with an unknown mode", lambda e: e.session.search("trip", mode="regex"), AgentlabError),
    ("search with a negative limit", lambda e: e.session.search("trip", limit=-1), AgentlabError),
    # tool inputs from the model
    ("tool that does not exist", lambda e: e.session.run_tool("rm_rf", {}), lambda r: r.startswith("Error")),
    ("tool input that is not an object", lambda e: e.session.run_tool("set_context", "memory"), lambda r: r.startswith("Error")),
    ("set_context on an unknown label", lambda e: e.session.run_tool("set_context", {"label": "nope", "content": "x"}), lambda r: r.startswith("Error")),
    ("set_context over budget", lambda e: e.session.run_tool("set_context", {"label": "memory", "content": "word " * 200}), lambda r: r == "Error: Block \"memory\" exceeds maxTokens: 260 > 20"),
    ("set_context append over budget", lambda e: e.session.run_tool("set_context", {"label": "memory", "content": "word " * 20, "action": "append"}), lambda r: r.startswith("Error: Block \"memory\" exceeds maxTokens")),
    ("set_context on a readonly block", lambda e: e.session.run_tool("set_context", {"label": "soul", "content": "evil"}), lambda r: "Error" in r and "readonly" in r),
    ("set_context with content null", lambda e: e.session.run_tool("set_context", {"label": "memory", "content": None}), lambda r: r.startswith("Error")),
    ("set_context with an unknown action", lambda e: e.session.run_tool("set_context", {"label": "memory", "content": "x", "action": "drop"}), lambda r: r.startswith("Error")),
    ("search_context with no searchable block", lambda e: e.session.run_tool("search_context", {"label": "memory", "query": "x"}), lambda r: r.startswith("Error")),
    ("tool input with a lone surrogate", lambda e: e.session.run_tool("set_context", {"label": "memory", "content": "a\ud800"}), lambda r: r.startswith("Error")),
    # context and compaction
    ("set_block on an unknown label", lambda e: e.session.set_block("nope", "x"), AgentlabError),
    ("set_block on a readonly block", lambda e: e.session.set_block("soul", "x"), AgentlabError),
    ("compact with no function registered", lambda e: e.session.compact(), AgentlabError),
    ("overlay whose ids are not messages", lambda e: e.session.add_compaction("s", "m1", "ghost"), AgentlabError),
    ("fork at an unknown message", lambda e: SessionManager(e.agent).fork("", "ghost", "f"), AgentlabError),
    ("fork with an empty name", lambda e: SessionManager(e.agent).fork("", "m2", ""), AgentlabError),
    # blocks of different sessions
    ("a block label ending in another session's id", lambda e: _block(Session(e.agent, "b").with_context("memory_a"), "memory_a"), lambda r: r == ""),
    ("a default-session block named like another session's old storage name", lambda e: _block(Session(e.agent).with_context("memory_a_b"), "memory_a_b"), lambda r: r == ""),
    # numbers and text the columns cannot hold
    ("usage with a NaN cost", lambda e: SessionManager(e.agent).add_usage("a_b", estimated_cost=math.nan), AgentlabError),
    ("usage with an infinite cost", lambda e: SessionManager(e.agent).add_usage("a_b", estimated_cost=math.inf), AgentlabError),
    ("usage of 10**30 tokens", lambda e: SessionManager(e.agent).add_usage("a_b", input_tokens=10**30), AgentlabError),
    ("usage of negative tokens", lambda e: SessionManager(e.agent).add_usage("a_b", output_tokens=-5), AgentlabError),
    ("usage of fractional tokens", lambda e: SessionManager(e.agent).add_usage("a_b", input_tokens=1.5), AgentlabError),  # type: ignore[arg-type]
    ("a usage row past a BIGINT", lambda e: record_usage(e.agent.store, Usage(2**63)), AgentlabError),
    ("vector search with k=NaN", lambda e: VectorStore(e.agent.store, "kb", HashEmbedder(8)).search("trip", k=math.nan), AgentlabError),  # type: ignore[arg-type]
    ("vector search with a fractional k", lambda e: VectorStore(e.agent.store, "kb", HashEmbedder(8)).search("trip", k=2.5), AgentlabError),  # type: ignore[arg-type]
    ("compaction threshold NaN", lambda e: e.session.compact_after(math.nan), AgentlabError),
    ("negative compaction threshold", lambda e: e.session.compact_after(-1), AgentlabError),
    ("lone surrogate in a model name", lambda e: resolve_settings(ChatSettings(model="claude-\ud800")), AgentlabError),
    ("lone surrogate in a session's model", lambda e: SessionManager(e.agent).create("n", model="claude-\udc00"), AgentlabError),
    # nesting
    ("message nested one level over the limit", lambda e: e.session.append_message(_nested_message("deep")), AgentlabError),
    ("bulk import with a message over the nesting limit", lambda e: e.session.append_messages([_text("ok1"), _nested_message("deep")]), AgentlabError),
    ("update nesting over the limit", lambda e: e.session.update_message(_nested_message("m1")), AgentlabError),
    # export and import
    ("import of a manifest naming an absolute path", lambda e: _tampered_import(e, _absolute_entry), AgentlabError),
    ("import of a manifest naming a file up with ..", lambda e: _tampered_import(e, _climbing_entry), AgentlabError),
    ("import of a messages file cut to one row", lambda e: _tampered_import(e, _cut_messages), AgentlabError),
    ("import of a file with a column missing", lambda e: _tampered_import(e, _dropped_column), AgentlabError),
    ("export over a folder that is no export", lambda e: _export_over_papers(e), AgentlabError),
]


@pytest.mark.parametrize(("name", "action", "expected"), CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_or_defined_and_changes_nothing(tmp_path, name, action, expected):
    env = build(tmp_path)
    before = snapshot(env.agent)
    history_before = env.session.get_history()
    if isinstance(expected, type):
        with pytest.raises(expected) as info:
            action(env)
        assert str(info.value), f"{name}: the error has no message"
    else:
        assert expected(action(env)), f"{name}: unexpected result"
    assert snapshot(env.agent) == before, f"{name} changed stored data"
    assert env.session.get_history() == history_before


def test_a_summarizer_that_raises_records_one_error_event_and_changes_nothing_else(tmp_path):
    env = build(tmp_path)
    errors = []
    env.session.on_compaction(create_compact_function(_raiser, protect_head=1, tail_token_budget=1, min_tail_messages=1))
    env.session.on_compaction_error(errors.append)
    before = snapshot(env.agent)
    assert env.session.compact() is None
    after = snapshot(env.agent)
    assert [str(e) for e in errors] == ["summarizer exploded"]
    changed = {t for t in after if after[t] != before[t]}
    assert changed == {"compaction_events"}
    assert len(after["compaction_events"]) == len(before["compaction_events"]) + 1


def test_the_same_id_twice_in_one_bulk_import_keeps_the_first(tmp_path):
    env = build(tmp_path)
    with pytest.warns(DuplicateMessageWarning, match="'d1'"):
        appended = env.session.append_messages([_text("d1", "first"), _text("d1", "second")])
    assert [a.duplicate for a in appended] == [False, True]
    assert env.session.get_message("d1")["parts"] == [{"type": "text", "text": "first"}]


def test_a_ten_megabyte_message_is_stored_and_read_back_exactly(tmp_path):
    env = build(tmp_path)
    big = _text("big", "lorem ipsum " * 900_000)
    env.session.append_message(big)
    assert env.session.get_message("big")["parts"] == big["parts"]
    assert [h.id for h in env.session.search("ipsum", mode="any")] == ["big"]


def test_the_catalogue_is_large_enough():
    assert len(CASES) + 3 >= 40
