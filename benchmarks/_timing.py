"""Small timing helpers shared by the benchmark scripts (no dependencies beyond the stdlib)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50 and p95 of a list of millisecond samples."""
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p95": p95}


def time_calls(fn: Callable[[int], object], n: int) -> list[float]:
    """Call ``fn(i)`` n times; return each call's wall time in milliseconds."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def row(label: str, stats: dict[str, float], unit: str = "ms", extra: str = "") -> str:
    return f"{label:<44} p50 {stats['p50']:8.3f} {unit}   p95 {stats['p95']:8.3f} {unit}  {extra}"


def machine_check(repeats: int = 3) -> float:
    """Milliseconds for a fixed pure-Python loop of 3,000,000 additions (median of ``repeats``).

    On the project's 2-core VM this loop takes about 120 ms in fast spells and 195-220 ms in slow ones (the
    host's load, not this process), and every other figure moves with it; benchmarks print it next to their
    figures so that runs can be compared.
    """
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(3_000_000):
            total += i
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000
