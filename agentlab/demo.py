"""The offline tour behind ``agentlab demo``: each step prints what it did.

Later features add their own steps here; each step uses only the public API.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from .agent import Agent, get_agent


class DemoAgent(Agent):
    """The agent the demo creates: a tiny counter state."""

    initial_state = {"visits": 0, "notes": []}

    def validate_state_change(self, next_state, source):  # type: ignore[no-untyped-def]
        if not isinstance(next_state, dict) or next_state.get("visits", 0) < 0:
            raise ValueError("visits must be a non-negative count")


def _step_agent(root: Path, say) -> None:  # type: ignore[no-untyped-def]
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


def run(root: Path, out: TextIO) -> int:
    """Run every demo step under ``root``; return a process exit code."""

    def say(text: str) -> None:
        print(f"  {text}", file=out, flush=True)

    print(f"agentlab demo (data in {root})", file=out)
    print("1. a named agent on its own DuckDB file", file=out)
    _step_agent(root, say)
    print("done.", file=out)
    return 0
