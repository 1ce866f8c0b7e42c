"""Run benchmark scripts against two checkouts of agentlab, alternating them, and keep every output.

This machine's speed drifts by 2x within seconds, so a before/after comparison is only fair when the two sides
run in turns: ``A B A B ...`` (the order flips each round, so neither side always runs first). Each run is a
fresh process with ``PYTHONPATH`` set to its checkout, running that checkout's own copy of the script (a script
may have changed with the code it measures). The outputs go to ``OUT/<script>.<side>.<round>.txt``, and the
lines that carry a figure are printed side by side for reading; turning them into a table is left to the reader,
since every script prints its figures its own way.

Example (the layout change, before and after)::

    git worktree add --detach /tmp/before 5ec5ef9
    git worktree add --detach /tmp/after bbdce98
    .venv/bin/python benchmarks/compare_revisions.py /tmp/before /tmp/after \
        --script "session_bench.py --messages 20000" --script "chat_bench.py --turns 100" --rounds 3 --out /tmp/cmp
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

# A line is a figure if it holds a number followed by a unit or a ratio.
_FIGURE = re.compile(r"\d[\d,.]*\s*(ms|s\b|msg/s|MB|KB|x\b|%|/s)")


def run(checkout: Path, script: str, out: Path) -> float:
    """Run one benchmark command in ``checkout``; return its wall time in seconds."""
    words = shlex.split(script)
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    started = time.perf_counter()
    with out.open("w") as sink:
        subprocess.run([sys.executable, str(checkout / "benchmarks" / words[0]), *words[1:]], cwd=checkout,
                       env=env, stdout=sink, stderr=subprocess.STDOUT, check=False)
    return time.perf_counter() - started


def figures(path: Path) -> list[str]:
    return [line.rstrip() for line in path.read_text(errors="replace").splitlines() if _FIGURE.search(line)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="checkout A (e.g. a git worktree at the old commit)")
    parser.add_argument("after", type=Path, help="checkout B")
    parser.add_argument("--script", action="append", required=True,
                        help='a benchmark command relative to benchmarks/, e.g. "session_bench.py --messages 20000"')
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("compare-out"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    for script in args.script:
        name = Path(shlex.split(script)[0]).stem
        for round_ in range(1, args.rounds + 1):
            order = ["before", "after"] if round_ % 2 else ["after", "before"]
            for side in order:
                out = args.out / f"{name}.{side}.{round_}.txt"
                seconds = run(sides[side], script, out)
                load = os.getloadavg()[0]
                print(f"== {name} round {round_} {side}: {seconds:.1f} s, load {load:.1f} -> {out}", flush=True)
                for line in figures(out):
                    print(f"   {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
