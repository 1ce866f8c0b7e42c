"""The message tree held as numpy arrays (rows loaded from the file) plus dicts (rows written since) answers like a
plain model of the rows, through branches, deletions, ids coming back, other sessions, reloads and hash collisions."""

from __future__ import annotations

import random

import pytest

from agentlab.session._session import Session
from agentlab.session.duckdb import _parent_map as row_map
from agentlab.session.duckdb._tree import tree_of
from agentlab.store._database import Store
from tests.helpers import msg


def model(store: Store) -> dict[str, tuple[int, str | None, str]]:
    """Every row as the file holds it: id -> (seq, parent, session); the first row of a repeated id wins."""
    return {mid: row[:3] for mid, row in model_with_roles(store).items()}


def model_with_roles(store: Store) -> dict[str, tuple[int, str | None, str, str]]:
    """:func:`model`, with each row's role."""
    rows: dict[str, tuple[int, str | None, str, str]] = {}
    for mid, parent, sid, seq, role in store.execute(
            "SELECT id, parent_id, session_id, seq, role FROM messages ORDER BY seq").fetchall():
        rows.setdefault(mid, (seq, parent, sid, role))
    return rows


def model_path(rows, session: str, leaf: str, max_depth: int = 100_000) -> list[str]:
    path: list[str] = []
    cur: str | None = leaf
    while cur is not None and cur in rows and rows[cur][2] == session and len(path) < max_depth:
        path.append(cur)
        cur = rows[cur][1]
    return path[::-1]


def model_latest(rows, session: str) -> str | None:
    mine = {m: r for m, r in rows.items() if r[2] == session}
    parents = {r[1] for r in mine.values()}
    leaves = [m for m in mine if m not in parents]
    return max(leaves, key=lambda m: mine[m][0]) if leaves else None


def agree(store: Store, sessions: list[str]) -> None:
    tree = tree_of(store)
    rows = model(store)
    with_roles = model_with_roles(store)
    newest: dict[str, int] = {}
    for seq, _, sid in rows.values():
        newest[sid] = max(seq, newest.get(sid, -1))
    assert tree.active_sessions() == newest
    for sid in sessions:
        latest = model_latest(rows, sid)
        assert tree.latest_leaf_id(sid) == latest, sid
        assert tree.owned_ids(sid) == sorted((m for m, r in rows.items() if r[2] == sid), key=lambda m: rows[m][0])
        assert tree.count(sid) == sum(1 for r in rows.values() if r[2] == sid)
        assert tree.nodes(sid) == sorted(((m, p, role, seq) for m, (seq, p, owner, role) in with_roles.items()
                                          if owner == sid), key=lambda node: node[3])
        for mid, (_, _, owner) in rows.items():
            if owner != sid:
                continue
            assert tree.path_ids(sid, mid) == model_path(rows, sid, mid), mid
            assert tree.path_ids(sid, mid, max_depth=3) == model_path(rows, sid, mid, 3), mid
            kids = sorted((c for c, r in rows.items() if r[1] == mid and r[2] == sid), key=lambda c: rows[c][0])
            assert tree.children_ids(sid, mid) == kids, mid
            assert tree.session_of(mid) == sid


def run(store_path, rng: random.Random, steps: int) -> None:
    store = Store(store_path)
    sessions = ["", "other"]
    counter, gone = 0, []
    for _ in range(steps):
        sid = rng.choice(sessions)
        session = Session(store, sid)
        mine = tree_of(store).owned_ids(sid)
        roll = rng.random()
        if roll < 0.45:
            counter += 1
            parent = rng.choice(mine) if mine and rng.random() < 0.3 else None
            message = msg(f"m{counter}", role="assistant" if counter % 3 == 0 else "user")
            session.append_message(message, parent) if parent else session.append_message(message)
        elif roll < 0.6:
            batch = [msg(f"m{counter + k + 1}") for k in range(rng.randint(1, 6))]
            counter += len(batch)
            session.append_messages(batch)
        elif roll < 0.72 and mine:
            doomed = rng.sample(mine, k=min(len(mine), rng.randint(1, 2)))
            session.delete_messages(doomed)
            gone += doomed
        elif roll < 0.8 and gone:
            back = gone.pop(rng.randrange(len(gone)))  # a deleted id comes back: its orphans hang under it again
            if back not in tree_of(store).owned_ids("") and back not in tree_of(store).owned_ids("other"):
                session.append_message(msg(back), None)
        elif roll < 0.83:
            Session(store, "other").clear_messages()
        elif roll < 0.92:
            store.close()  # what was the overlay is the base after the reload
            store = Store(store_path)
        else:
            tree_of(store).invalidate()
        agree(store, sessions)
    store.close()


class TestAgreesWithAModelOfTheRows:
    @pytest.mark.parametrize("seed", [1, 2])
    def test_random_writes_reloads_and_returning_ids(self, store_path, seed):
        run(store_path, random.Random(seed), 70)

    def test_every_id_sharing_one_hash_changes_nothing(self, store_path, monkeypatch):
        monkeypatch.setattr(row_map, "id_hash", lambda mid: 7)
        monkeypatch.setattr(row_map, "hash_column", lambda starts, lengths, data: __import__("numpy").full(
            len(lengths), 7, dtype="uint64"))
        run(store_path, random.Random(5), 40)


class TestLoading:
    def test_a_deep_chain_loads_without_python_objects_per_row_and_walks_by_seq(self, store_path):
        store = Store(store_path)
        Session(store).append_messages([msg(f"m{i}") for i in range(3000)])
        store.close()
        store = Store(store_path)
        tree = tree_of(store)
        ids, seqs, cut = tree.path_rows("", None, max_depth=2500)
        assert ids == [f"m{i}" for i in range(500, 3000)] and cut is True
        assert seqs == sorted(seqs) and len(set(seqs)) == 2500
        assert tree._rows._over == {}  # everything came from the arrays
        store.close()

    def test_children_of_a_loaded_row_include_rows_written_since(self, store_path):
        store = Store(store_path)
        session = Session(store)
        session.append_messages([msg("q"), msg("a1")])
        store.close()
        store = Store(store_path)
        session = Session(store)
        session.append_message(msg("a2"), parent_id="q")
        assert [m["id"] for m in session.get_branches("q")] == ["a1", "a2"]
        store.close()

    def test_rows_stored_out_of_seq_order_load_in_seq_order(self, store_path):
        store = Store(store_path)
        Session(store).append_messages([msg(f"m{i}") for i in range(50)])
        Session(store).append_message(msg("b1"), parent_id="m10")
        # a repeated id with the larger seq: the row with the smaller seq must win, wherever it lies in the table
        store.execute("INSERT INTO messages SELECT seq + 1000, id, session_id, 'm49', role, content, created_at, "
                      "search_tokens, search_seq + 1000 FROM messages WHERE id = 'm5'")
        store.execute("CREATE TEMP TABLE copy AS SELECT * FROM messages")
        store.execute("DELETE FROM messages")
        store.execute("INSERT INTO messages SELECT * FROM copy ORDER BY seq DESC")
        store.note_outside_write()
        agree(store, [""])
        assert tree_of(store).latest_leaf_id("") == "b1"
        store.close()


class TestTheOutline:
    """``nodes()`` (the branch tree widget's outline) and ``active_sessions()`` read the arrays and the rows
    written since alike."""

    def test_a_forks_outline_holds_the_shared_path_with_roles_before_and_after_a_reload(self, store_path):
        from agentlab.session._manager import SessionManager

        store = Store(store_path)
        manager = SessionManager(store)
        parent = manager.session(manager.create("parent").id)
        parent.append_messages([msg("m0"), msg("m1", role="assistant"), msg("m2"), msg("m3")])
        fork = manager.fork(parent.session_id, "m1", "what if").id
        manager.session(fork).append_message(msg("c1", role="assistant"))
        expected = [("m0", None, "user"), ("m1", "m0", "assistant"), ("c1", "m1", "assistant")]
        assert [n[:3] for n in tree_of(store).nodes(fork)] == expected  # rows written since the load
        seqs = tree_of(store).active_sessions()
        store.close()
        store = Store(store_path)
        assert [n[:3] for n in tree_of(store).nodes(fork)] == expected  # the same rows from the arrays
        assert tree_of(store).active_sessions() == seqs and seqs[fork] > seqs[parent.session_id]
        assert [n[0] for n in tree_of(store).nodes(parent.session_id)] == ["m0", "m1", "m2", "m3"]
        store.close()
