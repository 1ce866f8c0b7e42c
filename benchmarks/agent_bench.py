"""Foundation figures: set_state and sql round trips, agent open time.

Run: .venv/bin/python benchmarks/agent_bench.py
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import percentiles, row, time_calls

from agentlab import Agent, get_agent


class BenchAgent(Agent):
    initial_state = {"count": 0, "tags": []}


def main() -> None:
    n = 500
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        agent = get_agent(BenchAgent, "bench", root=root)
        _ = agent.state
        agent.sql("CREATE TABLE notes (id INTEGER, body VARCHAR)")

        set_state = percentiles(time_calls(lambda i: agent.set_state({"count": i, "tags": ["a", "b"]}), n))
        insert = percentiles(time_calls(lambda i: agent.sql("INSERT INTO notes VALUES (?, ?)", i, "note"), n))
        select = percentiles(time_calls(lambda i: agent.sql("SELECT body FROM notes WHERE id = ?", i), n))

        # anchor: the same single-row write in SQLite (WAL, synchronous=NORMAL), as upstream's storage
        lite = sqlite3.connect(root / "anchor.sqlite", isolation_level=None)
        lite.execute("PRAGMA journal_mode=WAL")
        lite.execute("CREATE TABLE state (id TEXT PRIMARY KEY, state TEXT)")
        lite_set = percentiles(time_calls(
            lambda i: lite.execute("INSERT OR REPLACE INTO state VALUES ('s', ?)", (f'{{"count":{i}}}',)), n))
        agent.close()

        opens = []
        for _ in range(20):
            start = time.perf_counter()
            a = get_agent(BenchAgent, "bench", root=root)
            _ = a.state
            opens.append((time.perf_counter() - start) * 1000)
            a.close()
        new_opens = []
        for i in range(20):
            start = time.perf_counter()
            a = get_agent(BenchAgent, f"fresh-{i}", root=root)
            _ = a.state
            new_opens.append((time.perf_counter() - start) * 1000)
            a.close()

    print(f"agentlab foundation benchmark ({n} calls each)")
    print(row("set_state (validate+persist+broadcast)", set_state, extra=f"anchor sqlite3 upsert p50 {lite_set['p50']:.3f} ms"))
    print(row("sql INSERT one row (autocommit)", insert))
    print(row("sql SELECT by id (2 rows scanned of 500)", select))
    print(row("open existing agent + read state", percentiles(opens)))
    print(row("create new agent (migrations) + state", percentiles(new_opens)))


if __name__ == "__main__":
    main()
