"""The schema of an agent's DuckDB file, as an append-only list of named migrations.

Invariants:

* A migration that has shipped is never edited or removed; schema changes are new entries at the
  end of :data:`MIGRATIONS`.
* :class:`agentlab.store.Store` applies each pending migration at open, inside one explicit
  transaction together with its row in ``_agentlab_migrations``: either both land or neither.
* Each migration says, in comments, why each table and column exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Migration:
    """One named schema step. ``apply`` receives the open DuckDB connection inside a transaction."""

    name: str
    apply: Callable[[Any], None]


def _m001_agent(conn: Any) -> None:
    # agent_meta: facts about the file itself. The agent's name is stored so that opening a file
    # under a different name (a hash collision, or a file copied by hand) is detected, not mixed up.
    conn.execute(
        """
        CREATE TABLE agent_meta (
            key   VARCHAR PRIMARY KEY,
            value VARCHAR NOT NULL
        )
        """
    )
    # agent_state: the single row holding the agent's JSON state (upstream: cf_agents_state with id
    # "cf_state_row_id"). The row's presence is what marks state as set, so 0, "" and null are valid.
    # updated_at and source say when and by whom it last changed, for widgets and exports.
    conn.execute(
        """
        CREATE TABLE agent_state (
            id         VARCHAR PRIMARY KEY,
            state      VARCHAR NOT NULL,   -- JSON text, exactly as serialised
            source     VARCHAR NOT NULL,   -- "server" or a connection id
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


MIGRATIONS: list[Migration] = [
    Migration("m001_agent", _m001_agent),
]
