"""``agentlab.eval.run(...)``: the name the evaluation API is documented under (issue 8).

The runner lives in :mod:`agentlab.evaluate`; this module only re-exports it, so that
``import agentlab.eval as ev; ev.run(dataset, ["bm25", "dense"])`` reads naturally in a notebook.
"""

from .evaluate import Results, run

__all__ = ["Results", "run"]
