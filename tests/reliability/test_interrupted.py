"""An exception halfway through a multi-statement operation leaves the agent exactly as before.

For each operation we first count the statements it runs, then interrupt it at every one of them,
and compare a full dump of the file, and what the public API reads, before and after.
"""

from __future__ import annotations

import pytest

from agentlab import Agent, get_agent
from agentlab.errors import MigrationError
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session
from agentlab.store._database import Store
from agentlab.store._migrations import MIGRATIONS, Migration

from .faults import InjectedFault, fail_at_statement
from .snapshot import snapshot


class Lab(Agent):
    initial_state = {"n": 0}


def _summarize(prompt: str) -> str:
    return "Summary: the user talked about trains and tea."


def build(tmp_path):
    agent = get_agent(Lab, "lab", root=tmp_path)
    session = Session.create(agent).with_context("memory", description="facts", max_tokens=500)
    session.on_compaction(__import__("agentlab.session._compact_function", fromlist=["x"]).create_compact_function(
        _summarize, protect_head=1, tail_token_budget=10, min_tail_messages=1))
    session.append_messages([
        {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
         "parts": [{"type": "text", "text": f"message {i} about trains and tea number {i}"}]}
        for i in range(12)
    ])
    session.set_block("memory", "likes trains")
    _ = agent.state
    return agent, session


def api_view(session):
    """What a user reads through the API: must not change after a failed operation."""
    session.tools()
    return {
        "history": session.get_history(),
        "leaf": session.latest_leaf_id(),
        "search": [(h.id, round(h.score, 9)) for h in session.search("trains", mode="any", limit=50)],
        "block": session.get_context_block("memory").content,
        "compactions": [(c.from_message_id, c.to_message_id) for c in session.get_compactions()],
        "state": session.agent.state,
    }


OPERATIONS = {
    "bulk import": lambda s: s.append_messages([
        {"id": f"new{i}", "role": "user", "parts": [{"type": "text", "text": f"imported trains {i}"}]}
        for i in range(40)
    ]),
    "append": lambda s: s.append_message({"id": "solo", "role": "user", "parts": [{"type": "text", "text": "trains"}]}),
    "compaction": lambda s: s.compact(),
    "context write": lambda s: s.set_block("memory", "likes trains\nand tea"),
    "context append": lambda s: s.append_to_block("memory", "also tea"),
    "set_state": lambda s: s.agent.set_state({"n": 5}),
    "delete": lambda s: s.delete_messages(["m11", "m10"]),
    "update": lambda s: s.update_message({"id": "m3", "role": "assistant", "parts": [{"type": "text", "text": "changed"}]}),
    "clear": lambda s: s.clear_messages(),
    "fork": lambda s: SessionManager(s.agent).fork("", "m5", "what-if"),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_an_operation_interrupted_at_any_statement_changes_nothing(tmp_path, name):
    operation = OPERATIONS[name]
    agent, session = build(tmp_path / "count")
    api_view(session)  # warm the same caches as the runs below: some writes depend on them
    with fail_at_statement(agent.store, 10**9) as counter:
        operation(session)
    statements = counter["seen"]
    assert statements >= 1, f"{name} ran no statement in a transaction"
    agent.close()

    for n in range(1, statements + 1):
        agent, session = build(tmp_path / f"run{n}")
        before_rows, before_api = snapshot(agent), api_view(session)
        with pytest.raises(InjectedFault), fail_at_statement(agent.store, n):
            operation(session)
        ignored = {"compaction_events"} if name == "compaction" else set()
        after_rows = snapshot(agent)
        assert {k: v for k, v in after_rows.items() if k not in ignored} == {
            k: v for k, v in before_rows.items() if k not in ignored
        }, f"{name} interrupted at statement {n} of {statements} changed stored rows"
        assert api_view(session) == before_api, f"{name} interrupted at statement {n} changed what the API reads"
        agent.close()
        # and a fresh process-level reopen agrees with the in-memory view
        agent = get_agent(Lab, "lab", root=tmp_path / f"run{n}")
        again = Session.create(agent).with_context("memory", description="facts", max_tokens=500)
        assert api_view(again) == before_api
        agent.close()


def test_a_failing_migration_leaves_the_file_at_its_previous_version(tmp_path):
    path = tmp_path / "agent.duckdb"
    store = Store(path)
    before = store.applied_migrations()
    store.execute("CREATE TABLE keep (x INTEGER)")
    store.execute("INSERT INTO keep VALUES (1)")
    store.close()

    def breaks(conn):
        conn.execute("ALTER TABLE keep ADD COLUMN y INTEGER")
        conn.execute("UPDATE keep SET y = 2")
        raise RuntimeError("disk full (injected)")

    with pytest.raises(MigrationError, match="m999_breaks"):
        Store(path, migrations=[*MIGRATIONS, Migration("m999_breaks", breaks)])
    store = Store(path)
    assert store.applied_migrations() == before
    assert store.rows("SELECT * FROM keep") == [{"x": 1}]
    store.close()
