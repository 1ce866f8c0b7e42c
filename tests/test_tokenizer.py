"""The FTS5 ``porter unicode61`` emulation, checked against Python's own sqlite3 FTS5 as the oracle."""

from __future__ import annotations

import functools
import itertools
import sqlite3
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.search._token_arrays import token_array
from agentlab.search._tokenizer import (
    get_tokenizer,
    porter_stem,
    simple_porter_tokenize,
    simple_tokenize,
    stem,
    token_strings,
    tokenize,
    word_spans,
    words,
)


def _has_fts5() -> bool:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _has_fts5(), reason="this Python's sqlite3 has no FTS5")


class Oracle:
    """An FTS5 table plus its fts5vocab 'instance' view: the exact tokens FTS5 stores per row."""

    def __init__(self, tokenizer: str = "porter unicode61") -> None:
        self.conn = sqlite3.connect(":memory:")
        # SQLite's stemmer can cut a multi-byte character in half; keep such bytes visible.
        self.conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        self.conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(content, tokenize='{tokenizer}')")
        self.conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")

    def tokens_many(self, texts: list[str]) -> list[list[str]]:
        self.conn.execute("DELETE FROM t")
        self.conn.executemany("INSERT INTO t(rowid, content) VALUES (?, ?)", list(enumerate(texts, start=1)))
        out: list[list[str]] = [[] for _ in texts]
        for doc, term in self.conn.execute("SELECT doc, term FROM v ORDER BY doc, offset"):
            out[doc - 1].append(term)
        return out

    def matches(self, query: str) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rowid", [query])]


VARIED = [
    "Deploying the deployment on Friday, naïvely!",
    "Crème brûlée à la façade; Ærøskøbing, Ölçü, ŒUVRE, œuvre",
    "cafe\u0301s and e\u0301le\u0300ve (decomposed accents)",
    "don't won't it's O'Reilly's rock'n'roll",
    "state-of-the-art e-mail x_y snake_case kebab-case",
    "3.14159 1,000,000 2026-11-29 v1.2.3 42nd 10x",
    "日本語のテキスト 中文分词 한국어 텍스트 Ελληνικά Русский текст",
    "party 🎉 time 😀 ok👍fine ☃ snow",
    "ǅungla İstanbul ß ẞ ſ ﬁle ｆｕｌｌ Ⅻ ² ½",
    "ǖ ệ ά й ő ł đ ħ ŧ",
    "generalization relational conditional sensibility possibly technology trekked",
    "as is us bus gas ies sses eed feed agreed",
    "a" * 70 + "ing " + "é" * 40 + "ed",
    "\"quoted\" (paren) [bracket] {brace} <angle> *star* ^caret^ :colon: NEAR AND OR NOT",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em-space",
    "",
    "   ",
    "---",
]


class TestTokensMatchFts5:
    def test_varied_strings_give_exactly_fts5s_tokens(self):
        assert [tokenize(t) for t in VARIED] == Oracle().tokens_many(VARIED)

    def test_single_word_queries_match_the_same_documents(self):
        oracle = Oracle()
        oracle.tokens_many(VARIED)
        query_words = {w for text in VARIED for w in text.split()} | {"deploy", "cafes", "eleve", "naive"}
        for word in sorted(query_words):
            tokens = tokenize(word)
            if not tokens:
                continue
            expected = oracle.matches('"' + word.replace('"', '""') + '"')
            ours = [i for i, text in enumerate(VARIED, start=1) if _contains_phrase(tokenize(text), tokens)]
            assert ours == expected, word

    @given(st.lists(st.sampled_from(
        list("abcdeiostuy AEIOUY-'_.,0123456789") + list("éèêëàâäçñøæœßłİıſ") + ["e\u0301", "\u0308"]
        + list("αβγάйжЖ日本語한국🎉😀\u00a0\u2003")
    ), max_size=40).map("".join))
    @settings(max_examples=150, deadline=None)
    def test_random_text_gives_fts5s_tokens(self, text):
        assert [tokenize(text)] == _shared_oracle().tokens_many([text])

    def test_every_long_assigned_bmp_character_is_classified_and_folded_like_fts5(self):
        # FTS5 freezes Unicode 6.1; Python's database is newer. Characters that Unicode 3.2 already
        # had, with the same category today, cannot have moved between the two versions.
        old = unicodedata.ucd_3_2_0
        chars = [
            chr(c) for c in range(0x80, 0x10000)
            if not 0xD800 <= c <= 0xDFFF and old.category(chr(c)) != "Cn"
            and old.category(chr(c)) == unicodedata.category(chr(c))
        ]
        texts = [" ".join("q" + ch + "q" for ch in chars[i : i + 500]) for i in range(0, len(chars), 500)]
        oracle = Oracle("unicode61")
        assert [words(t) for t in texts] == oracle.tokens_many(texts)


def _contains_phrase(tokens: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


@functools.lru_cache(maxsize=1)
def _shared_oracle() -> Oracle:
    return Oracle()


class TestSpecFacts:
    def test_deploy_matches_deploying_but_not_deployment(self):
        assert tokenize("deploy") == tokenize("deploying") == ["deploi"]
        assert tokenize("deployment") == ["deploy"]

    def test_phrase_needs_adjacent_tokens_in_order(self):
        phrase = tokenize("deployment Friday")
        assert _contains_phrase(tokenize("deployment Friday works"), phrase)
        assert not _contains_phrase(tokenize("The deployment is on Friday"), phrase)
        oracle = Oracle()
        oracle.tokens_many(["deployment Friday works", "The deployment is on Friday"])
        assert oracle.matches('"deployment Friday"') == [1]


SUFFIXES = [
    "ational", "tional", "enci", "anci", "izer", "bli", "abli", "alli", "entli", "eli", "ousli", "ization",
    "ation", "ator", "alism", "iveness", "fulness", "ousness", "aliti", "iviti", "biliti", "logi", "icate",
    "ative", "alize", "iciti", "ical", "ful", "ness", "al", "ance", "ence", "er", "ic", "able", "ible", "ant",
    "ement", "ment", "ent", "ion", "sion", "tion", "ou", "ism", "ate", "iti", "ous", "ive", "ize", "ed", "ing",
    "eed", "s", "es", "ies", "sses", "y", "ly", "e", "ll", "ied", "ying", "ings", "edly", "yying",
]
STEMS = ["", "v", "b", "a", "ra", "gen", "sens", "hop", "tann", "fall", "fil", "trekk", "spec", "ab", "cr",
         "cv", "wav", "box", "agr", "conf", "bab", "hiss", "fizz", "techno", "possi", "assem", "ecø", "ñand"]
REAL = ["possibly", "technology", "trekked", "autospecced", "assemblies", "ecology", "incredibly", "bubbly",
        "caresses", "ponies", "ties", "feed", "agreed", "plastered", "motoring", "sing", "conflated",
        "troubled", "sized", "hopping", "tanned", "falling", "hissing", "fizzed", "failing", "filing", "happy",
        "sky", "relational", "conditional", "rational", "valency", "hesitancy", "digitizer", "conformably",
        "radically", "differently", "vilely", "analogously", "vietnamization", "predication", "operator",
        "feudalism", "decisiveness", "hopefulness", "callousness", "formality", "sensitivity", "sensibility",
        "triplicate", "formative", "formalize", "electricity", "electrical", "hopeful", "goodness", "revival",
        "allowance", "inference", "airliner", "gyroscopic", "adjustable", "defensible", "irritant",
        "replacement", "adjustment", "dependent", "adoption", "homologou", "communism", "activate",
        "angulariti", "homologous", "effective", "bowdlerize", "probate", "rate", "cease", "controll", "roll"]


class TestPorterMatchesSqlite:
    def test_stems_equal_fts5s_on_suffix_combinations_and_real_words(self):
        vocabulary = sorted({s + a + b for s in STEMS for a, b in itertools.product(SUFFIXES, ["", *SUFFIXES[::13]])}
                            | set(REAL))
        vocabulary = [w for w in vocabulary if w]
        expected = [t[0] if t else "" for t in Oracle().tokens_many(vocabulary)]
        folded = [words(w)[0] for w in vocabulary]
        assert [porter_stem(w) for w in folded] == expected
        assert [stem(w) for w in folded] == expected

    def test_pystemmer_alone_would_differ_where_documented(self):
        # The reason porter_stem exists: PyStemmer implements the paper, SQLite the reference C code.
        paper = [simple_porter_tokenize(w)[0] for w in ["possibly", "technology", "trekked", "ies"]]
        assert paper == ["possibli", "technologi", "trekk", "i"]
        assert [stem(w) for w in ["possibly", "technology", "trekked", "ies"]] == ["possibl", "technolog", "trek", "ie"]

    def test_short_and_long_tokens_are_not_stemmed(self):
        assert porter_stem("is") == "is"
        assert porter_stem("a" * 62 + "ing") == "a" * 62 + "ing"  # 65 bytes: over FTS5's 64
        assert porter_stem("a" * 61 + "ing") == "a" * 61


class TestBulkTokenizing:
    def test_token_strings_equal_joined_tokenize_for_every_kind_of_text(self):
        texts = [*VARIED, "a\x01b sentinel inside", "plain ascii", "", "naïve", "x"]
        assert token_strings(texts) == [" ".join(tokenize(t)) for t in texts]
        assert token_strings([]) == []

    @pytest.mark.parametrize("texts", [
        [*VARIED, "a\x01b sentinel inside", "plain ascii", "", "naïve", "x"],
        ["", "   ", "!!!"],  # no tokens at all
        ["  leading and trailing  ", "runs   of\t\nseparators", "Deploying deployed deploys"],  # shared stems
        [],
    ])
    def test_token_array_equals_joined_tokenize_with_codes_that_agree(self, texts):
        found = token_array(texts)
        assert found.joined.to_pylist() == [" ".join(tokenize(t)) for t in texts]
        terms = found.terms.to_pylist()
        assert len(set(terms)) == len(terms)
        assert set(found.codes.tolist()) == set(range(len(terms)))  # every term is used
        assert found.lengths.tolist() == [len(tokenize(t)) for t in texts]
        assert [terms[c] for c in found.codes.tolist()] == [w for t in texts for w in tokenize(t)]
        assert found.coded().to_pylist() == [tokenize(t) for t in texts]  # the dictionary column, decoded


class TestOtherTokenizers:
    def test_simple_is_the_lower_case_word_regex(self):
        assert simple_tokenize("I'm LGBTQ+ snake_case Ünïcode") == ["i", "m", "lgbtq", "snake_case", "ünïcode"]

    def test_get_tokenizer_resolves_names_and_passes_callables(self):
        assert get_tokenizer("porter") is tokenize
        assert get_tokenizer(str.split)("a b") == ["a", "b"]
        with pytest.raises(ValueError, match="Unknown tokenizer 'nope'"):
            get_tokenizer("nope")

    def test_word_spans_point_at_the_original_text(self):
        text = "Crème brûlée, don't!"
        spans = word_spans(text)
        assert [w for _, _, w in spans] == words(text) == ["creme", "brulee", "don", "t"]
        assert [text[a:b] for a, b, _ in spans] == ["Crème", "brûlée", "don", "t"]
        assert [w for _, _, w in word_spans("plain ASCII text")] == ["plain", "ascii", "text"]
