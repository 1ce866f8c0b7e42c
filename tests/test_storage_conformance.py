"""One conformance suite for every SessionStorage: the DuckDB one (the agent's file) and the in-memory reference.

Each test runs on both implementations, through the storage itself and through a Session built on it. The last
class drives both with the same random operations and compares everything they answer, so a difference in any
read (paths, tips, branches, row sizes, search hits and scores) fails here.
"""

from __future__ import annotations

import json
import random
import warnings

import pytest

from agentlab.context._providers import AgentContextProvider
from agentlab.errors import (
    ContextError,
    HistoryTooDeepError,
    HistoryTruncatedWarning,
    InvalidMessageError,
    SessionError,
    UnknownMessageError,
)
from agentlab.session import (
    DuckDBSessionStorage,
    InMemorySessionStorage,
    SearchableStorage,
    Session,
    SessionStorage,
)
from agentlab.session._compact_function import create_compact_function
from agentlab.session._messages import UNSET, Appended
from agentlab.session._storage_contract import OutlineStorage
from agentlab.store._database import Store
from tests.helpers import ids, msg, texts

KINDS = ["duckdb", "memory"]


def make_storage(kind: str) -> DuckDBSessionStorage | InMemorySessionStorage:
    return DuckDBSessionStorage(Store(), "") if kind == "duckdb" else InMemorySessionStorage()


@pytest.fixture(params=KINDS)
def storage(request):
    made = make_storage(request.param)
    yield made
    if isinstance(made, DuckDBSessionStorage):
        made.store.close()


@pytest.fixture
def session(storage):
    return Session(storage)


def chain(storage, *names: str, parent=UNSET) -> None:
    storage.append_many([msg(n) for n in names], parent)


class TestTheContract:
    def test_both_satisfy_the_protocols(self, storage):
        assert isinstance(storage, SessionStorage) and isinstance(storage, SearchableStorage)
        assert isinstance(storage, OutlineStorage)

    def test_a_session_built_on_a_storage_uses_it(self, storage):
        session = Session(storage)
        session.append_message(msg("m1"))
        assert session.storage is storage and storage.get_message("m1")["id"] == "m1"
        assert session.session_id == storage.session_id == ""


class TestAppend:
    def test_a_repeated_id_keeps_the_first_content(self, storage):
        first, _ = storage.append(msg("m1", "First"))
        again, _ = storage.append(msg("m1", "Duplicate"))
        assert again == Appended("m1", None, first.seq, True)
        assert storage.read(["m1"])[0]["parts"] == [{"type": "text", "text": "First"}]

    def test_omitted_parent_follows_the_tip_none_makes_a_root_an_id_branches(self, storage):
        chain(storage, "m1", "m2")
        storage.append(msg("m3"), None)
        storage.append(msg("m4"), "m1")
        storage.append(msg("m5"))
        assert storage.path_ids("m3") == ["m3"]
        assert storage.path_ids() == ["m1", "m4", "m5"]
        assert storage.children_ids("m1") == ["m2", "m4"]

    def test_an_unknown_parent_is_refused_and_stores_nothing(self, storage):
        storage.append(msg("m1"))
        with pytest.raises(UnknownMessageError, match="nope"):
            storage.append(msg("m2"), "nope")
        with pytest.raises(UnknownMessageError):
            storage.append_many([msg("m3"), {**msg("m4"), "parent_id": "nope"}])
        assert storage.path_ids() == ["m1"] and storage.get_message("m3") is None

    @pytest.mark.parametrize("bad", [{"id": "", "role": "user", "parts": []}, {"id": "x", "role": "user", "parts": "no"},
                                     {"id": "x", "role": "user", "parts": [{"v": float("nan")}]}])
    def test_a_bad_message_in_a_batch_stores_nothing(self, storage, bad):
        with pytest.raises(InvalidMessageError):
            storage.append_many([msg("m1"), bad, msg("m2")])
        assert storage.latest_leaf_id() is None and storage.read(["m1", "m2"]) == []

    def test_a_batch_chains_and_a_parent_key_hangs_one_elsewhere(self, storage):
        results, stored = storage.append_many([msg("a"), msg("b"), {**msg("c"), "parent_id": "a"}, msg("d"),
                                               msg("b", "again")])
        assert [(r.id, r.parent_id, r.duplicate) for r in results] == [
            ("a", None, False), ("b", "a", False), ("c", "a", False), ("d", "c", False), ("b", "a", True)]
        assert [m["id"] for m in stored] == ["a", "b", "c", "d"] and "parent_id" not in stored[2]
        assert storage.path_ids() == ["a", "c", "d"]

    def test_a_read_is_a_fresh_copy_with_created_at_filled_in(self, storage):
        storage.append(msg("m1"))
        first = storage.get_message("m1")
        first["parts"].append({"type": "text", "text": "changed"})
        assert storage.get_message("m1")["parts"] == [{"type": "text", "text": "m1"}]
        assert first["created_at"].endswith("Z")


class TestTheTipAndDeletes:
    def test_the_newest_childless_message_is_the_tip(self, storage):  # spec 16 case 3
        chain(storage, "m1", "m2a")
        storage.append(msg("m2b"), "m1")
        assert storage.latest_leaf_id() == "m2b"
        storage.append(msg("m3a"), "m2a")
        assert storage.latest_leaf_id() == "m3a"

    def test_deleting_the_tip_moves_it_back_and_an_interior_delete_cuts_the_path(self, storage):  # case 4
        chain(storage, "m0", "m1", "m2")
        assert storage.delete(["m2", "nope", "m2"]) == ["m2"]
        assert storage.latest_leaf_id() == "m1"
        storage.append(msg("m2"))
        storage.delete(["m0"])
        assert storage.latest_leaf_id() == "m2" and storage.path_ids() == ["m1", "m2"]

    def test_appending_a_deleted_id_under_its_own_orphan_is_refused(self, storage):
        chain(storage, "a", "b", "c")
        storage.delete(["b"])
        with pytest.raises(InvalidMessageError, match="cycle"):
            storage.append(msg("b"), "c")
        storage.append(msg("b"), "a")
        assert storage.path_ids("c") == ["a", "b", "c"]

    def test_clear_removes_messages_and_overlays(self, storage):
        chain(storage, "m1", "m2")
        storage.add_compaction("s", "m1", "m2")
        assert storage.clear() == 2
        assert (storage.latest_leaf_id(), storage.compactions(), storage.path_ids("m1")) == (None, [], [])


class TestPathsAndRows:
    def test_unknown_and_falsy_leaves(self, storage):
        chain(storage, "a", "b")
        assert (storage.path_ids("nope"), storage.path_ids(""), storage.path_ids(None)) == ([], ["a", "b"], ["a", "b"])
        assert storage.has_message("a") and not storage.has_message("nope")

    def test_a_long_path_is_cut_on_the_root_side(self, storage):
        chain(storage, *[f"m{i}" for i in range(6)])
        assert storage.path_ids(max_depth=3) == ["m3", "m4", "m5"]

    def test_path_and_read_path_say_whether_the_path_was_cut(self, storage):
        chain(storage, *[f"m{i}" for i in range(6)])
        assert storage.path(max_depth=3) == (["m3", "m4", "m5"], True)
        assert storage.path(max_depth=6) == ([f"m{i}" for i in range(6)], False)  # exactly max_depth: whole
        assert storage.path("m2", max_depth=3) == (["m0", "m1", "m2"], False)
        assert storage.path("nope", max_depth=3) == ([], False)
        ids_, messages, cut = storage.read_path(max_depth=4)
        assert (ids_, ids(messages), cut) == (["m2", "m3", "m4", "m5"], ["m2", "m3", "m4", "m5"], True)

    def test_a_path_stopped_by_a_deleted_ancestor_at_the_cap_is_not_cut(self, storage):
        chain(storage, *[f"m{i}" for i in range(6)])
        storage.delete(["m1"])
        assert storage.path(max_depth=4) == (["m2", "m3", "m4", "m5"], False)
        assert storage.read_path(max_depth=3)[2] is True

    def test_row_stats_are_utf8_bytes_of_the_stored_json_and_keep_the_appended_role(self, storage):
        message = {**msg("m1", "café ☕"), "created_at": "2026-01-01T00:00:00.000Z"}
        storage.append(message)
        storage.update({**message, "role": "assistant"})
        expected = len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).replace(
            '"role":"user"', '"role":"assistant"').encode("utf-8"))
        [stat] = storage.row_stats()
        assert (stat.id, stat.role, stat.bytes) == ("m1", "user", expected)
        assert storage.get_message("m1")["role"] == "assistant"


class TestHistoryPastMaxDepth:
    """A branch longer than the session's ``max_depth`` is never read silently, whatever the storage."""

    @pytest.fixture
    def filled(self, storage):
        chain(storage, *[f"m{i}" for i in range(12)])
        return storage

    def test_a_branch_exactly_max_depth_long_is_whole_and_quiet(self, filled):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            history = Session(filled, max_depth=12).get_history()
        assert ids(history) == [f"m{i}" for i in range(12)] and history.truncated is False

    def test_a_branch_stopped_by_a_deleted_ancestor_at_the_cap_is_whole(self, filled):
        Session(filled).delete_messages(["m1"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            history = Session(filled, max_depth=10).get_history()
        assert ids(history) == [f"m{i}" for i in range(2, 12)] and not history.truncated

    def test_an_empty_session_reads_an_empty_history(self, storage):
        history = Session(storage, max_depth=1, on_overflow="raise").get_history()
        assert history == [] and not history.truncated

    def test_the_default_warns_and_flags_the_newest_messages(self, filled):
        with pytest.warns(HistoryTruncatedWarning, match=r"'m11' is longer than max_depth=5"):
            history = Session(filled, max_depth=5).get_history()
        assert ids(history) == [f"m{i}" for i in range(7, 12)] and history.truncated is True

    def test_raise_gives_a_typed_error_naming_the_leaf_and_the_cap(self, filled):
        session = Session(filled, max_depth=5, on_overflow="raise")
        with pytest.raises(HistoryTooDeepError, match="max_depth=5") as caught:
            session.get_history("m9")
        assert (caught.value.leaf_id, caught.value.max_depth) == ("m9", 5)

    def test_truncate_flags_without_warning_and_a_call_overrides_the_session(self, filled):
        session = Session(filled, max_depth=5, on_overflow="truncate")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            history = session.get_history()
        assert ids(history) == [f"m{i}" for i in range(7, 12)] and history.truncated
        with pytest.raises(HistoryTooDeepError):
            session.get_history(on_overflow="raise")

    def test_a_branch_read_again_is_still_flagged_and_a_leaf_within_reach_is_not(self, filled):
        session = Session(filled, max_depth=5, on_overflow="truncate")
        first, second = session.get_history(), session.get_history()
        assert first == second and first.truncated and second.truncated
        assert not session.get_history("m4").truncated

    def test_overlays_apply_to_a_cut_branch(self, filled):
        session = Session(filled, max_depth=5, on_overflow="truncate")
        session.add_compaction("Summary of m8-m9", "m8", "m9")
        history = session.get_history()
        assert texts(history) == ["m7", "Summary of m8-m9", "m10", "m11"] and history.truncated

    def test_recent_history_counts_a_cut_as_truncated(self, filled):
        window = Session(filled, max_depth=5).get_recent_history(10**9)
        assert ids(window.messages) == [f"m{i}" for i in range(7, 12)] and window.truncated
        assert not Session(filled, max_depth=12).get_recent_history(10**9).truncated


class TestUpdateAndGeneration:
    def test_an_update_replaces_the_content_and_an_unknown_id_is_refused(self, storage):
        chain(storage, "m1")
        storage.update(msg("m1", "new text"))
        assert storage.get_message("m1")["parts"][0]["text"] == "new text"
        with pytest.raises(UnknownMessageError, match="nope"):
            storage.update(msg("nope"))

    def test_the_generation_moves_on_every_change_to_a_stored_path_but_not_on_appends(self, storage):
        chain(storage, "m1")
        seen = [storage.generation]
        chain(storage, "m2")
        storage.append(msg("m3"), "m1")
        seen.append(storage.generation)
        for change in (lambda: storage.update(msg("m1", "x")), lambda: storage.add_compaction("s", "m1", "m1"),
                       lambda: storage.delete(["m2"]), storage.clear):
            change()
            seen.append(storage.generation)
        assert seen[0] == seen[1] and len(set(seen[1:])) == 5  # each change moved it, to a new value

    def test_after_commit_runs_once_the_write_is_done(self, storage):
        ran = []
        storage.after_commit(lambda: ran.append(1))
        assert ran == [1]


class TestOverlaysThroughTheSession:
    def test_an_overlay_replaces_its_range_on_read(self, session):  # spec 16 case 5
        session.append_messages([msg(f"m{i}") for i in range(6)])
        record = session.add_compaction("Summary of m1-m3", "m1", "m3")
        assert texts(session.get_history()) == ["m0", "Summary of m1-m3", "m4", "m5"]
        assert session.get_history()[1]["id"] == f"compaction_{record.id}"

    def test_the_newest_overlay_wins_even_if_narrower_and_siblings_stay_apart(self, session):  # cases 7, 8
        session.append_messages([msg("m0"), msg("m1"), msg("a2"), msg("a3"), msg("a4")])
        session.append_messages([msg("b2"), msg("b3")], parent_id="m1")
        session.add_compaction("A1", "m0", "a2")
        session.add_compaction("B", "m0", "b2")
        session.add_compaction("A2", "m0", "a3")
        assert texts(session.get_history("a4")) == ["A2", "a4"]
        assert texts(session.get_history("b3")) == ["B", "b3"]

    def test_compact_and_its_runs_are_recorded(self, session, storage):
        session.append_messages([msg(f"m{i}", "word " * 40) for i in range(8)])
        session.on_compaction(create_compact_function(lambda prompt: "They talked.", protect_head=1,
                                                      min_tail_messages=1, tail_token_budget=1))
        assert session.compact()["from_message_id"] == "m1"
        session.on_compaction(lambda history: None)
        assert session.compact() is None
        [event] = storage.compaction_events()
        assert (event["kind"], event["trigger"], event["error"]) == ("noop", "manual", None)
        [overlay] = storage.compactions()
        assert (overlay.from_message_id, overlay.trigger, overlay.messages_covered) == ("m1", "manual", 6)


class TestSearch:
    @pytest.fixture
    def filled(self, storage):
        storage.append_many([msg("a", "deploying on Friday is risky"), msg("b", "The deployment is on Friday"),
                             msg("c", "friday friday lunch", role="assistant")])
        storage.append(msg("d", "deploy Friday afternoon"), "a")
        return storage

    def test_phrase_all_and_any(self, filled):
        assert [h.id for h in filled.search("deploy friday")] == ["d"]
        assert {h.id for h in filled.search("deploy friday", mode="all")} == {"a", "d"}
        assert {h.id for h in filled.search("deployment lunch", mode="any")} == {"b", "c"}
        assert filled.search("   ") == [] and filled.search("friday", limit=0) == []

    def test_role_branch_and_limit_filters(self, filled):
        assert [h.id for h in filled.search("friday", mode="any", role="assistant")] == ["c"]
        assert {h.id for h in filled.search("friday", mode="any", branch="b")} == {"a", "b"}
        assert len(filled.search("friday", mode="any", limit=2)) == 2
        hits = {h.id: h for h in filled.search("friday", mode="any")}
        assert hits["d"].on_current_branch and not hits["c"].on_current_branch

    def test_updates_and_deletes_reach_the_index(self, filled):
        filled.update(msg("c", "nothing about days"))
        filled.delete(["b"])
        assert {h.id for h in filled.search("friday", mode="any")} == {"a", "d"}
        assert [h.id for h in filled.search("nothing about days")] == ["c"]

    def test_a_storage_without_search_says_so(self):
        class NoSearch(InMemorySessionStorage):
            search = None

        session = Session(NoSearch())
        with pytest.raises(SessionError, match="does not support search"):
            session.search("x")


class TestASessionWithoutAnAgent:
    def test_blocks_need_explicit_providers_and_the_cached_prompt_a_place(self):
        session = Session(InMemorySessionStorage()).with_context("soul", type("S", (), {"get": lambda s: "Hi."})())
        with pytest.raises(ContextError, match="requires an explicit provider"):
            session.add_context("memory")
        with pytest.raises(ContextError, match="needs a provider"):
            session.with_cached_prompt()
        assert "Hi." in session.freeze_system_prompt()

    def test_frames_say_they_need_an_agent_file(self):
        session = Session(InMemorySessionStorage())
        with pytest.raises(SessionError, match=r"InMemorySessionStorage; use session.get_history"):
            session.messages_df()

    def test_a_provider_can_still_live_in_an_agent_file(self, store):
        session = Session(InMemorySessionStorage()).with_context("memory", AgentContextProvider(store, "memory"))
        assert session.run_tool("set_context", {"label": "memory", "content": "likes tea"}).startswith("Written")
        assert AgentContextProvider(store, "memory").get() == "likes tea"


def _observe(storage: DuckDBSessionStorage | InMemorySessionStorage, names: list[str]) -> dict:
    """Everything a storage answers about a set of ids, in a comparable form."""
    return {
        "tip": storage.latest_leaf_id(),
        "paths": {n: storage.path_ids(n) for n in names},
        "cut paths": {n: storage.path(n, max_depth=3) for n in names},
        "tip read": storage.read_path(max_depth=4),
        "children": {n: storage.children_ids(n) for n in names},
        "messages": {n: storage.get_message(n) for n in names},
        "stats": [(s.id, s.role, s.bytes) for s in storage.row_stats()],
        "overlays": [(c.from_message_id, c.to_message_id, c.summary) for c in storage.compactions()],
        "outline": [(i, p, r) for i, p, r, _ in sorted(storage.nodes(), key=lambda node: node[3])],
        "search": [(h.id, h.score, h.on_current_branch) for q in ("alpha beta", "gamma", "beta delta")
                   for mode in ("phrase", "all", "any") for h in storage.search(q, mode=mode)],
    }


class TestBothAnswerTheSameToTheSameOperations:
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_a_random_run_of_appends_branches_updates_deletes_and_overlays(self, seed):
        rng = random.Random(seed)
        words = ["alpha", "beta", "gamma", "delta", "epsilon"]
        duck, memory = make_storage("duckdb"), make_storage("memory")
        names = [f"m{i}" for i in range(40)]

        def both(op):
            outcomes = []
            for storage in (duck, memory):
                try:
                    outcomes.append(("ok", op(storage)))
                except Exception as exc:
                    outcomes.append((type(exc).__name__, None))
            assert outcomes[0][0] == outcomes[1][0]

        for step in range(120):
            name = rng.choice(names)
            text = " ".join(rng.choices(words, k=rng.randint(1, 6)))
            stamp = f"2026-01-01T00:00:{step % 60:02d}.000Z"
            roll = rng.random()
            if roll < 0.5:
                parent = rng.choice([UNSET, None, rng.choice(names)])
                both(lambda s: s.append({**msg(name, text), "created_at": stamp}, parent))  # noqa: B023 - both() calls it at once
            elif roll < 0.6:
                batch = [{**msg(rng.choice(names), text), "created_at": stamp} for _ in range(3)]
                both(lambda s: s.append_many(batch))  # noqa: B023 - both() calls it at once
            elif roll < 0.75:
                both(lambda s: s.update({**msg(name, text), "created_at": stamp}))  # noqa: B023 - both() calls it at once
            elif roll < 0.9:
                doomed = rng.sample(names, 2)
                both(lambda s: s.delete(doomed))  # noqa: B023 - both() calls it at once
            else:
                ends = rng.sample(names, 2)
                both(lambda s: s.add_compaction(text, *ends))  # noqa: B023 - both() calls it at once
            assert _observe(duck, names) == _observe(memory, names), f"step {step}"
        duck.store.close()
