"""The search layer: FTS5-compatible tokens, BM25 postings and ranking, durable vectors under FAISS, embedders.

Built on the store only; the context layer's search providers and the evaluation harness both use it.
"""

from agentlab.search._bm25 import FTS5_BM25, BM25Corpus, BM25Params, bm25_term, fts5_idf
from agentlab.search._embedders import Embedder, HashEmbedder, MiniLMEmbedder, encode_batched
from agentlab.search._faiss_index import VectorIndex
from agentlab.search._feedback import rm3_weights
from agentlab.search._fulltext import MODES, FullTextIndex, Hit, query_phrases, snippet
from agentlab.search._fusion import FUSION_METHODS, fuse, fuse_keyed, min_max, rrf_positions
from agentlab.search._index_files import IndexFiles
from agentlab.search._lexicon import Lexicon
from agentlab.search._postings import arrow_ints, arrow_optional_strings, arrow_strings, numpy_ints
from agentlab.search._rerank import diversify_groups, mmr, neighbour_boost
from agentlab.search._searcher import BufferPart, SegmentPart, as_seqs, search_parts
from agentlab.search._segment import Segment, build_segment, utf8_buffers
from agentlab.search._segment_merge import merge_segments
from agentlab.search._token_arrays import token_array
from agentlab.search._tokenizer import get_tokenizer, porter_stem, tokenize
from agentlab.search._vectors import VectorEntry, VectorHit, VectorStore, content_hash, drop_namespace

__all__ = [
    "FTS5_BM25",
    "FUSION_METHODS",
    "MODES",
    "BM25Corpus",
    "BM25Params",
    "BufferPart",
    "Embedder",
    "FullTextIndex",
    "HashEmbedder",
    "Hit",
    "IndexFiles",
    "Lexicon",
    "MiniLMEmbedder",
    "Segment",
    "SegmentPart",
    "VectorEntry",
    "VectorHit",
    "VectorIndex",
    "VectorStore",
    "arrow_ints",
    "arrow_optional_strings",
    "arrow_strings",
    "as_seqs",
    "bm25_term",
    "build_segment",
    "content_hash",
    "diversify_groups",
    "drop_namespace",
    "encode_batched",
    "fts5_idf",
    "fuse",
    "fuse_keyed",
    "get_tokenizer",
    "merge_segments",
    "min_max",
    "mmr",
    "neighbour_boost",
    "numpy_ints",
    "porter_stem",
    "query_phrases",
    "rm3_weights",
    "rrf_positions",
    "search_parts",
    "snippet",
    "token_array",
    "tokenize",
    "utf8_buffers",
]
