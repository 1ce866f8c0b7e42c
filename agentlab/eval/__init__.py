"""Retrieval evaluation: conversation datasets, retrieval strategies, metrics, the runner, tuning and tests.

``import agentlab.eval as ev; ev.run(dataset, ["default", "bm25", "dense"])`` scores every strategy on every
question; ``ev.tune(dataset, space)`` chooses parameters by cross-validation over conversations.
"""

from agentlab.eval.datasets import Conversation, Dataset, Question, load_bundled, load_locomo, load_longmemeval
from agentlab.eval.embedcache import EmbeddingCache
from agentlab.eval.records import load_records
from agentlab.eval.results import Results
from agentlab.eval.runner import run
from agentlab.eval.strategies import make_strategy
from agentlab.eval.tuning import Grid, TuneResults, ablation, tune

__all__ = [
    "Conversation",
    "Dataset",
    "EmbeddingCache",
    "Grid",
    "Question",
    "Results",
    "TuneResults",
    "ablation",
    "load_bundled",
    "load_locomo",
    "load_longmemeval",
    "load_records",
    "make_strategy",
    "run",
    "tune",
]
