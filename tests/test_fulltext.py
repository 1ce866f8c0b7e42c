"""FullTextIndex on real DuckDB files, with sqlite3 FTS5 as the oracle for matching and ranking; BM25Corpus."""

from __future__ import annotations

import itertools
import random
import sqlite3

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlab.errors import InvalidSearchError
from agentlab.search._bm25 import FTS5_BM25, OKAPI_BM25, BM25Corpus, fts5_idf
from agentlab.search._fulltext import FullTextIndex, Hit, snippet
from agentlab.store._database import Store


@pytest.fixture
def disk(store_path):
    s = Store(store_path)
    yield s
    s.close()


def ids(hits: list[Hit]) -> list[str]:
    return [h.doc_id for h in hits]


class TestIndexAndSearch:
    def test_a_document_is_found_right_after_it_is_indexed(self, disk):
        fts = FullTextIndex(disk, "messages")
        assert fts.search("friday") == []  # builds the (empty) view first
        fts.index("m1", "Deploying on Friday", group="s1")
        assert fts.search("deploy friday", mode="all") == [Hit("m1", pytest.approx(2e-6, rel=0.5), "s1")]

    def test_search_after_reopening_the_file_rebuilds_from_duckdb(self, store_path):
        with_store = Store(store_path)
        FullTextIndex(with_store, "messages").index_many(
            [("m1", "alpha beta", "s1"), ("m2", "beta gamma", "s2"), ("m3", "", "s1")]
        )
        before = FullTextIndex(with_store, "messages").search("beta gamma", limit=5)
        with_store.close()
        reopened = Store(store_path)
        try:
            fts = FullTextIndex(reopened, "messages")
            assert fts.search("beta gamma", limit=5) == before
            assert ids(before) == ["m2", "m1"]
            assert fts.count() == 3
        finally:
            reopened.close()

    def test_every_index_object_on_a_store_shares_one_view(self, disk):
        writer, reader = FullTextIndex(disk, "kb"), FullTextIndex(disk, "kb")
        assert reader.search("zeta") == []
        writer.index("k1", "zeta function")
        assert ids(reader.search("zeta")) == ["k1"]

    def test_namespaces_are_separate_indexes(self, disk):
        FullTextIndex(disk, "a").index("x", "shared word")
        FullTextIndex(disk, "b").index("y", "shared word")
        assert ids(FullTextIndex(disk, "a").search("shared")) == ["x"]
        assert FullTextIndex(disk, "a").count() == 1


class TestTransactions:
    def test_a_rolled_back_index_leaves_no_row_and_no_cache_entry(self, disk):
        fts = FullTextIndex(disk, "messages")
        fts.index("keep", "stable text")
        assert ids(fts.search("stable")) == ["keep"]
        with pytest.raises(RuntimeError), disk.transaction():
            disk.execute("CREATE TABLE IF NOT EXISTS side (x INTEGER)")
            fts.index("gone", "volatile text")
            fts.index("keep", "replaced text")
            fts.remove(["keep"])
            raise RuntimeError("abort")
        assert fts.search("volatile") == [] and fts.search("replaced") == []
        assert ids(fts.search("stable")) == ["keep"]
        assert disk.rows("SELECT doc_id FROM fulltext_docs ORDER BY doc_id") == [{"doc_id": "keep"}]

    def test_writes_land_with_the_callers_transaction(self, disk):
        fts = FullTextIndex(disk, "messages")
        fts.search("x")
        with disk.transaction():
            fts.index("m1", "inside a transaction")
            assert fts.search("transaction") == []  # the view holds committed documents only
            assert fts.count() == 1  # while SQL sees the transaction's own row
        assert ids(fts.search("transaction")) == ["m1"]

    def test_a_view_first_built_inside_a_transaction_excludes_its_uncommitted_rows(self, disk):
        fts = FullTextIndex(disk, "other")
        with pytest.raises(RuntimeError), disk.transaction():
            fts.index("n", "words")
            assert fts.search("words") == []  # builds the view from committed rows only
            raise RuntimeError
        assert fts.search("words") == [] and fts.count() == 0
        with disk.transaction():
            fts.index("n", "words")
            assert fts.search("words") == []
        assert ids(fts.search("words")) == ["n"]


class TestWrites:
    def test_index_replaces_the_previous_text(self, disk):
        fts = FullTextIndex(disk, "m")
        fts.index("d", "first version", group="g1")
        fts.index("d", "second edition", group="g2")
        assert fts.search("first") == []
        assert fts.search("second") == [Hit("d", pytest.approx(fts.search("second")[0].score), "g2")]
        assert fts.count() == 1

    def test_index_many_replaces_and_keeps_the_last_of_repeated_ids(self, disk):
        fts = FullTextIndex(disk, "m")
        fts.index("a", "old text")
        fts.search("text")
        fts.index_many([("a", "new text", "g"), ("b", "other text", "g"), ("b", "final text", "h")])
        assert fts.count() == 3 - 1
        assert ids(fts.search("old")) == [] and ids(fts.search("other")) == []
        assert [(h.doc_id, h.group) for h in fts.search("final new", limit=5)] == [("a", "g"), ("b", "h")]

    def test_remove_and_clear(self, disk):
        fts = FullTextIndex(disk, "m")
        fts.index_many([(f"d{i}", f"word{i % 3} common", f"g{i % 2}") for i in range(10)])
        fts.remove(["d0", "d1", "missing"])
        assert sorted(ids(fts.search("common", limit=50))) == sorted(f"d{i}" for i in range(2, 10))
        fts.clear(group="g0")
        assert sorted(ids(fts.search("common", limit=50))) == ["d3", "d5", "d7", "d9"]
        assert fts.count() == 4 and fts.count(group="g0") == 0
        fts.clear()
        assert fts.search("common") == [] and fts.count() == 0
        with pytest.raises(InvalidSearchError, match=r"remove\(\['d3'\]\)"):
            fts.remove("d3")

    def test_removing_most_documents_rebuilds_the_view_correctly(self, disk):
        fts = FullTextIndex(disk, "m")
        fts.index_many([(f"d{i}", f"alpha w{i}", "") for i in range(3000)])
        fts.search("alpha")
        fts.remove([f"d{i}" for i in range(2500)])
        assert fts._ns.loaded is None  # mostly dead: dropped, rebuilt on the next search
        assert ids(fts.search("alpha", limit=1)) == ["d2500"]
        assert len(fts.search("alpha", limit=10_000)) == 500


class TestModes:
    DOCS = [
        ("a", "deployment Friday works"),
        ("b", "The deployment is on Friday"),
        ("c", "we are deploying now"),
        ("d", "a state-of-the-art art state"),
        ("e", "state of the art"),
    ]

    @pytest.fixture
    def fts(self, disk):
        index = FullTextIndex(disk, "m")
        index.index_many([(d, t, "") for d, t in self.DOCS])
        return index

    def test_phrase_needs_adjacent_tokens_in_order(self, fts):
        assert ids(fts.search("deployment Friday", mode="phrase")) == ["a"]
        assert ids(fts.search("Friday deployment", mode="phrase")) == []

    def test_all_needs_every_word(self, fts):
        assert sorted(ids(fts.search("deployment friday", mode="all"))) == ["a", "b"]
        # a hyphenated word is one quoted word upstream, so a phrase
        assert sorted(ids(fts.search("state-of-the-art", mode="all"))) == ["d", "e"]
        assert ids(fts.search("state art-state", mode="all")) == ["d"]

    def test_any_ranks_documents_with_some_word(self, fts):
        assert sorted(ids(fts.search("deploy friday", mode="any"))) == ["a", "b", "c"]

    def test_deploy_matches_deploying_but_not_deployment(self, fts):
        assert ids(fts.search("deploy")) == ["c"]

    def test_queries_without_tokens_give_nothing(self, fts):
        for query in ["", "   ", "---", '"', "🎉", "*", "()"]:
            for mode in ["any", "all", "phrase"]:
                assert fts.search(query, mode=mode) == [], (query, mode)

    def test_fts_syntax_is_plain_text(self, fts):
        plain = str.maketrans(dict.fromkeys('"*()^-', " "))
        for query in ['"deployment', "deploy*", "NEAR (deployment friday)", "deployment AND friday", "-friday",
                      "^friday", "deployment OR", "(friday", 'say "hi" NOT'] :
            for mode in ["any", "all", "phrase"]:
                assert fts.search(query, mode=mode) == fts.search(query.translate(plain), mode=mode), (query, mode)
        assert ids(fts.search('"deployment')) == ["a", "b"]
        assert fts.search("content:friday") == []  # one word, so the phrase "content friday"

    def test_group_and_id_filters_choose_among_results_without_changing_scores(self, disk):
        fts = FullTextIndex(disk, "m")
        fts.index_many([("a", "apple pie", "s1"), ("b", "apple tart", "s2"), ("c", "apple", "s2")])
        everything = {h.doc_id: h.score for h in fts.search("apple", limit=10)}
        assert [(h.doc_id, h.score) for h in fts.search("apple", groups=["s2"])] == [
            ("c", everything["c"]), ("b", everything["b"])]
        assert ids(fts.search("apple", doc_ids=["a", "zzz"])) == ["a"]
        assert fts.search("apple", groups=[]) == [] and fts.search("apple", groups=["nope"]) == []

    def test_ties_go_to_the_document_indexed_first(self, disk):
        fts = FullTextIndex(disk, "m")
        for name in ["z", "y", "x"]:
            fts.index(name, "same words here")
        assert ids(fts.search("same", limit=2)) == ["z", "y"]
        fts.index("z", "same words here")  # re-indexed: now the newest
        assert ids(fts.search("same")) == ["y", "x", "z"]

    def test_bad_arguments_raise_typed_errors(self, fts):
        with pytest.raises(InvalidSearchError, match="Unknown search mode 'fuzzy'"):
            fts.search("x", mode="fuzzy")
        with pytest.raises(InvalidSearchError, match="limit"):
            fts.search("x", limit=-1)
        assert fts.search("deploy", limit=0) == []
        with pytest.raises(InvalidSearchError, match=r"groups=\['s1'\]"):
            fts.search("x", groups="s1")
        with pytest.raises(InvalidSearchError, match="doc_id: str"):
            fts.index("x", None)
        with pytest.raises(InvalidSearchError, match="doc_id: str"):
            fts.index_many([("x", "text", None)])
        with pytest.raises(InvalidSearchError, match="namespace"):
            FullTextIndex(fts.store, "")
        assert fts.count() == len(self.DOCS)  # nothing was written by the refused calls


def _fts5_query(query: str, mode: str) -> str:
    quote = lambda s: '"' + s.replace('"', '""') + '"'  # noqa: E731
    if mode == "phrase":
        return quote(query)
    return (" OR " if mode == "any" else " ").join(quote(w) for w in query.split())


def _has_fts5() -> bool:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    return True


@pytest.mark.skipif(not _has_fts5(), reason="this Python's sqlite3 has no FTS5")
class TestRankingMatchesFts5:
    VOCAB = ["alpha", "beta", "gamma", "delta", "deploy", "deploying", "friday", "server", "the", "on"]

    def corpus(self) -> list[str]:
        rng = random.Random(7)
        weights = [1 / (i + 1) for i in range(len(self.VOCAB))]
        return [" ".join(rng.choices(self.VOCAB, weights, k=rng.randint(2, 20))) for _ in range(50)]

    def test_scores_and_order_equal_sqlite_bm25(self, disk):
        texts = self.corpus()
        oracle = sqlite3.connect(":memory:")
        oracle.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61')")
        oracle.executemany("INSERT INTO t(rowid, content) VALUES (?, ?)", list(enumerate(texts, start=1)))
        fts = FullTextIndex(disk, "m")
        fts.index_many([(f"d{i}", text, "") for i, text in enumerate(texts, start=1)])
        queries = ["alpha", "on", "friday server", "deploy deploying", "alpha alpha beta", "the alpha",
                   "gamma delta friday", "beta-gamma", "server on"]
        for _round in range(2):
            for query, mode in itertools.product(queries, ["any", "all", "phrase"]):
                expected = oracle.execute(
                    "SELECT rowid, -bm25(t) FROM t WHERE t MATCH ? ORDER BY rank, rowid", [_fts5_query(query, mode)]
                ).fetchall()
                ours = fts.search(query, mode=mode, limit=100)
                assert [(h.doc_id, pytest.approx(h.score, rel=1e-12, abs=1e-15)) for h in ours] == [
                    (f"d{r}", s) for r, s in sorted(expected, key=lambda e: (-e[1], e[0]))
                ], (query, mode)
                assert [f"d{r}" for r, _ in expected] == ids(ours) or _only_ties_differ(expected, ours)
            # the same after removals change N, df and the average length
            gone = list(range(1, 51, 3))
            oracle.executemany("DELETE FROM t WHERE rowid = ?", [(r,) for r in gone])
            fts.remove([f"d{r}" for r in gone])

    def test_idf_is_floored_at_one_millionth(self):
        assert fts5_idf(10, 9) == 1e-6 and fts5_idf(10, 5) == 1e-6
        assert fts5_idf(10, 1) == pytest.approx(np.log(9.5 / 1.5))
        assert FTS5_BM25.k1 == 1.2 and FTS5_BM25.b == 0.75


def _only_ties_differ(expected, ours) -> bool:
    theirs = {f"d{r}": s for r, s in expected}
    return all(theirs[a.doc_id] == pytest.approx(theirs[b.doc_id]) or theirs[a.doc_id] > theirs[b.doc_id]
               for a, b in itertools.pairwise(ours))


WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "deploying", "naïve", "state-of-the-art"]


class TestProperties:
    def test_any_finds_every_document_containing_a_query_word(self, disk):
        fts = FullTextIndex(disk, "m")
        counter = itertools.count()

        @given(docs=st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=8), min_size=1, max_size=20),
               word=st.sampled_from(WORDS))
        @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        def check(docs, word):
            ns = FullTextIndex(disk, f"prop{next(counter)}")
            ns.index_many([(f"d{i}", " ".join(doc), "") for i, doc in enumerate(docs)])
            found = set(ids(ns.search(word.upper(), mode="any", limit=len(docs))))
            assert found == {f"d{i}" for i, doc in enumerate(docs) if word in doc}

        check()
        assert fts.count() == 0


class TestBM25Corpus:
    TEXTS = ["the cat sat on the mat", "the dog sat", "a cat and a dog", "the the the", "birds fly south",
             "the cat", "unrelated words entirely", "cat cat cat dog"]

    def test_okapi_scores_equal_rank_bm25_to_1e9(self):
        rank_bm25 = pytest.importorskip("rank_bm25")
        from agentlab.search._tokenizer import simple_tokenize

        reference = rank_bm25.BM25Okapi([simple_tokenize(t) for t in self.TEXTS])
        corpus = BM25Corpus(self.TEXTS, k1=OKAPI_BM25.k1, b=OKAPI_BM25.b, tokenizer="simple", idf="okapi")
        for query in ["cat", "the cat", "the the dog", "missing words", "south birds cat", "the"]:
            expected = reference.get_scores(simple_tokenize(query))
            np.testing.assert_allclose(corpus.scores(query), expected, rtol=0, atol=1e-9)
            assert [i for i, _ in corpus.rank(query)] == np.argsort(-expected, kind="stable").tolist()

    def test_fts5_mode_agrees_with_the_index_on_single_word_queries(self, disk):
        corpus = BM25Corpus(self.TEXTS)
        fts = FullTextIndex(disk, "m")
        fts.index_many([(str(i), t, "") for i, t in enumerate(self.TEXTS)])
        for query in ["cat", "dog sat", "the south"]:
            hits = fts.search(query, limit=20)
            assert [(int(h.doc_id), pytest.approx(h.score)) for h in hits] == corpus.rank(query, k=len(hits))

    def test_rank_returns_every_document_and_handles_edge_cases(self):
        corpus = BM25Corpus(self.TEXTS, tokenizer="simple")
        assert len(corpus.rank("cat")) == len(self.TEXTS) and corpus.rank("cat", k=0) == []
        assert corpus.rank("", k=3) == [(0, 0.0), (1, 0.0), (2, 0.0)]
        assert BM25Corpus([]).rank("x") == []
        with pytest.raises(ValueError, match="idf"):
            BM25Corpus(self.TEXTS, idf="bm42")


class TestSnippet:
    def test_excerpt_centres_on_the_first_stem_match_and_marks_it(self):
        text = "intro " * 40 + "The deployment happens on Friday at noon. " + "outro " * 40
        out = snippet(text, "fridays", width=60, mark=("[", "]"))
        assert out.startswith("…") and out.endswith("…") and "[Friday]" in out and len(out) < 80

    def test_short_text_is_returned_whole_and_no_match_gives_the_start(self):
        assert snippet("Short\n text", "nothing") == "Short text"
        assert snippet("word " * 100, "absent", width=20) == "word word word word…"
        assert snippet("Crème brûlée", "creme", mark=("<", ">")) == "<Crème> brûlée"
