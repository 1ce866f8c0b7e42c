"""The search index folder with two processes: a reader beside a writer is refused and damages nothing; after the
writer closes, read-only readers use its index as saved, several at once, and write nothing to the folder."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agentlab import Agent, get_agent
from agentlab.search._index_files import index_folder
from agentlab.session._session import Session

pytestmark = pytest.mark.slow

READER = textwrap.dedent(
    """
    import json, sys
    from agentlab import Agent, get_agent
    from agentlab.errors import AgentLockedError
    from agentlab.session.duckdb import _index_state as index_state
    from agentlab.session._session import Session

    class Notes(Agent):
        pass

    calls = []
    original = index_state.IndexState.reconcile
    index_state.IndexState.reconcile = lambda self: (calls.append(1), original(self))[1]
    try:
        agent = get_agent(Notes, "notes", root=sys.argv[1], read_only=True)
    except AgentLockedError:
        print(json.dumps({"locked": True}))
        raise SystemExit
    hits = [h.id for h in Session(agent).search("kettle", mode="any", limit=50)]
    print(json.dumps({"locked": False, "hits": hits, "reconciled": len(calls)}))
    agent.close()
    """
)


class Notes(Agent):
    pass


def _read(root) -> dict:
    out = subprocess.run([sys.executable, "-c", READER, str(root)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _folder_state(path: str) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in index_folder(path).iterdir()}


def test_a_reader_beside_a_writer_is_refused_then_uses_the_saved_index(tmp_path, monkeypatch):
    from agentlab.session.duckdb import _index_state as index_state

    monkeypatch.setattr(index_state, "PERSIST_MIN_DOCS", 1)
    monkeypatch.setattr(index_state, "FLUSH_DOCS", 40)
    agent = get_agent(Notes, "notes", root=tmp_path)
    session = Session(agent)
    session.append_messages([{"id": f"m{i}", "role": "user",
                              "parts": [{"type": "text", "text": f"kettle {i}" if i % 3 == 0 else f"note {i}"}]}
                             for i in range(100)])
    expected = [h.id for h in session.search("kettle", mode="any", limit=50)]
    assert _read(tmp_path) == {"locked": True}  # the writer holds the file: the reader is refused at once
    session.append_message({"id": "late", "role": "user", "parts": [{"type": "text", "text": "kettle late"}]})
    expected = [h.id for h in session.search("kettle", mode="any", limit=50)]
    path = agent.store.path
    agent.close()
    saved = _folder_state(path)
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in readers]
    assert results == [{"locked": False, "hits": expected, "reconciled": 0}] * 2  # the saved index, as it is
    assert _folder_state(path) == saved
