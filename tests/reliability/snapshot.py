"""A full, ordered dump of every table in an agent's file: equal dumps mean nothing stored changed."""

from __future__ import annotations

from typing import Any


def snapshot(agent: Any) -> dict[str, list[tuple]]:
    """Every row of every table (including our own bookkeeping), sorted, keyed by table name."""
    store = agent.store
    tables = [r["table_name"] for r in store.rows(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY table_name"
    )]
    out = {}
    with store.lock:
        for table in tables:
            rows = store.execute(f'SELECT * FROM "{table}"').fetchall()
            out[table] = sorted(rows, key=repr)
    return out
