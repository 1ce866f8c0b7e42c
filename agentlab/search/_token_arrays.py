"""Tokenizing many texts at once into Arrow arrays: the bulk path of a message import.

:func:`token_array` gives the same tokens as :func:`agentlab.search.tokenize`, joined by single spaces,
one string per text. The per-word work that :func:`~agentlab.search._tokenizer.token_strings` does in Python
(a dict lookup and a join for every word) is done by Arrow in C++ here: Python folds each text (one
``str.translate``), Arrow splits the batch into words and finds the distinct ones, only the distinct words meet
the stemmer's memo, and Arrow puts every document's stems back together. In a batch of natural text a word
recurs many times, so the Python work follows the vocabulary of the batch, not its length.

The result also carries the batch's tokens as dictionary codes (:class:`TokenArrays`), so that building a search
index segment from the same batch need not split the strings again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentlab.search._tokenizer import fold, stems

__all__ = ["TokenArrays", "token_array"]


@dataclass(frozen=True)
class TokenArrays:
    """The tokens of a batch of texts.

    Attributes:
        joined: One string per text (Arrow ``large_string``): its tokens joined by single spaces, "" for none.
        terms: The distinct tokens of the batch (Arrow ``large_string``, no duplicates).
        codes: Every token of every text in order, as an index into ``terms`` (int32).
        lengths: The number of tokens of each text (int64).
    """

    joined: Any
    terms: Any
    codes: np.ndarray
    lengths: np.ndarray

    def coded(self) -> Any:
        """The tokens as an Arrow ``large_list<dictionary<int32, large_string>>``: one list of codes per text, the
        batch's distinct terms as the dictionary (what :func:`agentlab.search._segment.build_segment` reads)."""
        import pyarrow as pa

        from agentlab.search._postings import arrow_ints

        values = pa.DictionaryArray.from_arrays(arrow_ints(self.codes), self.terms)
        return _lists(self.lengths, values)


def _lists(lengths: np.ndarray, values: Any) -> Any:
    """A ``large_list`` array of ``values`` cut into lists of these lengths (built from buffers: ``pa.scalar``,
    ``pa.array`` and ``LargeListArray.from_arrays`` import pandas on first use, 0.15 s)."""
    import pyarrow as pa

    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_list(values.type), len(lengths), [None, pa.py_buffer(offsets)],
                                 children=[values])


def token_array(texts: Sequence[str]) -> TokenArrays:
    """The stemmed FTS5 tokens of each text; see the module docstring.

    Example:
        >>> token_array(["Deploying the deployment", "", "deploy!"]).joined.to_pylist()
        ['deploi the deploy', '', 'deploi']
    """
    import pyarrow.compute as pc

    from agentlab.search._postings import arrow_ints, arrow_strings, numpy_ints

    words = pc.split_pattern(arrow_strings([fold(t) for t in texts]), " ")
    encoded = pc.dictionary_encode(words.flatten())
    codes = numpy_ints(encoded.indices).astype(np.int32)
    owner = numpy_ints(pc.list_parent_indices(words))
    distinct = encoded.dictionary.to_pylist()
    stemmed = stems(distinct)
    if "" in distinct:  # where separators run together the split gives empty strings: not tokens
        empty = distinct.index("")
        keep = codes != empty
        codes, owner = codes[keep], owner[keep]
        if len(distinct) > 1:  # stand in another word's stem, so that no term goes unused
            stemmed[empty] = stemmed[1 if empty == 0 else 0]
    lengths = np.bincount(owner, minlength=len(texts)).astype(np.int64)
    if not len(codes):
        terms = arrow_strings([])
    else:  # several words can share a stem ("deploying", "deployed"): the terms are the distinct stems
        by_stem = pc.dictionary_encode(arrow_strings(stemmed))
        codes = numpy_ints(by_stem.indices).astype(np.int32)[codes]
        terms = by_stem.dictionary
    joined = pc.binary_join(_lists(lengths, terms.take(arrow_ints(codes))), arrow_strings([" "] * len(texts)))
    return TokenArrays(joined, terms, codes, lengths)
