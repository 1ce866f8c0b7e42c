"""VectorStore: entries in DuckDB, embeddings computed once, and FAISS kept as a committed-only cache."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agentlab.errors import EmbedderError, InvalidArgumentError, ReadOnlyAgentError, StoreInUseError
from agentlab.search._embedders import HashEmbedder, MiniLMEmbedder
from agentlab.search._faiss_index import vector_indexes as _caches
from agentlab.search._vectors import VectorEntry, VectorHit, VectorStore, content_hash, drop_namespace
from agentlab.store._database import Store

FACTS = [
    ("pet", "Melanie adopted a puppy last spring", {"speaker": "Melanie"}),
    ("music", "Caroline plays the violin in an orchestra", None),
    ("trip", "The team flew to Lisbon for the conference", {"year": 2023}),
    ("food", "Dinner was a spicy vegetable curry with rice", None),
]


class Counting:
    """A real HashEmbedder that records every text it is asked to embed."""

    def __init__(self, dimension: int = 64) -> None:
        self.inner = HashEmbedder(dimension)
        self.model_id, self.dimension = self.inner.model_id, dimension
        self.texts: list[str] = []

    def encode(self, texts):
        self.texts.extend(texts)
        return self.inner.encode(texts)


class Broken:
    """An embedder that returns a wrong dimension, or NaN for texts containing "poison"."""

    model_id = "hash-v1-64"
    dimension = 64

    def __init__(self, wrong_dimension: bool = False) -> None:
        self.wrong_dimension = wrong_dimension

    def encode(self, texts):
        vectors = HashEmbedder(64).encode(texts)
        if self.wrong_dimension:
            return vectors[:, :32]
        vectors[[i for i, t in enumerate(texts) if "poison" in t]] = np.nan
        return vectors


@pytest.fixture
def file_store(store_path):
    store = Store(store_path)
    yield store
    store.close()


def cached(store: Store, namespace: str = "kb"):
    return _caches(store).get(namespace)


def table_count(store: Store, table: str) -> int:
    return store.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]


class TestAddingAndReading:
    def test_entries_round_trip_with_their_metadata(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        assert vs.add_many(FACTS) == 4
        assert vs.count() == 4
        assert vs.keys() == ["pet", "music", "trip", "food"]
        assert vs.get("pet") == VectorEntry("pet", "Melanie adopted a puppy last spring", {"speaker": "Melanie"})
        assert vs.get("music") == VectorEntry("music", "Caroline plays the violin in an orchestra", {})
        assert vs.get("missing") is None

    def test_re_adding_identical_entries_changes_nothing(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        vs.add_many(FACTS)
        assert vs.add_many(FACTS) == 0
        assert vs.add("pet", "Melanie adopted a puppy last spring", {"speaker": "Melanie"}) is False
        assert table_count(file_store, "vector_entries") == 4

    def test_an_update_keeps_the_key_in_place(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        vs.add_many(FACTS)
        assert vs.add("music", "Caroline now plays the cello", {"changed": True}) is True
        assert vs.get("music") == VectorEntry("music", "Caroline now plays the cello", {"changed": True})
        assert vs.keys() == ["pet", "music", "trip", "food"]

    def test_the_last_item_wins_within_one_batch_and_pairs_are_accepted(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        assert vs.add_many([("a", "first"), ("b", "bee"), ("a", "second")]) == 2
        assert [vs.get("a").content, vs.get("b").content] == ["second", "bee"]

    def test_namespaces_do_not_mix(self, file_store):
        one, two = VectorStore(file_store, "one", HashEmbedder()), VectorStore(file_store, "two", HashEmbedder())
        one.add("k", "shared text")
        two.add("k", "other text")
        assert [one.get("k").content, two.get("k").content] == ["shared text", "other text"]
        assert [hit.content for hit in two.search("shared text other")] == ["other text"]

    @pytest.mark.parametrize(
        ("items", "error", "message"),
        [
            ([("ok", "fine"), ("", "empty key")], ValueError, "non-empty strings"),
            ([("ok", "fine"), ("bad", 42)], TypeError, "must be a string"),
            ([("ok", "fine"), ("bad", "text", {"x": float("nan")})], TypeError, "not JSON"),
            ([("ok", "fine"), ("bad", "text", ["not", "a", "dict"])], TypeError, "dict or None"),
            ([("ok", "fine"), "just a string"], TypeError, r"\(key, content, metadata\)"),
        ],
    )
    def test_bad_items_store_nothing(self, file_store, items, error, message):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        with pytest.raises(error, match=message):
            vs.add_many(items)
        assert vs.count() == 0 and table_count(file_store, "vector_embeddings") == 0


class TestEmbeddingsAreComputedOnce:
    def test_unchanged_content_is_never_embedded_again_even_after_reopening(self, store_path):
        counting = Counting()
        with_store = Store(store_path)
        VectorStore(with_store, "kb", counting).add_many(FACTS)
        assert sorted(counting.texts) == sorted(text for _, text, _ in FACTS)
        counting.texts.clear()
        VectorStore(with_store, "kb", counting).add_many(FACTS)
        with_store.close()

        reopened = Store(store_path)
        vs = VectorStore(reopened, "kb", counting)
        vs.add_many(FACTS)
        vs.add("copy", FACTS[0][1])  # same content under another key
        VectorStore(reopened, "elsewhere", counting).add("x", FACTS[1][1])  # and another namespace
        vs.add("pet", FACTS[0][1], {"speaker": "someone else"})  # metadata-only change
        assert counting.texts == []
        vs.add("pet", "Melanie adopted a kitten")
        assert counting.texts == ["Melanie adopted a kitten"]
        assert table_count(reopened, "vector_embeddings") == 5
        reopened.close()

    def test_duplicate_contents_in_one_batch_are_embedded_once(self, file_store):
        counting = Counting()
        VectorStore(file_store, "kb", counting).add_many([("a", "same"), ("b", "same"), ("c", "other")])
        assert sorted(counting.texts) == ["other", "same"]

    def test_embeddings_are_keyed_by_model_and_content_hash(self, file_store):
        VectorStore(file_store, "kb", HashEmbedder(16)).add("a", "hello world")
        rows = file_store.execute("SELECT model_id, content_hash, vector FROM vector_embeddings").fetchall()
        assert [(m, h) for m, h, _ in rows] == [("hash-v1-16", content_hash("hello world"))]
        assert np.allclose(rows[0][2], HashEmbedder(16).encode(["hello world"])[0])


class TestSearch:
    def test_hits_are_ranked_by_cosine_with_content_and_metadata(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder(256))
        vs.add_many(FACTS)
        hits = vs.search("who adopted a puppy", k=2)
        assert [hit.key for hit in hits] == ["pet", hits[1].key] and len(hits) == 2
        assert hits[0].content == "Melanie adopted a puppy last spring"
        assert hits[0].metadata == {"speaker": "Melanie"}
        assert hits[0].score > hits[1].score
        query = HashEmbedder(256).encode(["who adopted a puppy"])[0]
        assert hits[0].score == pytest.approx(float(query @ HashEmbedder(256).encode([FACTS[0][1]])[0]), abs=1e-5)

    def test_k_larger_than_the_namespace_returns_everything_and_k_zero_nothing(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        assert vs.search("anything") == []
        vs.add_many(FACTS)
        assert sorted(hit.key for hit in vs.search("anything", k=50)) == ["food", "music", "pet", "trip"]
        assert vs.search("anything", k=0) == []
        with pytest.raises(ValueError, match="k must be"):
            vs.search("anything", k=-1)

    @pytest.mark.parametrize("k", [float("nan"), 1.5, float("inf"), -1, True, "3", None])
    def test_a_k_that_is_not_a_whole_number_of_zero_or_more_is_refused_before_embedding(self, file_store, k):
        embedder = Counting()
        vs = VectorStore(file_store, "kb", embedder)
        vs.add_many(FACTS, progress=False)
        embedded = len(embedder.texts)
        with pytest.raises(InvalidArgumentError, match="k must be"):
            vs.search("anything", k=k)
        with pytest.raises(InvalidArgumentError, match="k must be"):
            vs.search_vector(np.ones(embedder.dimension, dtype=np.float32), k=k)
        assert len(embedder.texts) == embedded
        assert [h.key for h in vs.search("anything", k=np.int64(1))] != []

    @pytest.mark.parametrize("chunk_size", [0, -3, 2.5, float("nan")])
    def test_a_chunk_size_below_one_is_refused(self, file_store, chunk_size):
        with pytest.raises(InvalidArgumentError, match="chunk_size"):
            VectorStore(file_store, "kb", HashEmbedder(), chunk_size=chunk_size)

    def test_a_key_filter_restricts_the_candidates(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder(256))
        vs.add_many(FACTS)
        hits = vs.search("Melanie adopted a puppy", k=3, keys=["music", "food", "not-there"])
        assert sorted(hit.key for hit in hits) == ["food", "music"]
        assert [hit.key for hit in vs.search("puppy", keys="pet")] == ["pet"]
        assert vs.search("puppy", keys=[]) == []

    def test_search_vector_finds_a_stored_vector_first_with_score_one(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        vs.add_many(FACTS)
        vector = HashEmbedder().encode([FACTS[2][1]])[0]
        hit = vs.search_vector(vector, k=1)[0]
        assert (hit.key, round(hit.score, 5)) == ("trip", 1.0)
        assert vs.search_vector(vector.tolist(), k=1)[0].key == "trip"
        with pytest.raises(EmbedderError, match="declares dimension=64"):
            vs.search_vector(np.ones(8, np.float32))


class TestFaissCache:
    def test_it_is_built_on_first_search_and_updated_in_place_after_commits(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        vs.add_many(FACTS)
        assert cached(file_store) is None
        vs.search("x")
        cache = cached(file_store)
        assert cache.index.ntotal == 4
        vs.add("new", "A brand new fact about gardening")
        vs.add("pet", "Melanie adopted a kitten")
        vs.delete(["food"])
        assert cached(file_store) is cache and cache.index.ntotal == 4
        generation = file_store.execute(
            "SELECT generation FROM vector_namespaces WHERE namespace = 'kb'"
        ).fetchall()[0][0]
        assert cache.generation == generation
        assert vs.search("brand new gardening", k=1)[0].key == "new"
        assert vs.search("Melanie adopted a kitten", k=1)[0].content == "Melanie adopted a kitten"
        assert "food" not in [hit.key for hit in vs.search("spicy curry rice", k=10)]
        vs.add("copy", FACTS[1][1])  # known content: its vector is read back from DuckDB after commit
        assert cached(file_store) is cache and cache.index.ntotal == 5
        twins = vs.search_vector(HashEmbedder().encode([FACTS[1][1]])[0], k=2)
        assert sorted((hit.key, round(hit.score, 5)) for hit in twins) == [("copy", 1.0), ("music", 1.0)]

    def test_incremental_updates_match_a_rebuild_from_duckdb(self, file_store):
        rng = random.Random(7)
        vs = VectorStore(file_store, "kb", HashEmbedder(32))
        words = "red green blue cat dog bird river stone cloud tree".split()
        vs.search("warm up the cache")
        for step in range(40):
            keys = [f"k{rng.randrange(15)}" for _ in range(rng.randrange(1, 4))]
            if rng.random() < 0.25:
                vs.delete(keys)
            else:
                vs.add_many([(k, " ".join(rng.sample(words, 3)), {"step": step}) for k in keys])
        queries = ["red cat", "blue river stone", "tree"]
        live = [vs.search(q, k=5) for q in queries]
        _caches(file_store).clear()
        rebuilt = [vs.search(q, k=5) for q in queries]
        def rounded(results):
            return [[(h.key, round(h.score, 5), h.content, h.metadata) for h in r] for r in results]

        assert rounded(live) == rounded(rebuilt)
        assert all(len(r) == min(5, vs.count()) for r in live)
        assert cached(file_store).index.ntotal == vs.count()

    def test_a_metadata_only_change_reaches_the_hits_of_a_live_cache(self, file_store):
        counting = Counting()
        vs = VectorStore(file_store, "kb", counting)
        vs.add_many(FACTS)
        vs.search("x")
        counting.texts.clear()
        vs.add("pet", FACTS[0][1], {"speaker": "Mel", "verified": True})
        hit = vs.search_vector(HashEmbedder().encode([FACTS[0][1]])[0], k=1)[0]
        assert hit == VectorHit("pet", hit.score, FACTS[0][1], {"speaker": "Mel", "verified": True})
        assert counting.texts == [] and cached(file_store).index.ntotal == 4

    def test_a_rollback_leaves_nothing_in_the_cache_or_the_file(self, file_store):
        vs = VectorStore(file_store, "kb", HashEmbedder())
        vs.add_many(FACTS)
        vs.search("x")
        cache = cached(file_store)
        with pytest.raises(RuntimeError, match="abort"), file_store.transaction():
            vs.add("ghost", "A ghost entry that never commits")
            vs.delete("pet")
            # Inside the transaction the search sees its own writes, from a throwaway index.
            assert vs.search("ghost entry never commits", k=1)[0].key == "ghost"
            raise RuntimeError("abort")
        assert cached(file_store) is cache and cache.index.ntotal == 4
        assert vs.get("ghost") is None and vs.get("pet") is not None
        assert [hit.key for hit in vs.search("ghost entry never commits", k=10) if hit.key == "ghost"] == []

    def test_a_dropped_cache_or_a_reopened_file_is_rebuilt_from_duckdb(self, store_path):
        first = Store(store_path)
        vs = VectorStore(first, "kb", HashEmbedder())
        vs.add_many(FACTS)
        before = vs.search("violin orchestra", k=4)
        _caches(first).clear()
        assert vs.search("violin orchestra", k=4) == before
        first.close()
        second = Store(store_path)
        assert cached(second) is None
        again = VectorStore(second, "kb", HashEmbedder()).search("violin orchestra", k=4)
        assert again == before and again[0] == VectorHit("music", again[0].score, FACTS[1][1], {})
        assert cached(second).index.ntotal == 4
        second.close()

    def test_a_stale_cache_is_detected_by_its_generation(self, store_path):
        # A write that bypasses VectorStore (raw statements on the store, so no after-commit patch and no
        # outside-write notice) still moves the generation; the next search must rebuild from the file.
        store = Store(store_path)
        VectorStore(store, "kb", HashEmbedder()).add_many(FACTS)
        reader = VectorStore(store, "kb", HashEmbedder())
        gone = reader.search("x", k=len(FACTS))[0].key
        store.execute("DELETE FROM vector_entries WHERE namespace = 'kb' AND key = ?", [gone])
        store.execute("UPDATE vector_namespaces SET generation = nextval('vector_generations') WHERE namespace = 'kb'")
        assert gone not in [hit.key for hit in reader.search("x", k=len(FACTS))]
        assert cached(store).index.ntotal == len(FACTS) - 1
        store.close()

    def test_a_second_store_on_an_open_file_is_refused(self, store_path):
        first = Store(store_path)
        with pytest.raises(StoreInUseError, match="already open in this process"):
            Store(store_path)
        first.close()
        Store(store_path).close()  # free again once the first is closed


class TestEmbedderMistakes:
    def test_a_wrong_dimension_or_nan_stores_nothing(self, file_store):
        for embedder, items in [
            (Broken(wrong_dimension=True), FACTS),
            (Broken(), [*FACTS, ("bad", "poison pill", None)]),
        ]:
            vs = VectorStore(file_store, "kb", embedder)
            with pytest.raises(EmbedderError, match=r"nothing was stored|declares dimension=64"):
                vs.add_many(items)
            assert vs.count() == 0
            assert [table_count(file_store, t) for t in ("vector_embeddings", "vector_namespaces")] == [0, 0]

    def test_a_nan_query_vector_is_refused(self, file_store):
        vs = VectorStore(file_store, "kb", Broken())
        vs.add("fine", "a fine text")
        with pytest.raises(EmbedderError, match="NaN"):
            vs.search("poison")

    def test_another_embedder_on_a_pinned_namespace_is_refused_until_it_is_dropped(self, file_store):
        VectorStore(file_store, "kb", HashEmbedder(64)).add_many(FACTS)
        with pytest.raises(EmbedderError, match=r"64-dimensional vectors of 'hash-v1-64'.*dimension 32"):
            VectorStore(file_store, "kb", HashEmbedder(32))
        same_size = Counting(64)
        same_size.model_id = "another-model"
        with pytest.raises(EmbedderError, match="drop_namespace"):
            VectorStore(file_store, "kb", same_size)
        assert drop_namespace(file_store, "kb") == 4
        vs = VectorStore(file_store, "kb", HashEmbedder(32))
        vs.add("a", "now in 32 dimensions")
        assert [hit.key for hit in vs.search("dimensions")] == ["a"]

    def test_something_that_is_not_an_embedder_is_a_type_error(self, file_store):
        with pytest.raises(TypeError, match="not an embedder"):
            VectorStore(file_store, "kb", object())


class TestReadOnly:
    def test_a_read_only_store_searches_but_refuses_writes(self, store_path):
        writer = Store(store_path)
        VectorStore(writer, "kb", HashEmbedder()).add_many(FACTS)
        writer.close()
        reader = Store(store_path, read_only=True)
        vs = VectorStore(reader, "kb", HashEmbedder())
        assert vs.search("violin", k=1)[0].key == "music"
        with pytest.raises(ReadOnlyAgentError):
            vs.add("x", "y")
        reader.close()


@pytest.mark.slow
class TestWithTheRealModel:
    def test_a_paraphrased_question_finds_the_right_entry_first(self, file_store):
        vs = VectorStore(file_store, "memories", MiniLMEmbedder())
        vs.add_many([
            ("puppy", "Melanie adopted a puppy last spring", None),
            ("violin", "Caroline has been learning the violin for two years", None),
            ("lisbon", "The conference trip to Lisbon was in March", None),
            ("curry", "She cooked a spicy curry for the whole family", None),
            ("garden", "Her garden is full of tomatoes this summer", None),
        ])
        hits = vs.search("What pet does she have?", k=5)
        assert hits[0].key == "puppy"
        assert hits[0].score > hits[1].score + 0.05
