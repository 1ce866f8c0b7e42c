"""SIGKILL a writer at random moments: no acknowledged write is ever lost, the file stays consistent.

The benchmark (benchmarks/reliability.py) runs 20 trials per scenario; the tests run fewer.
"""

from __future__ import annotations

import pytest

from .crashlab import SCENARIOS, run_trials

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_killed_writers_lose_no_acknowledged_write(tmp_path, scenario):
    results = run_trials(tmp_path, scenario, trials=2, seed=7)
    assert sum(r.acknowledged for r in results) > 0, "the writer never acknowledged anything"
    assert [r.lost for r in results] == [[] for _ in results]
    assert [r.problems for r in results] == [[] for _ in results]


HELD_CHILD = r"""
import sys, time
from agentlab import Agent, get_agent
from agentlab.session._manager import SessionManager
from agentlab.store import _deferred as deferred
deferred.DELAY = 3600  # only the kill ends the window in which the name is held
class Held(Agent):
    pass
root, steps = sys.argv[1], sys.argv[2]
agent = get_agent(Held, "victim", root=root)
session_id = "-"
if steps in ("session", "message"):
    manager = SessionManager(agent)
    session_id = manager.create("first chat").id
if steps == "message":
    manager.session(session_id).append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
print(session_id, flush=True)
time.sleep(600)
"""


def _name_on_disk(path):
    import duckdb

    conn = duckdb.connect(str(path), read_only=True)
    try:
        return dict(conn.execute("SELECT key, value FROM agent_meta").fetchall())
    finally:
        conn.close()


class TestAKilledNewAgent:
    """A new agent's name is committed with its first write (a session, a message); a kill before that loses only
    the name, which is written again at the next open; a kill after an acknowledged write loses nothing."""

    @pytest.mark.parametrize("steps", ["message", "session", "nothing"])
    def test_reopens_with_every_acknowledged_write(self, tmp_path, steps):
        import subprocess
        import sys

        from agentlab import Agent, get_agent
        from agentlab.session._manager import SessionManager
        from agentlab.session._session import Session
        from agentlab.store import agent_path

        child = subprocess.Popen([sys.executable, "-c", HELD_CHILD, str(tmp_path), steps],
                                 stdout=subprocess.PIPE, text=True)
        try:
            session_id = child.stdout.readline().strip()
        finally:
            child.kill()
            child.wait()
        assert session_id

        on_disk = _name_on_disk(agent_path("Held", "victim", tmp_path))
        assert on_disk == ({} if steps == "nothing" else {"class": "held", "name": "victim"})

        class Held(Agent):
            pass

        agent = get_agent(Held, "victim", root=tmp_path)
        sessions = SessionManager(agent).list()
        if steps == "nothing":
            assert sessions == []
        else:
            assert [(s.id, s.name) for s in sessions] == [(session_id, "first chat")]
            history = [m["id"] for m in Session(agent, session_id).get_history()]
            assert history == (["m1"] if steps == "message" else [])
        assert agent.sql("SELECT key, value FROM agent_meta ORDER BY key") == [
            {"key": "class", "value": "held"}, {"key": "name", "value": "victim"}]
