"""Run every benchmark script in turn and print its figures (the numbers in BENCHMARKS.md).

Run: .venv/bin/python benchmarks/run_all.py [--only session,chat]
Takes about 15-20 minutes on the 2-core machine (MiniLM embeddings and the LoCoMo run dominate).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
SCRIPTS = {
    "agent": ["agent_bench.py"],
    "fulltext": ["fulltext_bench.py"],
    "session": ["session_bench.py"],
    "scale": ["scale_bench.py", "--sizes", "10000,100000", "--repeats", "2"],
    "vectors": ["vectors_bench.py"],
    "context": ["context_bench.py"],
    "chat": ["chat_bench.py"],
    "frames": ["frames_bench.py"],
    "small_agents": ["small_agents_bench.py", "--files", "500,1000,2000,5000,10000"],
    "eval": ["eval_bench.py"],
    "experiments": ["experiments_bench.py"],
    "widgets": ["widgets_bench.py"],
    "reliability": ["reliability.py"],
    "serve": ["serve_bench.py"],
    "ray": ["ray_bench.py"],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", help="comma-separated names: " + ",".join(SCRIPTS))
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(SCRIPTS)
    failed = []
    for name in names:
        command = [sys.executable, str(HERE / SCRIPTS[name][0]), *SCRIPTS[name][1:]]
        print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        if subprocess.run(command).returncode != 0:
            failed.append(name)
        print(f"=== {name} took {time.perf_counter() - start:.0f} s", flush=True)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
