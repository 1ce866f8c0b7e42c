"""Context providers: kinds recognised by their methods, DuckDB-backed blocks and skills, folder skills, and the
vector, full-text and hybrid search providers (insert, update, delete, bad embedders)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentlab import Agent, get_agent
from agentlab.context._providers import (
    AgentContextProvider,
    AgentSkillProvider,
    FolderSkillProvider,
    ReadonlyProvider,
    SearchProvider,
    SkillProvider,
    WritableProvider,
    provider_kind,
)
from agentlab.context._search_providers import (
    EntryHit,
    FullTextSearchProvider,
    HybridSearchProvider,
    VectorSearchProvider,
    format_hits,
)
from agentlab.errors import ContextError, EmbedderError, InvalidArgumentError, InvalidSearchError
from agentlab.search._embedders import HashEmbedder

SKILLS = Path(__file__).parent / "fixtures" / "skills"


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting how many texts it was asked to embed."""

    def __init__(self, dimension=32):
        super().__init__(dimension)
        self.calls = 0

    def encode(self, texts):
        self.calls += len(texts)
        return super().encode(texts)


class WrongDimension(HashEmbedder):
    def encode(self, texts):
        return np.zeros((len(texts), self.dimension + 1), np.float32)


class NaNEmbedder(HashEmbedder):
    def encode(self, texts):
        out = super().encode(texts)
        out[-1, 0] = np.nan
        return out


class TestKindsAreRecognisedByWhatAProviderImplements:
    def test_each_kind_in_a_few_lines(self):
        class Readonly:
            def get(self):
                return "x"

        class Writable(Readonly):
            def set(self, content):
                pass

        class Skills(Readonly):
            def load(self, key):
                return None

        class Search(Readonly):
            def search(self, query):
                return None

        assert [provider_kind(p()) for p in (Readonly, Writable, Skills, Search)] == [
            "readonly", "writable", "skill", "search"]
        assert isinstance(Writable(), WritableProvider) and not isinstance(Readonly(), WritableProvider)
        assert isinstance(Skills(), SkillProvider) and isinstance(Search(), SearchProvider)
        assert isinstance(Readonly(), ReadonlyProvider)

    def test_the_built_in_providers_have_the_kinds_they_claim(self, store):
        assert provider_kind(AgentContextProvider(store, "m")) == "writable"
        assert provider_kind(AgentSkillProvider(store, "s")) == "skill"
        assert provider_kind(FolderSkillProvider(SKILLS)) == "skill"
        assert not isinstance(FolderSkillProvider(SKILLS), WritableProvider)
        for cls in (VectorSearchProvider, HybridSearchProvider):
            assert provider_kind(cls(store, HashEmbedder(8))) == "search"
        assert provider_kind(FullTextSearchProvider(store)) == "search"

    def test_something_without_get_is_refused(self):
        with pytest.raises(TypeError, match="get"):
            provider_kind(object())


class TestAgentContextProvider:
    def test_get_is_none_until_set_and_set_replaces(self, store):
        provider = AgentContextProvider(store, "memory")
        assert provider.get() is None
        provider.set("v1")
        provider.set("v2")
        assert provider.get() == "v2"
        assert store.rows("SELECT label, content FROM context_blocks") == [{"label": "memory", "content": "v2"}]

    def test_init_sets_the_label_only_when_none_was_given(self, store):
        given = AgentContextProvider(store, "mine")
        given.init("other")
        assert given.label == "mine"
        unnamed = AgentContextProvider(store)
        with pytest.raises(ContextError, match="no label"):
            unnamed.get()
        unnamed.init("memory")
        assert unnamed.label == "memory"

    def test_text_survives_reopening_the_agent(self):
        agent = get_agent(Agent, "alice")
        AgentContextProvider(agent, "memory").set("User likes coffee.")
        agent.close()
        assert AgentContextProvider(get_agent(Agent, "alice"), "memory").get() == "User likes coffee."


    def test_two_providers_of_one_label_see_each_others_writes(self, store):
        reader, writer = AgentContextProvider(store, "memory"), AgentContextProvider(store, "memory")
        assert reader.get() is None  # remembered as absent
        writer.set("v1")
        assert reader.get() == "v1"

    def test_a_rolled_back_write_is_not_read_back(self, store):
        provider = AgentContextProvider(store, "memory")
        provider.set("kept")
        with pytest.raises(RuntimeError), store.transaction():
            provider.set("lost")
            assert provider.get() == "lost"  # the open transaction sees its own write
            raise RuntimeError("abort")
        assert provider.get() == "kept"

    def test_a_write_made_with_agent_sql_is_read_back(self):
        agent = get_agent(Agent, "bob")
        provider = AgentContextProvider(agent, "memory")
        provider.set("old")
        assert provider.get() == "old"
        agent.sql("UPDATE context_blocks SET content = ? WHERE label = 'memory'", "new")
        assert provider.get() == "new"

class TestAgentSkillProvider:
    def test_catalogue_lists_keys_in_order_with_descriptions(self, store):
        skills = AgentSkillProvider(store, "skills")
        assert skills.get() is None
        skills.set("pirate", "Arr.", "Talk like a pirate")
        skills.set("api-ref", "GET /v1", "API Reference")
        skills.set("bare", "no description")
        assert skills.get() == "- api-ref: API Reference\n- bare\n- pirate: Talk like a pirate"
        assert skills.load("pirate") == "Arr."
        assert skills.load("missing") is None

    def test_updating_without_a_description_keeps_the_old_one(self, store):
        skills = AgentSkillProvider(store, "skills")
        skills.set("pirate", "Arr.", "Talk like a pirate")
        skills.set("pirate", "Arr! Arr!")
        assert skills.get() == "- pirate: Talk like a pirate"
        assert skills.load("pirate") == "Arr! Arr!"

    def test_delete_and_labels_do_not_mix(self, store):
        a, b = AgentSkillProvider(store, "a"), AgentSkillProvider(store, "b")
        a.set("k", "in a")
        b.set("k", "in b")
        assert a.delete("k") is True
        assert a.delete("k") is False
        assert (a.load("k"), b.load("k")) == (None, "in b")
        assert b.keys() == ["k"]


class TestFolderSkillProvider:
    def test_catalogue_takes_descriptions_from_front_matter_or_the_first_line(self):
        assert FolderSkillProvider(SKILLS).get() == (
            "- api-ref: API Reference\n- ops/deploy: How to deploy on Fridays\n- pirate: Talk like a pirate"
        )

    def test_load_returns_the_text_without_front_matter(self):
        skills = FolderSkillProvider(SKILLS)
        assert skills.load("api-ref") == "# API reference\n\nCall `GET /v1/items` with a bearer token.\n"
        assert skills.load("ops/deploy") == "Run `make deploy` and watch the dashboard.\n"

    def test_a_key_that_does_not_exist_or_escapes_the_folder_is_not_found(self):
        skills = FolderSkillProvider(SKILLS / "ops")
        assert skills.load("nope") is None
        assert skills.load("../pirate") is None

    def test_an_allow_list_limits_listing_and_loading(self):
        skills = FolderSkillProvider(SKILLS, keys=["pirate"])
        assert skills.get() == "- pirate: Talk like a pirate"
        assert skills.load("api-ref") is None

    def test_an_empty_allow_list_allows_every_key_as_upstream(self):
        everything = FolderSkillProvider(SKILLS)
        empty = FolderSkillProvider(SKILLS, keys=[])
        assert empty.keys() == everything.keys() and len(empty.keys()) >= 3
        assert empty.get() == everything.get() and empty.load("api-ref") == everything.load("api-ref") is not None

    def test_a_missing_folder_fails_on_use(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="No skill folder"):
            FolderSkillProvider(tmp_path / "nope").get()

    def test_an_empty_folder_lists_nothing(self, tmp_path):
        assert FolderSkillProvider(tmp_path).get() is None


def search_providers(store):
    return [
        VectorSearchProvider(store, HashEmbedder(64), label="kb"),
        FullTextSearchProvider(store, label="kb"),
        HybridSearchProvider(store, HashEmbedder(64), label="kb"),
    ]


@pytest.fixture(params=["vector", "fulltext", "hybrid"])
def searcher(request, store):
    return dict(zip(["vector", "fulltext", "hybrid"], search_providers(store)))[request.param]


class TestEverySearchProvider:
    def test_get_counts_entries_as_upstream(self, searcher):
        assert searcher.get() is None
        searcher.set("a", "deploy on friday")
        assert searcher.get() == "1 entries indexed."

    def test_an_empty_block_and_a_blank_query_find_nothing(self, searcher):
        assert searcher.search("deploy") is None
        searcher.set("a", "deploy on friday")
        assert searcher.search("   ") is None
        assert searcher.hits("") == []

    def test_search_shows_key_and_score(self, searcher):
        searcher.set("deploy", "the deploy happens on friday")
        searcher.set("lunch", "lunch is served at noon")
        hits = searcher.hits("deploy friday")
        assert hits[0].key == "deploy" and hits[0].score > 0
        text = searcher.search("deploy friday")
        assert text.startswith("[deploy] (score ")
        assert "\nthe deploy happens on friday" in text

    def test_update_replaces_the_entry_in_place(self, searcher):
        searcher.set("fact", "the office is in paris")
        searcher.set("fact", "the office moved to berlin")
        assert searcher.count() == 1
        assert [h.key for h in searcher.hits("berlin")] == ["fact"]
        assert all("paris" not in h.content for h in searcher.hits("paris office"))

    def test_delete_removes_the_entry_from_results(self, searcher):
        searcher.set("a", "deploy on friday")
        searcher.set("b", "deploy on monday")
        assert searcher.delete("a") is True
        assert searcher.delete("a") is False
        assert [h.key for h in searcher.hits("deploy")] == ["b"]
        assert searcher.count() == 1

    @pytest.mark.parametrize("kind", ["vector", "fulltext", "hybrid"])
    def test_entries_survive_reopening_the_agent(self, kind):
        agent = get_agent(Agent, "kb-owner")
        dict(zip(["vector", "fulltext", "hybrid"], search_providers(agent)))[kind].set("a", "deploy on friday")
        agent.close()
        again = dict(zip(["vector", "fulltext", "hybrid"], search_providers(get_agent(Agent, "kb-owner"))))[kind]
        assert [h.key for h in again.hits("friday deploy")] == ["a"]

    def test_bad_entries_are_refused(self, searcher):
        with pytest.raises(ValueError, match="non-empty"):
            searcher.set("", "x")
        with pytest.raises(TypeError, match="string"):
            searcher.set("k", 5)

    def test_blocks_with_different_labels_do_not_mix(self, store):
        a = FullTextSearchProvider(store, label="a")
        b = FullTextSearchProvider(store, label="b")
        a.set("k", "deploy on friday")
        assert b.hits("deploy") == []
        assert b.get() is None


class TestVectorSearchProvider:
    def test_unchanged_content_is_embedded_once(self, store):
        embedder = CountingEmbedder()
        provider = VectorSearchProvider(store, embedder, label="kb")
        provider.set("a", "same text")
        provider.set("a", "same text")
        provider.set("b", "same text")
        assert embedder.calls == 1

    @pytest.mark.parametrize("embedder", [WrongDimension(16), NaNEmbedder(16)], ids=["wrong-dimension", "nan"])
    def test_a_bad_embedder_raises_a_typed_error_and_stores_nothing(self, store, embedder):
        provider = VectorSearchProvider(store, embedder, label="kb")
        with pytest.raises(EmbedderError):
            provider.set_many([("a", "first"), ("b", "second")])
        assert provider.count() == 0
        assert provider.get() is None

    def test_set_many_adds_in_bulk(self, store):
        provider = VectorSearchProvider(store, HashEmbedder(32), label="kb")
        assert provider.set_many([(f"k{i}", f"entry number {i}") for i in range(50)]) == 50
        assert provider.count() == 50
        assert provider.entry("k7") == EntryHit("k7", 0.0, "entry number 7", {})

    def test_the_default_embedder_is_minilm_created_lazily(self, store):
        provider = VectorSearchProvider(store, label="kb")
        assert provider._embedder is None
        assert provider.embedder.model_id == "all-MiniLM-L6-v2"


class TestFullTextSearchProvider:
    def test_all_words_must_match_by_default_as_upstream(self, store):
        provider = FullTextSearchProvider(store, label="kb")
        provider.set("a", "deploy on friday")
        provider.set("b", "deploy on monday")
        assert [h.key for h in provider.hits("friday deploy")] == ["a"]
        assert {h.key for h in FullTextSearchProvider(store, label="kb", mode="any").hits("friday deploy")} == {"a", "b"}

    def test_words_are_stemmed_like_fts5_porter(self, store):
        provider = FullTextSearchProvider(store, label="kb")
        provider.set("a", "we are deploying today")
        assert [h.key for h in provider.hits("deploy")] == ["a"]


class TestHybridSearchProvider:
    def test_scores_are_reciprocal_rank_fusion_with_the_given_constant(self, store):
        provider = HybridSearchProvider(store, HashEmbedder(64), label="kb", rrf_k=10)
        provider.set("a", "deploy on friday afternoon")
        provider.set("b", "team lunch on monday")
        best = provider.hits("deploy friday")[0]
        assert best.key == "a"
        assert best.score == pytest.approx(2 / 11)  # first in both lists: 1/(k+1) twice

    def test_an_entry_found_by_one_side_only_is_still_returned(self, store):
        provider = HybridSearchProvider(store, HashEmbedder(64), label="kb")
        provider.set("a", "deployment")
        provider.set("b", "lunch")
        # Porter stems "deploying" to "deploi" and "deployment" to "deploy": only the vector side sees a match.
        assert provider.index.search("deploying") == []
        best = provider.hits("deploying")[0]
        assert (best.key, best.score) == ("a", pytest.approx(1 / 61))


    def test_entries_found_only_by_words_come_with_their_text(self, store):
        class FirstLetter:
            """Texts are similar exactly when they start with the same letter."""

            model_id, dimension = "first-letter", 26

            def encode(self, texts):
                out = np.zeros((len(texts), 26), np.float32)
                for row, text in enumerate(texts):
                    out[row, (ord(text[0].lower()) - 97) % 26] = 1.0
                return out

        provider = HybridSearchProvider(store, FirstLetter(), label="kb", candidates=1)
        provider.set_many([("a", "zoo keeper"), ("b", "the zebra runs", {"source": "field notes"})])
        assert provider.hits("zebra") == [EntryHit("a", pytest.approx(1 / 61), "zoo keeper"),
                                          EntryHit("b", pytest.approx(1 / 61), "the zebra runs",
                                                    {"source": "field notes"})]


@pytest.mark.slow
def test_minilm_finds_a_paraphrase_that_bm25_misses(store):
    notes = [
        ("car", "My automobile broke down on the highway yesterday."),
        ("cake", "She baked a chocolate cake for the party."),
        ("rain", "It rained heavily all weekend in the north."),
    ]
    by_meaning = VectorSearchProvider(store, label="meaning")  # the default embedder: all-MiniLM-L6-v2
    by_words = FullTextSearchProvider(store, label="words", mode="any")
    by_meaning.set_many(notes)
    by_words.set_many(notes)
    query = "vehicle malfunction motorway"
    assert by_meaning.hits(query)[0].key == "car"
    assert by_words.hits(query) == []


def test_format_hits_is_none_without_hits_and_blank_line_separated_otherwise():
    assert format_hits([]) is None
    assert format_hits([EntryHit("a", 0.5, "x"), EntryHit("b", 0.25, "y")]) == (
        "[a] (score 0.5000)\nx\n\n[b] (score 0.2500)\ny"
    )


class TestSearchProviderArguments:
    @pytest.mark.parametrize(("make", "named"), [
        (lambda store: VectorSearchProvider(store, HashEmbedder(8), limit=float("nan")), "limit"),  # type: ignore[arg-type]
        (lambda store: VectorSearchProvider(store, HashEmbedder(8), limit=-1), "limit"),
        (lambda store: FullTextSearchProvider(store, limit=2.5), "limit"),  # type: ignore[arg-type]
        (lambda store: HybridSearchProvider(store, HashEmbedder(8), rrf_k=float("nan")), "rrf_k"),
        (lambda store: HybridSearchProvider(store, HashEmbedder(8), rrf_k=-1), "rrf_k"),
        (lambda store: HybridSearchProvider(store, HashEmbedder(8), candidates=float("inf")), "candidates"),  # type: ignore[arg-type]
        (lambda store: HybridSearchProvider(store, HashEmbedder(8), limit=None), "limit"),  # type: ignore[arg-type]
    ])
    def test_a_limit_or_constant_that_is_not_a_number_of_zero_or_more_is_refused(self, store, make, named):
        with pytest.raises(InvalidArgumentError, match=named):
            make(store)

    def test_an_unknown_full_text_mode_is_refused_when_the_provider_is_made(self, store):
        with pytest.raises(InvalidSearchError, match="regex"):
            FullTextSearchProvider(store, mode="regex")
