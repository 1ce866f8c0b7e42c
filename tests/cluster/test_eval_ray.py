"""``agentlab.eval.run(..., executor="ray")`` and ``agentlab eval ... --ray``: the in-process results, on workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import agentlab.eval as ev
from agentlab.cli import main
from agentlab.cluster import RayExecutor
from agentlab.eval.datasets import load_bundled
from agentlab.eval.embedcache import EmbeddingCache


@pytest.fixture(scope="module")
def dataset():
    return load_bundled()


def test_sharded_run_equals_the_in_process_run(ray, dataset, capsys):
    here = ev.run(dataset, "bm25,dense,hybrid", ks=(1, 5, 10), cache=None, progress=False)
    executor = RayExecutor(workers=2)
    there = ev.run(dataset, "bm25,dense,hybrid", ks=(1, 5, 10), cache=None, progress=True, executor=executor)
    pd.testing.assert_frame_equal(here.per_question, there.per_question)  # rows, order, rankings, scores
    pd.testing.assert_frame_equal(here.summary, there.summary)
    assert list(there.seconds) == ["bm25", "dense", "hybrid"]
    assert executor.last_run["workers"] == 2 and executor.last_run["conversations"] == len(dataset.conversations)
    assert executor.last_run["devices"] == ["cpu", "cpu"]  # no GPU on this machine
    assert executor.last_run["num_gpus"] == 0
    bars = capsys.readouterr().err
    assert "Evaluating on Ray (2 workers)" in bars and f"{len(dataset.conversations)}/{len(dataset.conversations)}" in bars
    assert "Evaluating:" not in bars  # one bar, over the conversations, not the in-process one


def test_the_embedding_cache_is_shared_by_workers_and_with_later_runs(ray, dataset, tmp_path):
    cache = EmbeddingCache(tmp_path / "embeddings.duckdb")
    cold = ev.run(dataset, ["dense"], cache=cache, progress=False, executor=RayExecutor(workers=2))
    texts = {t.speaker + ": " + t.text for c in dataset.conversations for t in c.turns}
    questions = {q.question for _, q in dataset.iter_questions(with_evidence=True)}
    assert cache.misses == len(texts | questions)  # each text embedded once, by one worker, for all of them
    assert cache.count() == len(texts | questions)  # and written to the file by the cache actor
    hits = cache.hits
    warm = ev.run(dataset, ["dense"], cache=cache, progress=False, executor=RayExecutor(workers=2))
    assert cache.misses == len(texts | questions) and cache.hits > hits  # nothing embedded again
    local = ev.run(dataset, ["dense"], cache=cache, progress=False)  # the in-process run reads the same file
    assert cache.misses == len(texts | questions)
    pd.testing.assert_frame_equal(cold.per_question, warm.per_question)
    pd.testing.assert_frame_equal(cold.per_question, local.per_question)


def test_a_memory_only_cache_gets_the_vectors_back(ray, dataset):
    cache = EmbeddingCache(None)
    ev.run(dataset, ["dense"], cache=cache, progress=False, executor="ray")
    misses = cache.misses
    assert misses > 0 and cache.count() == misses
    ev.run(dataset, ["dense"], cache=cache, progress=False)  # in process, from memory
    assert cache.misses == misses


def test_an_error_in_a_worker_arrives_as_its_own_type(ray, dataset):
    class Broken:
        name = "broken"

        def index(self, units):
            raise LookupError("this strategy cannot index")

        def rank(self, query, k):
            return []

    with pytest.raises(LookupError, match="cannot index") as caught:
        ev.run(dataset, [Broken()], cache=None, progress=False, executor=RayExecutor(workers=1))
    assert "Ray evaluation worker" in caught.value.__notes__[0]


def test_cli_eval_with_ray(ray, capsys, tmp_path):
    out = tmp_path / "results.parquet"
    code = main(["eval", "bundled", "--strategies", "bm25", "--k", "1,5", "--cache", "none", "--ray",
                 "--workers", "2", "--no-progress", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "overall" in printed.out and len(pd.read_parquet(out)) == 40
    assert ray.is_initialized()  # the CLI used the running Ray and left it running


def test_cli_eval_errors_are_one_line(capsys):
    assert main(["eval", "bundled", "--strategies", "bm25", "--workers", "2"]) == 2
    assert capsys.readouterr().err == "agentlab eval: --workers needs --ray.\n"
    # A fresh process (this one may be connected to the tests' Ray already, and then uses it whatever the address).
    done = subprocess.run([sys.executable, "-m", "agentlab.cli", "eval", "bundled", "--strategies", "bm25",
                           "--ray", "127.0.0.1:9", "--no-progress"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 2
    assert done.stderr.startswith("agentlab eval: Could not reach Ray at '127.0.0.1:9'") and done.stderr.count("\n") == 1


def test_unknown_executor_is_refused(dataset):
    with pytest.raises(ValueError, match=r"Unknown executor 'spark'.*'local', 'ray'"):
        ev.run(dataset, ["bm25"], cache=None, progress=False, executor="spark")
