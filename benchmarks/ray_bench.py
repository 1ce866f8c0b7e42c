"""agentlab on Ray: sharded LoCoMo evaluation, 1,000 simulated users, and the cost of a handle call.

Run: .venv/bin/python benchmarks/ray_bench.py [--data PATH] [--repeats 2] [--users 1000] [--turns 10]
                                             [--skip-eval] [--skip-users] [--skip-calls]

Everything runs on one local Ray started here (``ray.init(num_cpus=2)``), and each figure sits beside an anchor
measured in the same run, alternating, repeated; ranges are over the repeats.

1. Evaluation: ``agentlab.eval.run(locomo, "bm25,dense,hybrid", categories 1-4)`` with a fresh (cold) embedding
   cache file each time, in-process (the anchor), then on Ray with 1 and with 2 workers. Throughput is
   questions x strategies per wall second; every Ray run's rows are checked equal to the in-process run's.
2. Simulated users: ``simulate(locomo, users, turns=...)`` in-process (the anchor) and on Ray with 2 workers:
   messages per second (each a durable append, with compaction), and each worker actor's memory. Then the memory
   of one agent actor (``get_agent(..., backend="ray")``, a process per agent) against a bare Ray actor.
3. Handle calls: ``state``, ``sql("SELECT 1")`` and ``append_message`` through a handle against the same call
   on a local agent, and a bare Ray actor's no-op round trip (Ray's floor).

This machine has 2 cores, shared with other work: two workers can at best use both, and the driver, Ray's own
processes and the cache actor compete with them, so the 2-worker figure says what sharding costs and saves here,
not how it scales on a cluster. LoCoMo is CC BY-NC 4.0 and not shipped: by default it is read from
../shared/datasets/locomo.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _timing import machine_check  # noqa: E402


def span(values: list[float], fmt: str = "{:.2f}") -> str:
    """``low-high (median m)`` of the repeats."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(min(values))}-{fmt.format(max(values))} (median {fmt.format(statistics.median(values))})"


def mb(n: float) -> str:
    return f"{n / 2**20:.0f} MB"


def evaluation(data: Path, repeats: int) -> None:
    import pandas as pd

    import agentlab.eval as ev
    from agentlab.cluster import RayExecutor
    from agentlab.eval.datasets import load_locomo
    from agentlab.eval.embedcache import EmbeddingCache

    dataset = load_locomo(data)
    work = sum(1 for _ in dataset.iter_questions([1, 2, 3, 4], with_evidence=True)) * 3
    rates: dict[str, list[float]] = {"in-process": [], "ray 1 worker": [], "ray 2 workers": []}
    print(f"\n== LoCoMo evaluation, bm25+dense+hybrid, cold cache: {work} question x strategy rankings per run")
    with tempfile.TemporaryDirectory() as folder:
        for r in range(repeats):
            reference = None
            for label, executor in (("in-process", "local"), ("ray 1 worker", RayExecutor(workers=1)),
                                    ("ray 2 workers", RayExecutor(workers=2))):
                cache = EmbeddingCache(Path(folder) / f"cache-{r}-{label.replace(' ', '-')}.duckdb")
                started = time.perf_counter()
                result = ev.run(dataset, "bm25,dense,hybrid", categories=[1, 2, 3, 4], cache=cache, progress=False,
                                executor=executor)
                elapsed = time.perf_counter() - started
                rates[label].append(work / elapsed)
                same = ""
                if reference is None:
                    reference = result.per_question
                else:
                    try:
                        pd.testing.assert_frame_equal(reference, result.per_question)
                        same = ", rows equal to in-process"
                    except AssertionError:
                        same = ", ROWS DIFFER from in-process"
                print(f"  run {r + 1} {label:<14} {elapsed:6.1f} s  {work / elapsed:6.1f} rankings/s{same}",
                      flush=True)
    ratio_1 = [a / b for a, b in zip(rates["ray 1 worker"], rates["in-process"])]
    ratio_2 = [a / b for a, b in zip(rates["ray 2 workers"], rates["ray 1 worker"])]
    ratio_2l = [a / b for a, b in zip(rates["ray 2 workers"], rates["in-process"])]
    for label, values in rates.items():
        print(f"  {label:<14} throughput {span(values, '{:.1f}')} rankings/s")
    print(f"  ratio ray 1 worker / in-process: {span(ratio_1)}")
    print(f"  ratio ray 2 workers / ray 1 worker: {span(ratio_2)}")
    print(f"  ratio ray 2 workers / in-process: {span(ratio_2l)}")


def users(data: Path, count: int, turns: int, repeats: int) -> None:
    from agentlab.cluster import CompactionPolicy, simulate
    from agentlab.eval.datasets import load_locomo

    dataset = load_locomo(data)
    policy = CompactionPolicy(after_tokens=150, tail_token_budget=60, protect_head=1, min_tail_messages=2)
    rates: dict[str, list[float]] = {"in-process": [], "ray 2 workers": []}
    memory: list[dict[str, int]] = []
    print(f"\n== {count} simulated users x {turns} LoCoMo turns (compact after 150 tokens, extractive summaries)")
    with tempfile.TemporaryDirectory() as folder:
        for r in range(repeats):
            for label, executor in (("in-process", "local"), ("ray 2 workers", "ray")):
                result = simulate(dataset, count, turns=turns, root=Path(folder) / f"{r}-{executor}", policy=policy,
                                  executor=executor, workers=2, progress=False)
                rates[label].append(result.messages_per_second)
                if executor == "ray":
                    memory += [w["memory"] for w in result.workers]
                print(f"  run {r + 1} {label:<14} {result.messages} messages, {result.compactions} compactions in "
                      f"{result.seconds:6.1f} s: {result.messages_per_second:6.0f} messages/s "
                      f"({count / result.seconds:5.1f} users/s)", flush=True)
    for label, values in rates.items():
        print(f"  {label:<14} {span(values, '{:.0f}')} messages/s")
    print(f"  ratio ray 2 workers / in-process: {span([a / b for a, b in zip(rates['ray 2 workers'], rates['in-process'])])}")
    print(f"  each simulation worker actor after {count // 2} users: USS {span([m['uss'] / 2**20 for m in memory], '{:.0f}')} MB, "
          f"PSS {span([m['pss'] / 2**20 for m in memory], '{:.0f}')} MB, RSS {span([m['rss'] / 2**20 for m in memory], '{:.0f}')} MB")


class Bare:
    """A Ray actor that does nothing: the floor of a Ray call and of an actor's memory."""

    def noop(self) -> None:
        return None

    def memory(self) -> dict[str, int]:
        # Read here rather than through agentlab, which would load agentlab (DuckDB, numpy) into the bare actor.
        fields = {}
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    fields[parts[0][:-1]] = int(parts[1]) * 1024
        return {"rss": fields.get("Rss", 0), "pss": fields.get("Pss", 0),
                "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)}


def agent_actors(count: int) -> None:
    import ray

    from agentlab import Agent, get_agent

    print(f"\n== memory of {count} agent actors (one process per agent) against {count} bare Ray actors")
    with tempfile.TemporaryDirectory() as folder:
        # get_agent is annotated as returning the class even for backend="ray"; it returns a handle.
        handles: list[Any] = [get_agent(Agent, f"user-{i}", root=folder, backend="ray") for i in range(count)]
        for h in handles:
            h.set_state({"n": 1})
            h.append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]})
        agents = [h.memory() for h in handles]
        bare_actors: list[Any] = [ray.remote(Bare).options(num_cpus=0).remote() for _ in range(count)]
        bare = ray.get([b.memory.remote() for b in bare_actors])
        for h in handles:
            h.close()
        for b in bare_actors:
            ray.kill(b)
    for key in ("uss", "pss", "rss"):
        a, b = [m[key] / 2**20 for m in agents], [m[key] / 2**20 for m in bare]
        print(f"  {key.upper()}: agent actor {span(a, '{:.0f}')} MB, bare actor {span(b, '{:.0f}')} MB, "
              f"ratio {span([x / y for x, y in zip(a, b)])}")
    uss = statistics.median(m["uss"] for m in agents)
    print(f"  1,000 agent actors at the median USS: {1000 * uss / 2**30:.0f} GB (this machine has 24 GB)")


def calls(repeats: int, n: int = 300) -> None:
    import ray

    from agentlab import Agent, Session, get_agent

    print(f"\n== handle call against local call: {repeats} alternating rounds of {n} calls each, p50 per call")
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        handle: Any = get_agent(Agent, "remote", root=folder, backend="ray")
        local = get_agent(Agent, "local", root=folder)
        session = Session.create(local)
        bare: Any = ray.remote(Bare).options(num_cpus=0).remote()
        ray.get(bare.noop.remote())
        handle.set_state({"n": 0})
        local.set_state({"n": 0})
        counter = iter(range(10**9))
        cases = {
            "state (read)": (lambda: handle.state, lambda: local.state),
            "sql SELECT 1": (lambda: handle.sql("SELECT 1 AS x"), lambda: local.sql("SELECT 1 AS x")),
            "append_message": (
                lambda: handle.append_message({"id": f"h{next(counter)}", "role": "user",
                                               "parts": [{"type": "text", "text": "a durable append"}]}),
                lambda: session.append_message({"id": f"l{next(counter)}", "role": "user",
                                                "parts": [{"type": "text", "text": "a durable append"}]})),
        }
        for _ in range(repeats):
            for label, (remote_call, local_call) in cases.items():
                for side, fn in (("handle", remote_call), ("local", local_call)):
                    samples = []
                    for _ in range(n):
                        started = time.perf_counter()
                        fn()
                        samples.append((time.perf_counter() - started) * 1000)
                    results.setdefault(f"{label}|{side}", []).append(statistics.median(samples))
            samples = []
            for _ in range(n):
                started = time.perf_counter()
                ray.get(bare.noop.remote())
                samples.append((time.perf_counter() - started) * 1000)
            results.setdefault("bare", []).append(statistics.median(samples))
        handle.close()
        local.close()
        ray.kill(bare)
    for label in cases:
        h, lo = results[f"{label}|handle"], results[f"{label}|local"]
        print(f"  {label:<15} handle {span(h, '{:.3f}')} ms, local {span(lo, '{:.3f}')} ms, "
              f"overhead {span([a - b for a, b in zip(h, lo)], '{:.3f}')} ms, ratio {span([a / b for a, b in zip(h, lo)])}")
    print(f"  bare Ray actor no-op round trip: {span(results['bare'], '{:.3f}')} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds of the eval and user runs")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10, help="turns each simulated user replays")
    parser.add_argument("--actors", type=int, default=8, help="agent actors whose memory is measured")
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--skip-users", action="store_true")
    parser.add_argument("--skip-calls", action="store_true")
    args = parser.parse_args()
    if not args.data.is_file() and not (args.skip_eval and args.skip_users):
        print(f"LoCoMo not found at {args.data}; pass --data PATH/locomo10.json", file=sys.stderr)
        return 2
    import ray

    print(f"machine check before: {machine_check():.0f} ms (fast ~120, slow ~200); "
          f"load average {os.getloadavg()[0]:.1f} on 2 cores")
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    print(f"ray.init(num_cpus=2): {time.perf_counter() - started:.1f} s")
    try:
        if not args.skip_calls:
            calls(max(3, args.repeats + 1))
        if not args.skip_users:
            users(args.data, args.users, args.turns, args.repeats)
            agent_actors(args.actors)
        if not args.skip_eval:
            evaluation(args.data, args.repeats)
    finally:
        ray.shutdown()
    print(f"\nmachine check after: {machine_check():.0f} ms; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
