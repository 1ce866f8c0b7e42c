"""Agents that tests/js/conformance.mjs drives with the official `agents` client (served by `agentlab serve`)."""

from __future__ import annotations

import sys

from agentlab import Agent, rpc


class Counter(Agent):
    """A count that clients change by set_state and by its methods; negative counts are refused."""

    initial_state = {"count": 0}

    def validate_state_change(self, next_state, source):
        if not isinstance(next_state, dict) or not isinstance(next_state.get("count"), int):
            raise ValueError("state must be {'count': int}")
        if next_state["count"] < 0:
            raise ValueError("count must be >= 0")

    def should_connection_be_readonly(self, connection, request):
        return request.query.get("readonly") == "1"

    def on_error(self, error):
        print(f"counter {self.name!r}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)

    def on_request(self, request):
        return {"name": self.name, "method": request.method, "path": request.path, "state": self.state}

    @rpc()
    def increment(self, by=1):
        """Add ``by`` to the count (a state change every client sees, the caller too)."""
        self.set_state({"count": self.state["count"] + by})
        return self.state["count"]

    @rpc(streaming=True)
    def count_up(self, stream, steps):
        """Add 1 ``steps`` times, sending each new count as a chunk; the final chunk is the state."""
        for _ in range(steps):
            self.set_state({"count": self.state["count"] + 1})
            stream.send(self.state["count"])
        stream.end(self.state)

    @rpc()
    def fail(self):
        raise ValueError("this method always fails")

    def not_marked(self):
        return "never callable"
