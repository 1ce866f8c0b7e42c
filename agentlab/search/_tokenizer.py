"""Tokenizers for full-text search: an emulation of SQLite FTS5 ``porter unicode61``, and plain ones.

Upstream indexes text with ``tokenize='porter unicode61'``, so the same query must find
the same documents here. :func:`tokenize` reproduces that tokenizer in pure Python:

1. **unicode61 split.** Characters of Unicode categories L*, N* and Co are token characters; every
   other character separates tokens. So apostrophes, hyphens, underscores and emoji split words
   ("don't" -> ``don``, ``t``), and a run of CJK characters with no spaces is one token.
2. **Case folding** with Unicode *simple* case folding, one character to one character ("ß" stays
   "ß", "ſ" becomes "s", "İ" becomes "i").
3. **Diacritic removal** (``remove_diacritics=1``, the FTS5 default): a Latin letter with exactly one
   diacritic loses it ("é" -> "e", "Ö" -> "o"); letters with two diacritics ("ệ"), and non-Latin
   letters ("й", "ά"), keep theirs. The combining marks that Latin letters decompose into
   (U+0300 grave ... U+0331 macron below) are token characters that are dropped, so decomposed
   input ("e" + U+0301) folds like composed input.
4. **Porter stemming** with the variant SQLite ships (:func:`porter_stem`): Martin Porter's algorithm
   as in his reference C code, only for tokens of 3 to 64 UTF-8 bytes.

Invariants:

* :func:`tokenize` is a pure function of its input; the same text always gives the same tokens, and
  a query is tokenized exactly like a document.
* Verified against Python's ``sqlite3`` FTS5 (``tests/test_tokenizer.py``): per character over every
  BMP code point whose category is the same in Unicode 3.2 and today (no such character can differ
  between FTS5's 6.1 table and Python's; all 232,504 of them in every plane agreed when this was
  written), per word for the stemmer, and on random mixed-script text.

Known differences from FTS5, all outside ordinary text: FTS5 classifies characters with its frozen
Unicode 6.1 table, while this module uses Python's current ``unicodedata``. Characters assigned
after 6.1 (for example the emoji U+1F914 "🤔", skin-tone modifiers, new currency signs such as "₽")
are separators here but token characters in FTS5, and a few later letters fold differently. And
where SQLite's byte-level stemmer cuts a multi-byte character in half (a doubled continuation byte
before "-ed"/"-ing", as in "aもed"), FTS5 stores invalid UTF-8; here the token is kept whole.

Why not PyStemmer's ``porter`` for step 4: it implements the Porter *paper*, while SQLite follows the
reference C code, which departs from the paper in three places: ``-bli`` -> ``-ble`` (paper:
``-abli`` -> ``-able``), an extra ``-logi`` -> ``-log`` rule, and every doubled consonant other than
l, s, z is undoubled after ``-ed``/``-ing`` (PyStemmer: only bb dd ff gg mm nn pp rr tt). SQLite also
matches a suffix only when something precedes it ("ies" -> "ie"). On 27,898 words PyStemmer
disagreed with SQLite on 24 ("possibly", "technology", "trekked", ...); :func:`porter_stem` agrees on
all of them. PyStemmer remains available as the ``"simple_porter"`` tokenizer, for reproducing
results that were measured with it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

Tokenizer = Callable[[str], list[str]]

#: Combining marks that FTS5 unicode61 treats as (dropped) token characters: exactly the marks that
#: Latin letters with one diacritic decompose into (measured with sqlite3 3.40 FTS5).
_LATIN_MARKS = frozenset(
    [*range(0x300, 0x305), *range(0x306, 0x30D), 0x30F, 0x311, 0x31B, *range(0x323, 0x329), 0x32D, 0x32E, 0x330, 0x331]
)

# FTS5's porter tokenizer stems only tokens of this many UTF-8 bytes (shorter and longer pass as is).
_STEM_MIN_BYTES = 3
_STEM_MAX_BYTES = 64

_ASCII_FOLD = str.maketrans({i: chr(i).lower() if chr(i).isalnum() else " " for i in range(128)})
_ASCII_SPAN = re.compile(r"[A-Za-z0-9]+")
_SIMPLE_WORD = re.compile(r"\w+")


# -- unicode61 ---------------------------------------------------------------------------------


def _fold_char(ch: str) -> str:
    """What unicode61 turns one character into: a folded character, "" (dropped) or " " (separator)."""
    if ord(ch) in _LATIN_MARKS:
        return ""
    category = unicodedata.category(ch)
    if category[0] not in "LN" and category != "Co":
        return " "
    folded = ch.casefold()
    if len(folded) != 1:
        # Full case folding expands a few letters ("ß" -> "ss"); FTS5 folds one-to-one only.
        folded = ch.lower()
        if len(folded) != 1:
            # "İ".lower() is "i" + U+0307: keep the letter, the mark is dropped below anyway.
            folded = folded[0] if all(ord(m) in _LATIN_MARKS for m in folded[1:]) else ch
    decomposed = unicodedata.normalize("NFD", folded)
    if len(decomposed) == 2 and decomposed[0].isascii() and ord(decomposed[1]) in _LATIN_MARKS:
        return decomposed[0]
    return folded


class _FoldTable(dict[int, str]):
    """A ``str.translate`` table that computes and remembers each character's unicode61 fate."""

    def __missing__(self, code: int) -> str:
        value = _fold_char(chr(code))
        self[code] = value
        return value


_FOLD = _FoldTable()


def fold(text: str) -> str:
    """``text`` with every unicode61 separator a space and every token character case-folded, diacritics removed.

    Splitting the result on spaces gives :func:`words` (with empty strings where separators run together).
    """
    if text.isascii():
        return text.translate(_ASCII_FOLD)  # CPython translates ASCII-to-ASCII in a fast path
    return text.translate(_FOLD)


def words(text: str) -> list[str]:
    """Split text into unicode61 tokens: case-folded, diacritics removed, not stemmed.

    Args:
        text: Any string.

    Returns:
        The tokens in order; empty if the text has no letters or digits.
    """
    return fold(text).split()


def word_spans(text: str) -> list[tuple[int, int, str]]:
    """Like :func:`words`, with each token's character span in ``text``: ``(start, end, token)``."""
    if text.isascii():
        return [(m.start(), m.end(), m.group().lower()) for m in _ASCII_SPAN.finditer(text)]
    spans: list[tuple[int, int, str]] = []
    start, folded = -1, ""
    for i, ch in enumerate(text):
        value = _FOLD[ord(ch)]
        if value == " ":
            if folded:
                spans.append((start, i, folded))
            start, folded = -1, ""
        else:
            if start < 0:
                start = i
            folded += value
    if folded:
        spans.append((start, len(text), folded))
    return spans


# -- Porter, as SQLite's FTS5 porter tokenizer runs it ---------------------------------------------


def _consonants(word: str) -> list[bool]:
    """Per letter, whether it is a consonant: not a, e, i, o, u, and "y" only after a vowel or at the start."""
    flags: list[bool] = []
    for i, ch in enumerate(word):
        if ch in "aeiou":
            flags.append(False)
        elif ch == "y":
            flags.append(i == 0 or not flags[i - 1])
        else:
            flags.append(True)
    return flags


def _measure(word: str, end: int) -> int:
    """Porter's m for ``word[:end]``: the number of vowel-to-consonant transitions."""
    flags = _consonants(word[:end])
    return sum(1 for i in range(1, len(flags)) if flags[i] and not flags[i - 1])


def _has_vowel(word: str, end: int) -> bool:
    return not all(_consonants(word[:end]))


def _ends_cvc(word: str) -> bool:
    """Porter's *o: consonant, vowel, consonant at the end, the last not w, x or y."""
    if len(word) < 3 or word[-1] in "wxy":
        return False
    flags = _consonants(word)
    return flags[-1] and not flags[-2] and flags[-3]


def _ends_double_consonant(word: str) -> bool:
    # SQLite counts any doubled letter other than a, e, i, o, u, so "yy" always qualifies.
    return len(word) >= 2 and word[-1] == word[-2] and word[-1] not in "aeiou"


def _suffix(word: str, suffix: str) -> bool:
    # SQLite matches a suffix only when at least one letter precedes it.
    return len(word) > len(suffix) and word.endswith(suffix)


# Each step's (suffix, replacement) rules. Within a step the first matching suffix decides, even if
# its measure condition then fails (as in the reference C code).
_STEP2 = [
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
    ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"),
    ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"),
    ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"),
    ("logi", "log"),
]
_STEP3 = [
    ("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
    ("ness", ""),
]
_STEP4 = [
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou",
    "ism", "ate", "iti", "ous", "ive", "ize",
]


def _longest_match(word: str, suffixes: list[str]) -> str | None:
    found = [s for s in suffixes if _suffix(word, s)]
    return max(found, key=len) if found else None


def _step1(word: str) -> str:
    if _suffix(word, "sses") or _suffix(word, "ies"):
        word = word[:-2]
    elif not _suffix(word, "ss") and _suffix(word, "s"):
        word = word[:-1]
    removed = False
    if _suffix(word, "eed"):
        if _measure(word, len(word) - 3) > 0:
            word = word[:-1]
    elif _suffix(word, "ed") and _has_vowel(word, len(word) - 2):
        word, removed = word[:-2], True
    elif _suffix(word, "ing") and _has_vowel(word, len(word) - 3):
        word, removed = word[:-3], True
    if removed:
        if word.endswith(("at", "bl", "iz")):
            word += "e"
        elif _ends_double_consonant(word) and word[-1] not in "lsz":
            word = word[:-1]
        elif _measure(word, len(word)) == 1 and _ends_cvc(word):
            word += "e"
    if _suffix(word, "y") and _has_vowel(word, len(word) - 1):
        word = word[:-1] + "i"
    return word


def _replace(word: str, rules: list[tuple[str, str]], min_measure: int) -> str:
    match = _longest_match(word, [s for s, _ in rules])
    if match is None:
        return word
    stem = word[: -len(match)]
    return stem + dict(rules)[match] if _measure(stem, len(stem)) > min_measure else word


def _step4(word: str) -> str:
    match = _longest_match(word, _STEP4)
    if match is None:
        return word
    stem = word[: -len(match)]
    if match == "ion" and not stem.endswith(("s", "t")):
        return word
    return stem if _measure(stem, len(stem)) > 1 else word


def _step5(word: str) -> str:
    if _suffix(word, "e"):
        m = _measure(word, len(word) - 1)
        if m > 1 or (m == 1 and not _ends_cvc(word[:-1])):
            word = word[:-1]
    if _ends_double_consonant(word) and word.endswith("l") and _measure(word, len(word)) > 1:
        word = word[:-1]
    return word


def _porter_ascii(word: str) -> str:
    word = _step1(word)
    word = _replace(word, _STEP2, 0)
    word = _replace(word, _STEP3, 0)
    word = _step4(word)
    return _step5(word)


def porter_stem(word: str) -> str:
    """Stem one folded token the way SQLite's FTS5 ``porter`` tokenizer does.

    The algorithm runs on UTF-8 bytes, as SQLite's does: a non-ASCII letter counts as consonants.

    Args:
        word: A lower-case token, as returned by :func:`words`.

    Returns:
        The stem; tokens shorter than 3 or longer than 64 UTF-8 bytes come back unchanged.
    """
    if word.isascii():
        if not _STEM_MIN_BYTES <= len(word) <= _STEM_MAX_BYTES:
            return word
        return _porter_ascii(word)
    raw = word.encode("utf-8")
    if not _STEM_MIN_BYTES <= len(raw) <= _STEM_MAX_BYTES:
        return word
    # latin-1 maps each byte to one character, so byte-level rules see what SQLite sees.
    stemmed = _porter_ascii(raw.decode("latin-1")).encode("latin-1")
    try:
        return stemmed.decode("utf-8")
    except UnicodeDecodeError:  # a doubled continuation byte was cut; keep the token whole
        return word


# Words on which PyStemmer's porter (the paper) and SQLite's (the reference C code) can disagree:
# -bli/-bly/-logi/-logy, a doubled letter before -ed/-ing, and the words that equal a suffix.
_PAPER_DIFFERS = re.compile(r"bl[iy]|log[iy]|([^aeiou])\1(?:ed|ing)s?$|^(?:ies|sses|eeds?)$")


@lru_cache(maxsize=1)
def _paper_stemmer() -> Any:
    import Stemmer  # PyStemmer (C): about 1 µs a word, against tens of µs for porter_stem

    return Stemmer.Stemmer("porter")


def _paper_porter() -> Callable[[str], str]:
    return _paper_stemmer().stemWord


def _paper_safe(word: str) -> bool:
    """Whether PyStemmer's porter gives SQLite's stem for ``word`` (see :func:`stem`)."""
    return word.isascii() and _STEM_MIN_BYTES <= len(word) <= _STEM_MAX_BYTES and not _PAPER_DIFFERS.search(word)


def _fast_stem(word: str) -> str:
    return _paper_porter()(word) if _paper_safe(word) else porter_stem(word)


class _StemMemo(dict[str, str]):
    """word -> stem, computed on first lookup. Emptied when it reaches its bound, so memory stays flat.

    A dict with ``__missing__`` rather than ``functools.lru_cache``: a hit is a C-level dict lookup,
    about 2.5 times faster, and tokenizing is most of the cost of bulk indexing.
    """

    limit = 1 << 19

    def __missing__(self, word: str) -> str:
        if len(self) >= self.limit:
            self.clear()
        value = self[word] = _fast_stem(word)
        return value


_STEMS = _StemMemo()


def stem(word: str) -> str:
    """:func:`porter_stem`, fast and memoised (a module-level memo of stems per word).

    ASCII words run through PyStemmer when its result equals SQLite's (the words outside
    ``_PAPER_DIFFERS``: checked against FTS5 on 437,731 real and synthetic words when this was
    written; the tests re-check several thousand), the rest through :func:`porter_stem`.
    """
    return _STEMS[word]


def stems(words: list[str]) -> list[str]:
    """:func:`stem` of each word, through the same memo (one C-level lookup per word already seen).

    Words the memo lacks are stemmed together first: PyStemmer's ``stemWords`` takes the whole list in one call,
    which halves the cost of the first batch of a new vocabulary.
    """
    memo = _STEMS
    new = [w for w in dict.fromkeys(words) if w not in memo]
    if new:
        if len(memo) + len(new) > memo.limit:
            memo.clear()
        safe = [w for w in new if _paper_safe(w)]
        memo.update(zip(safe, _paper_stemmer().stemWords(safe)))
        memo.update((w, porter_stem(w)) for w in new if w not in memo)
    return list(map(memo.__getitem__, words))


# -- tokenizers --------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Tokenize like SQLite FTS5 ``tokenize='porter unicode61'``.

    Args:
        text: A document or a query.

    Returns:
        Stemmed tokens in order (their index is the FTS5 token position).

    Example:
        >>> tokenize("Deploying the deployment on Friday, naïvely!")
        ['deploi', 'the', 'deploy', 'on', 'fridai', 'naiv']
    """
    return list(map(_STEMS.__getitem__, words(text)))


def first_match(text: str, wanted: set[str] | frozenset[str]) -> int | None:
    """The position of the first token of ``text`` that is in ``wanted`` (as :func:`tokenize` numbers them), or None.

    Stems words only up to the match, so finding an early match in a long text is cheap.
    """
    if not wanted:
        return None
    for position, token in enumerate(map(_STEMS.__getitem__, words(text))):
        if token in wanted:
            return position
    return None


# Bulk tokenizing joins ASCII texts around a sentinel token that folds to itself: one translate (in
# CPython's ASCII fast path) and one split for the whole batch instead of one each per text.
_SENTINEL = "\x01"
_ASCII_FOLD_BULK = {**_ASCII_FOLD, ord(_SENTINEL): _SENTINEL}


def token_strings(texts: Sequence[str]) -> list[str]:
    """Tokenize many texts at once; each result is one text's tokens joined by single spaces.

    Equal to ``[" ".join(tokenize(t)) for t in texts]``, faster on large batches of ASCII text.
    """
    out = [""] * len(texts)
    batch = []
    for i, text in enumerate(texts):
        if text.isascii() and _SENTINEL not in text:
            batch.append(i)
        else:
            out[i] = " ".join(tokenize(text))
    if batch:
        joined = f" {_SENTINEL} ".join([texts[i] for i in batch]).translate(_ASCII_FOLD_BULK)
        stems = " ".join(map(_STEMS.__getitem__, joined.split())).split(_SENTINEL)
        for i, part in zip(batch, stems):
            out[i] = part.strip()
    return out


def simple_tokenize(text: str) -> list[str]:
    """Lower-case, then maximal runs of word characters: ``re.findall(r"\\w+", text.lower())``.

    The reference tokenizer of the LoCoMo BM25 baseline.
    """
    return _SIMPLE_WORD.findall(text.lower())


def simple_porter_tokenize(text: str) -> list[str]:
    """:func:`simple_tokenize`, then PyStemmer's ``porter`` (the Porter paper's algorithm, every length)."""
    paper = _paper_porter()
    return [paper(w) for w in simple_tokenize(text)]


TOKENIZERS: dict[str, Tokenizer] = {
    "porter": tokenize,
    "simple": simple_tokenize,
    "simple_porter": simple_porter_tokenize,
}


def get_tokenizer(tokenizer: str | Tokenizer) -> Tokenizer:
    """Resolve a tokenizer name (``"porter"``, ``"simple"``, ``"simple_porter"``) or pass a callable through.

    Raises:
        ValueError: An unknown name.
    """
    if callable(tokenizer):
        return tokenizer
    try:
        return TOKENIZERS[tokenizer]
    except KeyError:
        raise ValueError(
            f"Unknown tokenizer {tokenizer!r}; use one of {sorted(TOKENIZERS)} or pass a function str -> list[str]."
        ) from None
