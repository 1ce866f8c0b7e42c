"""Every pair of public operations, run from two threads at once, finishes: one lock order everywhere.

A deadlock shows as a thread still alive after the timeout. Each stress runs in a child process, so a deadlock
fails the test instead of hanging the suite on the held lock at teardown.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentlab import Agent, create_compact_function, get_agent
from agentlab.session._session import Session


class Busy(Agent):
    initial_state = {"n": 0}


def _summary(prompt: str) -> str:
    return "They talked about locks."


def _build(root):
    agent = get_agent(Busy, "busy", root=root)
    agent.sql("CREATE TABLE IF NOT EXISTS notes (body VARCHAR)")
    session = (Session.create(agent).with_context("memory", description="facts", max_tokens=100000)
               .with_cached_prompt())
    session.on_compaction(create_compact_function(_summary, protect_head=1, min_tail_messages=1,
                                                  tail_token_budget=50))
    session.compact_after(400)
    connection = agent.connect(on_state=lambda state: None)
    return agent, session, connection


def _operations(agent, session, connection):
    counter = itertools.count()

    def text(i):
        return {"id": f"x{i}", "role": "user", "parts": [{"type": "text", "text": f"message {i} about locks"}]}

    return {
        "set_state": lambda: agent.set_state({"n": next(counter)}),
        "merge_state": lambda: agent.merge_state({"m": next(counter)}),
        "client_state": lambda: connection.set_state({"n": next(counter)}),
        "sql_write": lambda: agent.sql("INSERT INTO notes VALUES (?)", f"note {next(counter)}"),
        "sql_explain_analyze": lambda: agent.sql("EXPLAIN ANALYZE SELECT count(*) FROM notes"),
        "sql_read": lambda: agent.sql("SELECT count(*) FROM notes"),
        "append": lambda: session.append_message(text(next(counter))),
        "history": lambda: session.get_history(),
        "search": lambda: session.search("locks", mode="any"),
        "set_block": lambda: session.set_block("memory", f"fact {next(counter)}"),
        "set_context_tool": lambda: session.run_tool("set_context", {"label": "memory", "content": "a fact",
                                                                     "action": "append"}),
        "refresh_prompt": lambda: session.refresh_system_prompt(),
        "compact": lambda: session.compact(),
        "frames": lambda: session.messages_df(),
        "state_read": lambda: agent.state,
    }


NAMES = list(_operations(None, None, None))
PAIRS = list(itertools.combinations_with_replacement(NAMES, 2))


def every_pair_of_operations_from_two_threads_finishes(tmp_path):
    agent, session, connection = _build(tmp_path)
    ops = _operations(agent, session, connection)
    stuck: list[str] = []
    failures: list[str] = []
    for first, second in PAIRS:
        barrier = threading.Barrier(2)

        def run(name: str, barrier: threading.Barrier = barrier, pair: str = f"{first}+{second}") -> None:
            barrier.wait()
            try:
                for _ in range(6):
                    ops[name]()
            except Exception as exc:
                failures.append(f"{pair}: {name} raised {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        if any(thread.is_alive() for thread in threads):
            stuck.append(f"{first}+{second}")
            break  # the lock is held for good; later pairs would only pile up behind it
    assert stuck == [], f"deadlocked: {stuck}"
    assert failures == []
    # Everything acknowledged is there once the dust settles.
    assert agent.sql("SELECT count(*) AS n FROM notes")[0]["n"] > 0
    assert session.get_history()


def set_state_against_writing_sql_does_not_deadlock(tmp_path):
    agent, _, _ = _build(tmp_path)
    done = threading.Event()

    def states():
        for i in range(300):
            agent.merge_state({"n": i})

    def writes():
        for i in range(300):
            agent.sql("INSERT INTO notes VALUES (?)", str(i))
        done.set()

    threads = [threading.Thread(target=f, daemon=True) for f in (states, writes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "set_state and agent.sql deadlocked"
    assert agent.state["n"] == 299 and done.is_set()


def _in_child(body: str, tmp_path: Path, timeout: float) -> None:
    script = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from pathlib import Path\n"
        f"from tests.reliability.test_locks import {body}\n"
        f"{body}(Path({str(tmp_path)!r}))\n"
        "print('finished', flush=True)\n"
        "import os; os._exit(0)\n"  # never wait on a thread left stuck in a lock
    )
    try:
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{body} did not finish in {timeout} s: a deadlock")
    assert result.returncode == 0 and "finished" in result.stdout, result.stdout + result.stderr[-3000:]


@pytest.mark.slow
def test_every_pair_of_operations_from_two_threads_finishes(tmp_path):
    _in_child("every_pair_of_operations_from_two_threads_finishes", tmp_path, timeout=600)


@pytest.mark.slow
def test_set_state_against_writing_sql_does_not_deadlock(tmp_path):
    """The pair that deadlocked before: the agent's lock and the store's lock taken in opposite orders."""
    _in_child("set_state_against_writing_sql_does_not_deadlock", tmp_path, timeout=120)
