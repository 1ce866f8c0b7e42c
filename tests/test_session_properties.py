"""Properties on random trees: history is a parent walk, overlays stay on their branch, search finds every message."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlab.errors import UnknownLeafWarning
from agentlab.session._compact_function import COMPACTION_PREFIX
from agentlab.session._session import Session
from agentlab.session.duckdb import _contents
from agentlab.store._database import Store

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])

# One database for the whole module; each example gets a session and ids of its own (opening a store and
# running its migrations for every example would dominate the run time).
_examples = itertools.count()


@pytest.fixture(scope="module")
def shared_store():
    store = Store()
    yield store
    store.close()


@st.composite
def trees(draw, max_size: int = 25):
    """A random forest: node i's parent is None or an earlier node; some nodes are deleted afterwards."""
    size = draw(st.integers(1, max_size))
    parents: list[int | None] = [None]
    for i in range(1, size):
        parents.append(draw(st.one_of(st.none(), st.integers(0, i - 1))) if draw(st.booleans()) else i - 1)
    deleted = draw(st.sets(st.integers(0, size - 1), max_size=size // 4))
    return parents, deleted


def build(store: Store, parents: list[int | None]) -> tuple[Session, str]:
    """Store the tree in a fresh session (one bulk import, each node naming its parent); returns the id prefix."""
    prefix = f"e{next(_examples)}-"
    session = Session(store, prefix)
    session.append_messages([{"id": f"{prefix}n{i}", "role": "user", "parts": [{"type": "text", "text": f"n{i}"}],
                              "parent_id": None if parent is None else f"{prefix}n{parent}"}
                             for i, parent in enumerate(parents)])
    return session, prefix


def naive_path(parents: list[int | None], alive: set[int], leaf: int, prefix: str) -> list[str]:
    path: list[str] = []
    cur: int | None = leaf
    while cur is not None and cur in alive:
        path.append(f"{prefix}n{cur}")
        cur = parents[cur]
    return path[::-1]


@FAST
@given(trees())
def test_history_is_the_naive_parent_walk(shared_store, tree):
    parents, deleted = tree
    session, prefix = build(shared_store, parents)
    session.delete_messages([f"{prefix}n{i}" for i in deleted])
    alive = set(range(len(parents))) - deleted
    for node in range(len(parents)):
        if node in alive:
            got = [m["id"] for m in session.get_history(f"{prefix}n{node}")]
        else:
            with pytest.warns(UnknownLeafWarning):  # a deleted leaf reads as [] (upstream), and says so
                got = [m["id"] for m in session.get_history(f"{prefix}n{node}")]
        assert got == (naive_path(parents, alive, node, prefix) if node in alive else [])
    childless = [i for i in alive if not any(parents[c] == i for c in alive)]
    assert session.latest_leaf_id() == (f"{prefix}n{max(childless)}" if childless else None)
    assert [m["id"] for m in session.get_history()] == (
        naive_path(parents, alive, max(childless), prefix) if childless else [])


@FAST
@given(trees(), st.lists(st.tuples(st.integers(0, 24), st.integers(0, 24)), max_size=6))
def test_overlays_never_leak_into_sibling_branches(shared_store, tree, spans):
    parents, _ = tree
    n = len(parents)
    alive = set(range(n))
    session, prefix = build(shared_store, parents)
    stored = {}
    for leaf, depth in spans:  # each overlay spans part of some root-to-node path
        path = naive_path(parents, alive, leaf % n, prefix)
        start = path[min(depth % len(path), len(path) - 1)]
        record = session.add_compaction(f"summary of {start}..{path[-1]}", start, path[-1])
        stored[COMPACTION_PREFIX + record.id] = record
    for node in range(n):
        path = naive_path(parents, alive, node, prefix)
        history = session.get_history(f"{prefix}n{node}")
        covered: set[str] = set()
        for message in history:
            if message["id"].startswith(COMPACTION_PREFIX):
                record = stored[message["id"]]  # an overlay shows only if its whole range is on this path
                assert record.from_message_id in path and record.to_message_id in path
                first, last = path.index(record.from_message_id), path.index(record.to_message_id)
                assert first <= last
                covered.update(path[first:last + 1])
            else:
                assert message["id"] in path
                covered.add(message["id"])
        assert covered == set(path)  # nothing of the path is lost, nothing foreign is added
        shown = [m["id"] for m in history if not m["id"].startswith(COMPACTION_PREFIX)]
        assert shown == [i for i in path if i in shown]


WORDS = ["apple", "river", "castle", "window", "garden", "silver", "planet", "rocket", "forest", "bridge"]


@FAST
@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=1, max_size=30),
       st.sampled_from(WORDS))
def test_search_finds_every_message_containing_the_word(shared_store, texts, word):
    prefix = f"s{next(_examples)}-"
    session = Session(shared_store, prefix)
    half = len(texts) // 2
    session.append_messages([{"id": f"{prefix}{i}", "role": "user", "parts": [{"type": "text", "text": " ".join(t)}]}
                             for i, t in enumerate(texts[:half])])
    for i, t in enumerate(texts[half:half + 3], start=half):  # a few single appends: the incremental path
        session.append_message({"id": f"{prefix}{i}", "role": "user", "parts": [{"type": "text", "text": " ".join(t)}]})
    session.append_messages([{"id": f"{prefix}{i}", "role": "user", "parts": [{"type": "text", "text": " ".join(t)}]}
                             for i, t in enumerate(texts[half + 3:], start=half + 3)])
    expected = {f"{prefix}{i}" for i, t in enumerate(texts) if word in t}
    for mode in ("any", "all", "phrase"):
        assert {h.id for h in session.search(word, mode=mode, limit=100)} == expected


@st.composite
def operations(draw, max_ops: int = 40):
    """Appends (under a random earlier id, possibly a deleted one coming back), reads and deletes, interleaved."""
    ops = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["append", "append", "read", "read", "read", "delete", "reuse", "reuse",
                                     "update"]))
        ops.append((kind, draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000))))
    return ops


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(operations())
def test_history_stays_the_naive_walk_while_the_tree_changes(shared_store, monkeypatch, ops):
    # Reads between writes exercise the path cache and the parsed heads of the content cache (made tiny here so
    # that these small trees use them): every answer must match a walk of the model below.
    monkeypatch.setattr(_contents, "HEAD_MIN_ROWS", 2)
    monkeypatch.setattr(_contents, "HEAD_SLACK", 3)
    prefix = f"e{next(_examples)}-"
    session = Session(shared_store, prefix)
    parents: dict[str, str | None] = {}  # every id ever stored -> its parent
    alive: set[str] = set()
    deleted: list[str] = []
    texts: dict[str, str] = {}

    def chain(node: str) -> list[str]:  # parent pointers, through deleted ids too
        found: list[str] = []
        cur: str | None = node
        while cur is not None and cur in parents and cur not in found:
            found.append(cur)
            cur = parents[cur]
        return found

    def walk(leaf: str) -> list[str]:
        path: list[str] = []
        cur: str | None = leaf
        while cur is not None and cur in alive:
            path.append(cur)
            cur = parents[cur]
        return path[::-1]

    for kind, a, b in ops:
        nodes = sorted(alive)
        if kind == "append" or (kind == "reuse" and not deleted):
            mid = f"{prefix}n{len(parents)}"
            parent = nodes[a % len(nodes)] if nodes and b % 4 else None
        elif kind == "reuse":
            mid = deleted[a % len(deleted)]
            options = [n for n in nodes if mid not in chain(n)]  # re-adding under a descendant is a cycle
            parent = options[b % len(options)] if options and b % 4 else None
        elif kind == "read":
            if nodes:
                leaf = nodes[a % len(nodes)]
                history = session.get_history(leaf)
                assert [m["id"] for m in history] == walk(leaf)
                assert [m["parts"][0]["text"] for m in history] == [texts[m] for m in walk(leaf)]
                history[0]["parts"][0]["text"] = "changed by the caller"  # must not reach the next read
            continue
        elif kind == "update":
            if nodes:
                target = nodes[a % len(nodes)]
                texts[target] = f"{target} edited {b}"
                session.update_message({"id": target, "role": "user",
                                        "parts": [{"type": "text", "text": texts[target]}]})
            continue
        else:  # delete
            if nodes:
                gone = nodes[a % len(nodes)]
                session.delete_messages([gone])
                alive.discard(gone)
                deleted.append(gone)
            continue
        texts[mid] = mid
        session.append_message({"id": mid, "role": "user", "parts": [{"type": "text", "text": mid}]}, parent)
        parents[mid] = parent
        alive.add(mid)
        if mid in deleted:
            deleted.remove(mid)
    for leaf in sorted(alive):
        history = session.get_history(leaf)
        assert [m["id"] for m in history] == walk(leaf)
        assert [m["parts"][0]["text"] for m in history] == [texts[m] for m in walk(leaf)]
