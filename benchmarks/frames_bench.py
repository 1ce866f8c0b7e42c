"""Benchmarks for the analysis exports (issue 7).

1. ``messages_df()`` on an agent whose default session holds 100,000 messages (one long chain with a few
   regenerated replies, tool calls and results, thinking blocks), pandas and Arrow; target <= 1 s.
2. ``open_many`` over 1,000 small agent files plus one aggregate query across all of them; target <= 10 s.

Run: ``.venv/bin/python benchmarks/frames_bench.py [--messages 100000] [--agents 1000]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentlab.agent._agent import Agent, get_agent
from agentlab.session._session import Session

WORDS = ("the agent stored a memory about the user and their project while the notebook ran a query over "
         "duckdb tables with “quotes” — dashes café and 2.5 numbers").split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def _message(rng: random.Random, i: int) -> dict:
    role = "user" if i % 2 == 0 else "assistant"
    r = rng.random()
    if role == "assistant" and r < 0.15:
        parts = [{"type": "text", "text": _text(rng, 12)},
                 {"type": "tool_use", "id": f"toolu_{i}", "name": "search", "input": {"query": _text(rng, 5), "k": 5}}]
    elif role == "user" and r < 0.15:
        parts = [{"type": "tool_result", "tool_use_id": f"toolu_{i - 1}", "content": _text(rng, 120)}]
    elif role == "assistant" and r < 0.2:
        parts = [{"type": "thinking", "thinking": _text(rng, 40), "signature": "sig" * 20},
                 {"type": "text", "text": _text(rng, 30)}]
    else:
        parts = [{"type": "text", "text": _text(rng, rng.randint(5, 90))}]
    return {"id": f"m{i}", "role": role, "parts": parts}


def build_big(root: Path, n: int) -> Agent:
    rng = random.Random(7)
    agent = get_agent(Agent, "big", root=root)
    session = Session(agent)
    batch: list[dict] = []
    for i in range(n):
        message = _message(rng, i)
        if i and i % 997 == 0:  # now and then a regenerated reply: a sibling branch
            message["parent_id"] = f"m{i - 2}"
        batch.append(message)
        if len(batch) == 5000:
            session.append_messages(batch)
            batch = []
    if batch:
        session.append_messages(batch)
    return agent


def bench_messages(n: int, repeats: int = 5) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        build_big(Path(tmp), n).close()
        print(f"built {n:,} messages in {time.perf_counter() - start:.1f} s")
        agent = get_agent(Agent, "big", root=tmp)  # reopened: the file as a later notebook would find it
        session = Session(agent)
        for label, call in (("messages_df()", session.messages_df), ("messages_df.arrow()", session.messages_df.arrow)):
            times = []
            for _ in range(repeats):
                start, cpu = time.perf_counter(), time.process_time()
                frame = call()
                times.append((time.perf_counter() - start, time.process_time() - cpu))
            best = min(times)
            print(f"{label:<24} rows {len(frame):>7,}  best of {repeats}: wall {best[0]:.3f} s  "
                  f"(cpu of all threads {best[1]:.3f} s)  {'OK' if best[0] <= 1.0 else 'OVER'} (target <= 1 s)")
        agent.close()


def build_many(root: Path, count: int) -> Path:
    """``count`` small agent files: one real agent built through the API, copied and renamed in place (building
    each through get_agent would measure migrations, not open_many)."""
    import shutil

    import duckdb

    from agentlab.store._naming import agent_path

    rng = random.Random(3)
    template = get_agent(Agent, "template", root=root / "template")
    Session(template).append_messages([_message(rng, i) for i in range(8)])
    source = template.path
    template.close()
    editor = duckdb.connect()
    for a in range(count):
        target = agent_path("Agent", f"user-{a}", root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        editor.execute(f"ATTACH '{target}' AS copy")
        editor.execute("UPDATE copy.agent_meta SET value = ? WHERE key = 'name'", [f"user-{a}"])
        editor.execute("DELETE FROM copy.messages WHERE seq > ?", [rng.randint(2, 8)])
        editor.execute("DETACH copy")
    editor.close()
    return root / "agent"


def bench_many(count: int) -> None:
    from agentlab.frames._multi import open_many

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        folder = build_many(Path(tmp), count)
        print(f"built {count:,} agents in {time.perf_counter() - start:.1f} s")
        start, cpu = time.perf_counter(), time.process_time()
        with open_many(str(folder / "*.duckdb")) as many:
            opened, opened_cpu = time.perf_counter() - start, time.process_time() - cpu
            frame = many.sql("SELECT agent, role, count(*) AS n, sum(strlen(content)) AS bytes "
                             "FROM messages GROUP BY ALL ORDER BY n DESC")
        total, total_cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"open_many({count:,} files) {opened:.2f} s + aggregate query {total - opened:.2f} s = {total:.2f} s "
              f"(cpu {opened_cpu:.2f} + {total_cpu - opened_cpu:.2f} s), {len(frame):,} rows  "
              f"{'OK' if total <= 10 else 'OVER'} (target <= 10 s)")


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=1_000)
    args = parser.parse_args()
    if args.messages:
        bench_messages(args.messages)
    if args.agents:
        bench_many(args.agents)


if __name__ == "__main__":
    main()
