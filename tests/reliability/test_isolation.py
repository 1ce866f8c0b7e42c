"""Isolation: random operations on several users' agents never let one user's data reach another.

Every piece of text a user writes carries that user's marker; after each run, nothing readable
from an agent (messages, memory blocks, search hits, the system prompt, its SQL) may carry another
user's marker.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlab import Agent, get_agent
from agentlab.session._session import Session

USERS = 3


class UserAgent(Agent):
    initial_state = {"notes": []}


def marker(user: int) -> str:
    return f"zq{user}secret"


operation = st.tuples(
    st.integers(0, USERS - 1),
    st.sampled_from(["append", "branch", "memory", "state", "search", "tool"]),
    st.integers(0, 10_000),
)


def open_user(root: Path, user: int):
    agent = get_agent(UserAgent, f"user-{user}", root=root)
    session = Session.create(agent).with_context("memory", description="facts", max_tokens=10_000).with_cached_prompt()
    return agent, session


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operation, min_size=5, max_size=30))
def test_no_user_ever_sees_another_users_data(ops):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        users = {u: open_user(root, u) for u in range(USERS)}
        for user, kind, n in ops:
            agent, session = users[user]
            text = f"{marker(user)} item{n} about trains"
            if kind == "append":
                session.append_message({"id": f"u{user}-{n}-{len(ops)}-{kind}", "role": "user",
                                        "parts": [{"type": "text", "text": text}]})
            elif kind == "branch":
                leaf = session.latest_leaf_id()
                history = session.get_history(leaf)
                parent = history[0]["id"] if history else None
                session.append_message({"id": f"b{user}-{n}", "role": "assistant",
                                        "parts": [{"type": "text", "text": text}]}, parent_id=parent)
            elif kind == "memory":
                session.append_to_block("memory", text)
            elif kind == "state":
                agent.merge_state({"notes": [*agent.state["notes"], text]})
            elif kind == "tool":
                session.run_tool("set_context", {"label": "memory", "content": text, "action": "append"})
            else:
                for other in range(USERS):
                    hits = session.search(marker(other), mode="any", limit=100)
                    assert other == user or hits == [], f"user {user} found user {other}'s messages"

        for user, (agent, session) in users.items():
            session.refresh_system_prompt()
            readable = "\n".join([
                repr(session.get_history()),
                repr(agent.sql("SELECT * FROM messages")),
                session.freeze_system_prompt(),
                repr(session.get_context_blocks()),
                repr(agent.state),
                repr([h.text for o in range(USERS) for h in session.search(marker(o), mode="any", limit=100)]),
            ])
            for other in range(USERS):
                if other != user:
                    assert marker(other) not in readable, f"user {other}'s data reached user {user}"
        for agent, _ in users.values():
            agent.close()
