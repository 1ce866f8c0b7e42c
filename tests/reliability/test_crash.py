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
from agentlab.session.manager import SessionManager
from agentlab.store import deferred
deferred.DELAY = 3600  # only the kill ends the window in which the first writes are held
class Held(Agent):
    pass
root, with_message = sys.argv[1], sys.argv[2] == "1"
agent = get_agent(Held, "victim", root=root)
manager = SessionManager(agent)
info = manager.create("first chat")
if with_message:
    manager.session(info.id).append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
print(info.id, flush=True)
time.sleep(600)
"""


class TestAKilledNewAgent:
    """A new agent's name and first session are committed with its first message; a kill before that loses only
    them (the name is written again at the next open), a kill after it nothing."""

    @pytest.mark.parametrize("with_message", [True, False])
    def test_reopens_with_everything_committed_and_nothing_else(self, tmp_path, with_message):
        import subprocess
        import sys

        from agentlab import Agent, get_agent
        from agentlab.session.manager import SessionManager
        from agentlab.session.session import Session

        child = subprocess.Popen([sys.executable, "-c", HELD_CHILD, str(tmp_path), "1" if with_message else "0"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            session_id = child.stdout.readline().strip()
        finally:
            child.kill()
            child.wait()
        assert session_id

        class Held(Agent):
            pass

        agent = get_agent(Held, "victim", root=tmp_path)
        sessions = SessionManager(agent).list()
        if with_message:
            assert [(s.id, s.name) for s in sessions] == [(session_id, "first chat")]
            assert [m["id"] for m in Session(agent, session_id).get_history()] == ["m1"]
        else:
            assert sessions == []
        assert agent.sql("SELECT key, value FROM agent_meta ORDER BY key") == [
            {"key": "class", "value": "held"}, {"key": "name", "value": "victim"}]
