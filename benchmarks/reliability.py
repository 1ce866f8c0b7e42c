"""Reliability figures: crash trials (SIGKILL), export/import kill trials, lock timing, the hostile-input catalogue.

Run: .venv/bin/python benchmarks/reliability.py [--trials 20] [--only serve]
The test suite (tests/reliability) runs the same code with fewer trials.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reliability import test_hostile as hostile  # noqa: E402
from tests.reliability.crashlab import SCENARIOS, run_trials  # noqa: E402
from tests.reliability.portlab import KINDS, run_port_trials  # noqa: E402
from tests.reliability.servelab import serve_kill_trial  # noqa: E402
from tests.reliability.snapshot import snapshot  # noqa: E402


def crash_figures(trials: int) -> bool:
    print(f"crash safety: {trials} SIGKILL trials per scenario")
    print(f"{'scenario':<10} {'trials':>6} {'acknowledged':>13} {'lost':>5} {'inconsistent':>13} {'seconds':>8}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in SCENARIOS:
            start = time.perf_counter()
            results = run_trials(Path(tmp), scenario, trials, seed=2026)
            acked = sum(r.acknowledged for r in results)
            lost = sum(len(r.lost) for r in results)
            bad = sum(1 for r in results if r.problems)
            ok &= lost == 0 and bad == 0
            print(f"{scenario:<10} {trials:>6} {acked:>13} {lost:>5} {bad:>13} {time.perf_counter() - start:>8.1f}")
    return ok


def port_figures(trials: int) -> bool:
    """Exports over a good export and imports, each SIGKILLed at a random moment.

    "lost" counts trials after which the export folder held neither the old nor the new export complete, or a
    killed import left an agent file that does not hold the export (or a retry did not restore it).
    """
    print(f"export/import: {trials} SIGKILL trials each")
    print(f"{'kind':<7} {'trials':>6} {'killed mid-way':>15} {'outcomes':<28} {'lost':>5} {'problems':>9} {'seconds':>8}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            start = time.perf_counter()
            results = run_port_trials(Path(tmp), kind, trials, seed=2026)
            outcomes: dict[str, int] = {}
            for r in results:
                outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
            shown = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            lost = sum(1 for r in results if r.lost)
            bad = sum(1 for r in results if r.problems)
            for r in results:
                for line in r.lost + r.problems:
                    print(f"  {kind}: {line}")
            ok &= lost == 0 and bad == 0
            midway = sum(1 for r in results if not r.finished)
            print(f"{kind:<7} {trials:>6} {midway:>15} {shown:<28} {lost:>5} {bad:>9} {time.perf_counter() - start:>8.1f}")
    return ok


def hostile_figures() -> bool:
    tried = corrupted = unexpected = 0
    for name, action, expected in hostile.CASES:
        with tempfile.TemporaryDirectory() as tmp:
            env = hostile.build(Path(tmp))
            before = snapshot(env.agent)
            tried += 1
            try:
                result = action(env)
                if isinstance(expected, type) or not expected(result):
                    unexpected += 1
                    print(f"  unexpected result: {name}")
            except Exception as exc:
                if not (isinstance(expected, type) and isinstance(exc, expected)):
                    unexpected += 1
                    print(f"  unexpected error in {name}: {type(exc).__name__}: {exc}")
            if snapshot(env.agent) != before:
                corrupted += 1
                print(f"  stored data changed: {name}")
            env.agent.close()
    print(f"hostile inputs: {tried} cases tried, {corrupted} lost or corrupted data, {unexpected} unexpected outcomes")
    return corrupted == 0 and unexpected == 0


def file_figures(trials: int) -> bool:
    """Foreign and broken files, create races and a failed checkpoint on a full disk (the last one needs root)."""
    from tests.reliability import filelab

    ok = True
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in filelab.BAD_KINDS:
            problems += filelab.bad_file_trial(kind, Path(tmp) / kind)
    print(f"files that are not agents: {len(filelab.BAD_KINDS)} kinds, {len(problems)} opened, changed or raw errors")
    ok &= not problems
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        races = [filelab.race_trial(Path(tmp) / f"race{i}") for i in range(max(1, trials // 2))]
    outcomes = [o for r in races for o in r.outcomes]
    bad = sum(1 for r in races if r.problems)
    print(f"create races: {len(races)} races of 4 processes, {outcomes.count('won')} won, {outcomes.count('locked')} "
          f"locked, {bad} with a raw error or leftover file ({time.perf_counter() - start:.1f} s)")
    ok &= bad == 0
    with tempfile.TemporaryDirectory() as tmp:
        mount = Path(tmp) / "disk"
        why = filelab.mount_tmpfs(mount)
        if why:
            print(f"full disk at a checkpoint: skipped ({why})")
            return ok
        try:
            result = filelab.checkpoint_trial(mount)
        finally:
            from agentlab.agent._agent import _registry

            for live in list(_registry.values()):
                live.close()
            filelab.unmount(mount)
    print(f"full disk at a checkpoint: {len(result.acknowledged)} acknowledged, {len(result.lost)} lost, "
          f"problems: {result.problems or 'none'}")
    return ok and not result.lost and not result.problems


def serve_figures(trials: int) -> bool:
    """Servers SIGKILLed while four agents each go through hibernate/wake cycles under bursts of updates."""
    print(f"served agents: {trials} SIGKILL trials of a server hibernating and waking 4 agents")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results = [serve_kill_trial(Path(tmp) / f"t{seed}", 2026 + seed) for seed in range(trials)]
    acked = sum(sum(r.acked.values()) for r in results)
    lost = sum(len(r.lost) for r in results)
    wakes = sum(r.wakes for r in results)
    print(f"acknowledged updates {acked}, wakes {wakes}, agents missing an acknowledged update {lost}, "
          f"{time.perf_counter() - start:.1f} s")
    return lost == 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--only", help="comma-separated parts: crash, port, hostile, files, serve")
    args = parser.parse_args()
    parts = args.only.split(",") if args.only else ["crash", "port", "hostile", "files", "serve"]
    figures = {"crash": lambda: crash_figures(args.trials), "port": lambda: port_figures(args.trials),
               "hostile": hostile_figures, "files": lambda: file_figures(args.trials),
               "serve": lambda: serve_figures(args.trials)}
    ok = True
    for part in parts:
        ok &= figures[part]()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
