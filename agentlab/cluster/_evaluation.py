"""Retrieval evaluation on Ray: ``agentlab.eval.run(..., executor="ray")`` and ``agentlab eval ... --ray``.

The runner (:func:`agentlab.eval.runner.run`) fits each strategy on each conversation and ranks that conversation's
questions; conversations are independent, so :class:`RayExecutor` shards them: each worker actor takes one
conversation at a time (largest first, the next as soon as it is free) and runs every strategy on it, embedding
and ranking, with the runner's own per-conversation function. One progress bar counts the finished conversations.

Invariants:

* The rows are the in-process run's rows, in its order (strategy, then conversation, then question), because each
  conversation is fitted and scored by the same code. Vectors are the same too: the questions are embedded once,
  in one batch as in-process, by the first worker before any conversation, and the other workers read them from
  the shared cache; a conversation embeds its own units in one batch, as in-process. (A unit text that two
  conversations share is embedded by whichever comes first, which can move it by float32 rounding; a warm cache
  removes even that.)
* The embedding cache is shared: one actor, on the driver's node, owns the cache file (or the in-memory cache) for
  the whole run and answers every worker's lookups and stores; a memory-only cache gets the new vectors back.
* A worker with a GPU (``num_gpus``, by default one per worker when the cluster has them) embeds on it; others use
  the CPU. ``seconds`` per strategy add up the workers' time (compute, not wall time).

Each worker takes one CPU, and Ray then limits its torch to one thread (``OMP_NUM_THREADS=1``), where an
in-process run uses every core: one worker embeds at about half the speed of an in-process run on two cores.
Give workers more with ``ray_options={"num_cpus": 2}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from agentlab.errors import ClusterError
from agentlab.eval.embedcache import EmbeddingCache

from ._remote import dispatch, ensure_ray, guarded, require_ray, unwrap

__all__ = ["RayExecutor", "worker_device"]

_WHERE = "a Ray evaluation worker"


def worker_device() -> str:
    """``"cuda"`` when Ray gave this worker a GPU and torch can use it, else ``"cpu"``."""
    import ray

    if ray.get_gpu_ids():
        try:
            import torch
        except ImportError:
            return "cpu"
        if torch.cuda.is_available():
            return "cuda"
    return "cpu"


def _place(strategy: Any, device: str) -> None:
    """Move the strategy's embedders (and its parts') from the default CPU to ``device``."""
    embedder = getattr(strategy, "embedder", None)
    if embedder is not None and device != "cpu" and getattr(embedder, "device", None) == "cpu":
        embedder.device = device
    for part in getattr(strategy, "parts", None) or []:
        _place(part, device)


class SharedCache(EmbeddingCache):
    """An :class:`EmbeddingCache` whose stored vectors live in the run's cache actor; it keeps what it saw."""

    def __init__(self, actor: Any) -> None:
        super().__init__(None)
        self._actor = actor

    def lookup(self, model_id: str, hashes: Any) -> dict[str, Any]:
        found = super().lookup(model_id, hashes)
        wanted = [h for h in dict.fromkeys(hashes) if h not in found]
        if wanted:
            ray = require_ray()
            remote = unwrap(ray.get(self._actor.lookup.remote(model_id, wanted)), "the embedding cache actor")
            super().store(model_id, remote)
            found.update(remote)
        return found

    def store(self, model_id: str, vectors: dict[str, Any]) -> None:
        super().store(model_id, vectors)
        if vectors:
            ray = require_ray()
            unwrap(ray.get(self._actor.store.remote(model_id, vectors)), "the embedding cache actor")


class CacheActor:
    """Owns the run's embedding cache (the caller's :class:`EmbeddingCache`, its file held open) for all workers."""

    def __init__(self, cache: EmbeddingCache) -> None:
        self.cache = cache
        self._hold = cache.hold()
        self._hold.__enter__()
        self._new: dict[str, dict[str, Any]] = {}

    def lookup(self, model_id: str, hashes: list[str]) -> tuple[bool, Any]:
        return guarded(self.cache.lookup, model_id, hashes)

    def store(self, model_id: str, vectors: dict[str, Any]) -> tuple[bool, Any]:
        if self.cache.path is None:
            self._new.setdefault(model_id, {}).update(vectors)
        return guarded(self.cache.store, model_id, vectors)

    def close(self) -> tuple[bool, Any]:
        """Release the cache file; return the vectors stored during the run when the cache is memory-only."""

        def run() -> dict[str, dict[str, Any]]:
            self._hold.__exit__(None, None, None)
            return self._new

        return guarded(run)


class EvalWorker:
    """One worker: the run's strategies, prepared once, then one conversation per call."""

    def __init__(self, cache_actor: Any) -> None:
        import os

        # A strategy's own progress bars (embedding many questions) would reach the driver as log lines; the
        # driver shows one bar for the run. tqdm reads TQDM_* defaults when it is first imported.
        os.environ["TQDM_DISABLE"] = "1"
        self.cache = SharedCache(cache_actor)
        self.device = worker_device()
        self.strategies: list[Any] = []

    def _counts(self) -> tuple[int, int]:
        hits, misses, self.cache.hits, self.cache.misses = self.cache.hits, self.cache.misses, 0, 0
        return hits, misses

    def setup(self, strategies: list[Any], queries: list[str], prepare: Callable[..., None]) -> tuple[bool, Any]:
        """Take the strategies and prepare each (cache, question vectors); returns seconds per strategy."""

        def run() -> tuple[dict[str, float], tuple[int, int], str]:
            self.strategies = strategies
            seconds = {}
            for strategy in strategies:
                started = time.perf_counter()
                _place(strategy, self.device)
                prepare(strategy, self.cache, queries)
                seconds[strategy.name] = time.perf_counter() - started
            return seconds, self._counts(), self.device

        return guarded(run)

    def score(self, shard: dict[str, Any], score: Callable[..., list[dict[str, Any]]]) -> tuple[bool, Any]:
        """Every strategy on the shard's conversation: rows and seconds per strategy."""

        def run() -> tuple[dict[str, list[dict[str, Any]]], dict[str, float], tuple[int, int]]:
            rows, seconds = {}, {}
            for strategy in self.strategies:
                started = time.perf_counter()
                rows[strategy.name] = score(strategy, shard)
                seconds[strategy.name] = time.perf_counter() - started
            return rows, seconds, self._counts()

        return guarded(run)


class RayExecutor:
    """Runs an evaluation's conversations on Ray workers (pass as ``run(..., executor=RayExecutor(...))``).

    Args:
        address: The cluster to join when this process is not connected yet (``None``: a local Ray, or
            ``$RAY_ADDRESS``).
        workers: Worker actors (default: the cluster's CPUs, at most one per conversation). Each takes one CPU.
        num_gpus: GPUs per worker (default: one each when the cluster has that many, a share when it has fewer,
            none without GPUs).
        ray_options: More options for the worker actors (``resources``, ``runtime_env``...).

    Attributes:
        last_run: What the last run used: ``workers``, ``num_gpus``, ``devices``, ``conversations``, ``wall_seconds``.
        started_ray: Whether this executor started Ray (the caller may then ``ray.shutdown()``).
    """

    def __init__(self, *, address: str | None = None, workers: int | None = None, num_gpus: float | None = None,
                 ray_options: Mapping[str, Any] | None = None) -> None:
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive int, not {workers!r}.")
        self.address, self.workers, self.num_gpus = address, workers, num_gpus
        self.ray_options = dict(ray_options or {})
        self.last_run: dict[str, Any] = {}
        self.started_ray = False

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, workers={self.workers!r}, num_gpus={self.num_gpus!r})"

    def _gpus(self, ray: Any, workers: int) -> float:
        if self.num_gpus is not None:
            return self.num_gpus
        total = float(ray.cluster_resources().get("GPU", 0))
        return min(1.0, total / workers) if total else 0

    def evaluate(self, strategies: list[Any], questions: dict[str, tuple[Any, list[Any]]], queries: list[str], *,
                 prepare: Callable[..., None], score: Callable[..., list[dict[str, Any]]], cache: EmbeddingCache,
                 progress: bool) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """The runner's rows and seconds per strategy, computed on Ray (called by :func:`agentlab.eval.runner.run`)."""
        self.started_ray = ensure_ray(self.address) or self.started_ray
        ray = require_ray()
        from ray.exceptions import RayActorError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        started = time.perf_counter()
        conversations = list(questions)
        count = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        count = max(1, min(count, len(conversations) or 1))
        gpus = self._gpus(ray, count)
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        cache_actor = ray.remote(CacheActor).options(num_cpus=0, scheduling_strategy=here).remote(cache)
        options = {"num_cpus": 1, "num_gpus": gpus, **self.ray_options}
        workers = [ray.remote(EvalWorker).options(**options).remote(cache_actor) for _ in range(count)]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(conversations), desc=f"Evaluating on Ray ({count} workers)", unit="conversation")
        try:
            if bar is not None:
                bar.set_postfix_str("embedding the questions")
            # The first worker embeds every question before any conversation starts, in the in-process batch;
            # the others then read those vectors from the shared cache (their setup runs before their shards).
            setups = [unwrap(ray.get(workers[0].setup.remote(strategies, queries, prepare)), _WHERE)]
            later = [w.setup.remote(strategies, queries, prepare) for w in workers[1:]]
            if bar is not None:
                bar.set_postfix_str("")
            largest_first = sorted(conversations, key=lambda c: -(len(questions[c][0].turns) + len(questions[c][1])))
            results: dict[str, Any] = {}
            def send(worker: Any, cid: str) -> Any:
                return worker.score.remote({cid: questions[cid]}, score)

            for cid, reply, _ in dispatch(workers, largest_first, send):
                results[cid] = unwrap(reply, _WHERE)
                if bar is not None:
                    bar.update(1)
            setups += [unwrap(ray.get(ref), _WHERE) for ref in later]
            new = unwrap(ray.get(cache_actor.close.remote()), "the embedding cache actor")
        except RayActorError as exc:
            raise ClusterError(f"A Ray evaluation worker died: {str(exc).strip().splitlines()[0]}") from None
        finally:
            if bar is not None:
                bar.close()
            for actor in [*workers, cache_actor]:
                ray.kill(actor)
        if cache.path is None:
            for model_id, vectors in new.items():
                cache.store(model_id, vectors)
        seconds = {s.name: 0.0 for s in strategies}
        for part, (hits, misses) in [(s[0], s[1]) for s in setups] + [(r[1], r[2]) for r in results.values()]:
            for name, value in part.items():
                seconds[name] += value
            cache.hits += hits
            cache.misses += misses
        rows = [row for s in strategies for cid in conversations for row in results[cid][0][s.name]]
        self.last_run = {"workers": count, "num_gpus": gpus, "devices": [s[2] for s in setups],
                         "conversations": len(conversations), "wall_seconds": time.perf_counter() - started}
        return rows, seconds
