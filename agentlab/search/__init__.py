"""The search layer: FTS5-compatible tokens, BM25 postings and ranking, durable vectors under FAISS, embedders.

Built on the store only; the context layer's search providers and the evaluation harness both use it.
"""

from agentlab.search._bm25 import BM25Corpus, BM25Params
from agentlab.search._embedders import Embedder, HashEmbedder, MiniLMEmbedder
from agentlab.search._fulltext import FullTextIndex, Hit
from agentlab.search._tokenizer import get_tokenizer, porter_stem, tokenize
from agentlab.search._vectors import VectorEntry, VectorHit, VectorStore, content_hash, drop_namespace

__all__ = [
    "BM25Corpus",
    "BM25Params",
    "Embedder",
    "FullTextIndex",
    "HashEmbedder",
    "Hit",
    "MiniLMEmbedder",
    "VectorEntry",
    "VectorHit",
    "VectorStore",
    "content_hash",
    "drop_namespace",
    "get_tokenizer",
    "porter_stem",
    "tokenize",
]
