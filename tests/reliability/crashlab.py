"""Crash-safety trials shared by tests/reliability and benchmarks/reliability.py.

A child process writes in a loop (messages, state, context blocks) and prints one line per write
*after* the call returned (an acknowledged write). The parent kills it with SIGKILL at a random
moment, reopens the agent and checks that every acknowledged write is there and that the file is
consistent: every parent exists, the search index agrees with the messages, and it opens with no
manual repair.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CHILD = r'''
import sys
from agentlab import Agent, get_agent
from agentlab.session._session import Session

class CrashAgent(Agent):
    initial_state = {"n": -1}

root, scenario, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
if scenario == "index":
    # Flush, merge and commit the search index all the time, each file write slowed down, so that kills land
    # in the middle of writing segments, deletions, the lexicon and meta.json.
    import time
    from agentlab.search import _index_files as index_files, _sections as sections
    from agentlab.session.duckdb import _index_state as index_state
    index_state.PERSIST_MIN_DOCS, index_state.FLUSH_DOCS = 1, 15
    index_state.MAX_SEGMENTS, index_state.MERGE_AT_ONCE = 2, 2
    write = sections.write_sections

    def slow_write(*args, **kwargs):
        time.sleep(0.02)
        return write(*args, **kwargs)

    index_files.write_sections = slow_write
agent = get_agent(CrashAgent, "victim", root=root)
session = Session.create(agent).with_context("memory", description="facts", max_tokens=100000)
print("ready", flush=True)
i = start
while True:
    if scenario in ("messages", "mixed"):
        session.append_message({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"note w{i} about crash"}]})
        print(f"msg m{i}", flush=True)
    if scenario in ("state", "mixed"):
        agent.set_state({"n": i})
        print(f"state {i}", flush=True)
    if scenario in ("blocks", "mixed"):
        session.set_block("memory", f"fact {i}")
        print(f"block {i}", flush=True)
    if scenario == "index":  # each round a new chain, so deleting its leaf orphans nothing
        session.append_messages([{"id": f"b{i}-{j}", "role": "user",
                                  "parts": [{"type": "text", "text": f"bulk w{i}x{j} crash"}]} for j in range(10)],
                                parent_id=None)
        note = {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"note w{i} about crash"}]}
        session.append_message(note, parent_id=None)
        if i % 3 == 0:
            session.delete_messages([f"b{i}-9"])
        if i % 4 == 0:
            session.update_message({"id": f"b{i}-1", "role": "user",
                                    "parts": [{"type": "text", "text": f"fixed w{i}"}]})
        print(f"index {i}", flush=True)
    if scenario == "bulk":
        session.append_messages([
            {"id": f"b{i}-{j}", "role": "user", "parts": [{"type": "text", "text": f"bulk w{i}x{j}"}]}
            for j in range(50)
        ])
        print(f"bulk {i}", flush=True)
    i += 1
'''

SCENARIOS = ("messages", "state", "blocks", "bulk", "mixed", "index")


@dataclass
class TrialResult:
    scenario: str
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _run_child(root: Path, scenario: str, start: int, rng: random.Random) -> list[str]:
    """Start a writer, let it run for a random time after it is ready, SIGKILL it; return its acks."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), scenario, str(start)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    acks: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    deadline = None
    give_up = time.monotonic() + 120
    buffer = b""
    try:
        while True:
            now = time.monotonic()
            if (deadline is not None and now >= deadline) or now >= give_up:
                break
            ready, _, _ = select.select([proc.stdout], [], [], 0.01)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    text = line.decode()
                    if text and text != "ready":
                        acks.append(text)
                        if deadline is None:
                            # kill at a random moment after the first write: the first write of a
                            # process can take seconds (imports, cache builds) on a loaded machine
                            deadline = time.monotonic() + rng.uniform(0.0, 1.0)
            if proc.poll() is not None and not ready:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"writer ended on its own ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    # lines the child printed before the kill but we had not read yet still count as acknowledged
    rest = buffer + proc.stdout.read()
    acks.extend(t for t in rest.decode().split("\n")[:-1] if t and t != "ready")
    return acks


def check_after_crash(root: Path, scenario: str, acks: list[str]) -> TrialResult:
    """Reopen the agent in this process and check every acknowledged write and the file's consistency."""
    from agentlab import Agent, get_agent
    from agentlab.session._session import Session

    class CrashAgent(Agent):
        initial_state = {"n": -1}

    result = TrialResult(scenario, acknowledged=len(acks))
    agent = get_agent(CrashAgent, "victim", root=root)
    try:
        session = Session.create(agent).with_context("memory", description="facts", max_tokens=100000)
        messages = {r["id"]: r for r in agent.sql("SELECT id, parent_id FROM messages")}
        last_state = last_block = None
        for ack in acks:
            kind, value = ack.split(" ", 1)
            if (kind == "msg" and value not in messages) or (kind == "bulk" and any(f"b{value}-{j}" not in messages for j in range(50))):
                result.lost.append(ack)
            elif kind == "index":
                i = int(value)
                batch = [f"m{i}"] + [f"b{i}-{j}" for j in range(10) if not (j == 9 and i % 3 == 0)]
                if any(m not in messages for m in batch) or (i % 3 == 0 and f"b{i}-9" in messages):
                    result.lost.append(ack)
            elif kind == "state":
                last_state = int(value)
            elif kind == "block":
                last_block = int(value)
        # the write after the last ack may have landed before the kill: allow exactly that one
        if last_state is not None and agent.state["n"] not in (last_state, last_state + 1):
            result.lost.append(f"state {last_state} (found {agent.state['n']})")
        if last_block is not None:
            session.tools()  # loads the blocks
            block = session.get_context_block("memory")
            content = block.content if block is not None else None
            if content not in (f"fact {last_block}", f"fact {last_block + 1}"):
                result.lost.append(f"block {last_block} (found {content!r})")
        orphans = [m for m, r in messages.items() if r["parent_id"] is not None and r["parent_id"] not in messages]
        if orphans:
            result.problems.append(f"{len(orphans)} messages whose parent is missing")
        indexed = {r["id"] for r in agent.sql("SELECT id FROM messages WHERE search_tokens IS NOT NULL")}
        if indexed != set(messages):
            result.problems.append(f"search index has {len(indexed)} docs for {len(messages)} messages")
        for ack in acks[-3:]:
            kind, value = ack.split(" ", 1)
            if kind in ("msg", "index"):
                word = f"w{value[1:]}" if kind == "msg" else f"w{value}"
                wanted = value if kind == "msg" else f"m{value}"
                hits = session.search(word, mode="any")
                if wanted not in [h.id for h in hits]:
                    result.problems.append(f"search does not find {wanted}")
        if scenario == "index":
            result.problems += index_differences(agent)
    finally:
        agent.close()
    return result


def index_differences(agent) -> list[str]:
    """Searches through the index the crashed writer left, against an index built afresh from a copy of the file."""
    import shutil
    import tempfile

    from agentlab.session.duckdb._tree import tree_of
    from agentlab.store._database import Store

    index = tree_of(agent.store).fts
    queries = ["crash", "bulk", "note", "fixed", "w1", "w7 crash", "about crash"]
    found = {(q, mode): [(h.doc_id, round(h.score, 9)) for h in index.search(q, mode=mode, limit=50)]
             for q in queries for mode in ("any", "all", "phrase")}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.duckdb"
        agent.store.checkpoint()
        shutil.copyfile(agent.store.path, copy)
        fresh = Store(copy, read_only=True)
        try:
            rebuilt = tree_of(fresh).fts
            return [f"index differs from a rebuild on {q!r} ({mode})" for (q, mode), hits in found.items()
                    if hits != [(h.doc_id, round(h.score, 9)) for h in rebuilt.search(q, mode=mode, limit=50)]]
        finally:
            fresh.close()


def run_trials(base: Path, scenario: str, trials: int, seed: int = 0) -> list[TrialResult]:
    """``trials`` kill-and-check rounds on one agent file per scenario (writes accumulate across rounds)."""
    rng = random.Random(seed)
    root = base / scenario
    results = []
    start = 0
    for _ in range(trials):
        acks = _run_child(root, scenario, start, rng)
        results.append(check_after_crash(root, scenario, acks))
        start += max(len(acks), 1) + 10  # fresh ids for the next round
    return results
