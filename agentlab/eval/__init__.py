"""Retrieval evaluation: conversation datasets, retrieval strategies, metrics, and the runner.

``import agentlab.eval as ev; ev.run(dataset, ["bm25", "dense"])`` scores every strategy on every question.
"""

from agentlab.eval.datasets import Conversation, Dataset, Question, load_bundled, load_locomo, load_longmemeval
from agentlab.eval.records import load_records
from agentlab.eval.runner import Results, run
from agentlab.eval.strategies import make_strategy

__all__ = [
    "Conversation",
    "Dataset",
    "Question",
    "Results",
    "load_bundled",
    "load_locomo",
    "load_longmemeval",
    "load_records",
    "make_strategy",
    "run",
]
