"""Many small agents ("one agent per user" at thousands of users) against sqlite3 + FTS5 with upstream's schema.

Four parts, each measured beside its anchor in the same run, the two sides alternated; CPU time is printed beside
wall time (this machine is shared, so wall time moves with other work):

* **size**: the file of an agent whose first session holds 0, 20, 50 and 500 messages, state set once, closed
  (agentlab's ``.duckdb`` and its ``.wal``; the anchor's SQLite file and its ``-wal``). Target: <= 400 KB at 20.
* **create**: ``get_agent`` of a new name, ``SessionManager.create`` of its first session and the first
  ``append_message``, for ``--users`` users one after another (p50, p95, total). The anchor opens a new SQLite
  file in WAL mode with ``synchronous=FULL``, creates upstream's tables in one transaction (a Durable Object
  commits a request's writes together), inserts the session row, then the message and its FTS5 row in one
  transaction. Closing is timed apart (DuckDB checkpoints then), on both sides. Runs alternate between new agents
  opening in spare DuckDB instances started ahead (``spares``) and in instances of their own (``own``), see
  ``--create-variants``. Target: p50 <= 3x the anchor.
* **many**: ``agentlab.open_many`` over N agent files plus one aggregate query (messages and bytes per agent and
  role), N in ``--files``, each run in a fresh process (its peak RSS is the figure's memory; pandas and pyarrow are
  imported before the clock starts on both sides). The anchor opens each SQLite file in turn and runs the same
  aggregate (SQLite attaches at most 125 databases, so a loop is what a researcher would write), collecting the rows
  in Python. Targets: time per file flat within 1.25x from the smallest to the largest N; 5,000 files <= 10 s and
  <= 2 GB.
* **blocks** (not run by default): for each of ``--block-sizes``, a 20- and a 500-message agent's file, and a bulk
  import of ``--bulk`` messages (``session_bench.py``'s 12-word Zipf messages, batches of 10,000) into a new agent
  of that block size, then closing it (DuckDB's checkpoint); the sizes' order flips each repeat.

Texts are realistic chat: 20-200 words per message, drawn from a Zipf (s=1.07) distribution over 30,000 made-up
words. The corpus for ``many`` is :data:`SEEDS` agents built through the public API (20-50 messages each, state
set) and copies of them whose stored name is rewritten, with their SQLite twins (see :func:`build_corpus`: 10,000
agents in about a minute). It is kept in ``--corpus`` between runs when given, and removed otherwise.

Run: ``.venv/bin/python benchmarks/small_agents_bench.py [--parts size,create,many,blocks] [--users 1000]
[--files 500,1000,2000,5000,10000] [--repeats 3] [--corpus /tmp/small-agents] [--workers 1]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_check  # noqa: E402

if TYPE_CHECKING:  # agentlab is imported inside the timed functions, so that its import is not in a figure
    from agentlab import Agent, Session

VOCABULARY = 30_000

# Upstream's tables (the Session, its providers, the session manager and the agent's state).
UPSTREAM_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS cf_agents_state (id TEXT PRIMARY KEY NOT NULL, state TEXT)",
    "CREATE TABLE IF NOT EXISTS assistant_messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL DEFAULT '', "
    "parent_id TEXT, role TEXT NOT NULL, content TEXT NOT NULL, created_at DATETIME DEFAULT CURRENT_TIMESTAMP)",
    "CREATE INDEX IF NOT EXISTS idx_assistant_msg_parent ON assistant_messages(parent_id)",
    "CREATE INDEX IF NOT EXISTS idx_assistant_msg_session ON assistant_messages(session_id)",
    "CREATE TABLE IF NOT EXISTS assistant_compactions (id TEXT PRIMARY KEY, session_id TEXT NOT NULL DEFAULT '', "
    "summary TEXT NOT NULL, from_message_id TEXT NOT NULL, to_message_id TEXT NOT NULL, "
    "created_at DATETIME DEFAULT CURRENT_TIMESTAMP)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS assistant_fts USING fts5(id UNINDEXED, session_id UNINDEXED, "
    "role UNINDEXED, content, tokenize='porter unicode61')",
    "CREATE TABLE IF NOT EXISTS assistant_config (session_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
    "PRIMARY KEY (session_id, key))",
    "CREATE TABLE IF NOT EXISTS cf_agents_context_blocks (label TEXT PRIMARY KEY, content TEXT NOT NULL, "
    "updated_at DATETIME DEFAULT CURRENT_TIMESTAMP)",
    "CREATE TABLE IF NOT EXISTS cf_agents_search_entries (label TEXT NOT NULL, key TEXT NOT NULL, "
    "content TEXT NOT NULL, created_at DATETIME DEFAULT CURRENT_TIMESTAMP, "
    "updated_at DATETIME DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (label, key))",
    "CREATE VIRTUAL TABLE IF NOT EXISTS cf_agents_search_fts USING fts5(label UNINDEXED, key UNINDEXED, content, "
    "tokenize='porter unicode61')",
    "CREATE TABLE IF NOT EXISTS assistant_sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL, "
    "parent_session_id TEXT, model TEXT, source TEXT, input_tokens INTEGER DEFAULT 0, "
    "output_tokens INTEGER DEFAULT 0, estimated_cost REAL DEFAULT 0, end_reason TEXT, "
    "created_at DATETIME DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME DEFAULT CURRENT_TIMESTAMP)",
]

AGGREGATE = ("SELECT agent, role, count(*) AS n, sum(strlen(content)) AS bytes FROM messages "
             "GROUP BY agent, role ORDER BY agent, role")
ANCHOR_AGGREGATE = ("SELECT role, count(*), sum(length(CAST(content AS BLOB))) FROM assistant_messages "
                    "GROUP BY role ORDER BY role")


# --- texts ------------------------------------------------------------------------------------------------------

class Texts:
    """Chat texts of 20-200 words drawn from a Zipf distribution over made-up words (deterministic per seed)."""

    def __init__(self, seed: int = 17) -> None:
        rng = random.Random(seed)
        words: set[str] = set()
        while len(words) < VOCABULARY:
            words.add("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 11))))
        self.words = sorted(words)
        rng.shuffle(self.words)  # rank unrelated to spelling
        self.cum = list(itertools.accumulate(1.0 / (rank + 1) ** 1.07 for rank in range(VOCABULARY)))
        self.rng = rng

    def text(self) -> str:
        n = self.rng.randint(20, 200)
        return " ".join(self.rng.choices(self.words, cum_weights=self.cum, k=n))

    def message(self, i: int) -> dict:
        return {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                "parts": [{"type": "text", "text": self.text()}]}


# --- the two sides ------------------------------------------------------------------------------------------------

def _agent_class():
    from agentlab import Agent

    class SmallAgent(Agent):
        initial_state = {"visits": 0, "plan": "free"}

    return SmallAgent


def ours_create(root: Path, name: str, first: dict, cls) -> tuple[Agent, Session]:
    from agentlab import get_agent
    from agentlab.session._manager import SessionManager

    agent = get_agent(cls, name, root=root)
    manager = SessionManager(agent)
    session = manager.session(manager.create("first chat").id)
    session.append_message(first)
    return agent, session


def anchor_open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def anchor_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN")
    for statement in UPSTREAM_SCHEMA:
        conn.execute(statement)
    conn.execute("COMMIT")


def anchor_create(path: Path, first: dict) -> sqlite3.Connection:
    conn = anchor_open(path)
    anchor_schema(conn)
    conn.execute("INSERT INTO assistant_sessions (id, name) VALUES (?, ?)", ["s1", "first chat"])
    anchor_append(conn, first)
    return conn


def anchor_append(conn: sqlite3.Connection, message: dict, session_id: str = "s1") -> None:
    text = " ".join(p["text"] for p in message["parts"] if p.get("type") == "text")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO assistant_messages (id, session_id, parent_id, role, content) VALUES (?, ?, ?, ?, ?)",
                 [message["id"], session_id, None, message["role"], json.dumps(message)])
    conn.execute("INSERT INTO assistant_fts (id, session_id, role, content) VALUES (?, ?, ?, ?)",
                 [message["id"], session_id, message["role"], text])
    conn.execute("COMMIT")


def anchor_set_state(conn: sqlite3.Connection, state: dict) -> None:
    conn.execute("INSERT OR REPLACE INTO cf_agents_state (id, state) VALUES ('cf_state_row_id', ?)",
                 [json.dumps(state)])


def _size(path: Path, *suffixes: str) -> int:
    return sum(os.path.getsize(str(path) + s) for s in ("", *suffixes) if os.path.exists(str(path) + s))


# --- size -------------------------------------------------------------------------------------------------------

def bench_size(counts: list[int]) -> None:
    print("\n## size of one agent's file (first session, state set once, closed)")
    texts, cls = Texts(1), _agent_class()
    with tempfile.TemporaryDirectory(prefix="small-size-") as tmp:
        root = Path(tmp)
        for n in counts:
            messages = [texts.message(i) for i in range(max(n, 1))]
            if n:
                agent, session = ours_create(root, f"user-{n}", messages[0], cls)
                agent.state  # noqa: B018  the initial state is stored on first access
                for message in messages[1:n]:
                    session.append_message(message)
            else:
                agent, _ = _bare_agent(root, f"user-{n}", cls)
            path = agent.path
            agent.close()
            ours = _size(path, ".wal")
            lite = root / f"anchor-{n}.sqlite"
            conn = anchor_create(lite, messages[0]) if n else _anchor_bare(lite)
            anchor_set_state(conn, {"visits": 0, "plan": "free"})
            for message in messages[1:n]:
                anchor_append(conn, message)
            conn.close()
            anchor = _size(lite, "-wal", "-shm")
            text_kb = sum(len(json.dumps(m)) for m in messages[:n]) / 1024
            print(f"{n:>4} messages ({text_kb:7.1f} KB of JSON): agentlab {ours / 1024:8.1f} KB   "
                  f"sqlite3+FTS5 {anchor / 1024:7.1f} KB   ratio {ours / anchor:5.2f}"
                  + (f"   {'OK' if ours <= 400 * 1024 else 'OVER'} (target <= 400 KB)" if n == 20 else ""))


def _bare_agent(root: Path, name: str, cls) -> tuple[Agent, None]:
    from agentlab import get_agent
    from agentlab.session._manager import SessionManager

    agent = get_agent(cls, name, root=root)
    SessionManager(agent).create("first chat")
    agent.state  # noqa: B018
    return agent, None


def _anchor_bare(path: Path) -> sqlite3.Connection:
    conn = anchor_open(path)
    anchor_schema(conn)
    conn.execute("INSERT INTO assistant_sessions (id, name) VALUES (?, ?)", ["s1", "first chat"])
    return conn


# --- create -----------------------------------------------------------------------------------------------------

def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _cpu_ms(start: tuple[float, float]) -> tuple[float, float]:
    return (time.perf_counter() - start[0]) * 1000, (time.process_time() - start[1]) * 1000


def bench_create(users: int, repeats: int, variants: list[str]) -> None:
    """``variants``: "spares" (new agents open in DuckDB instances started ahead, the default) and/or "own" (every
    new agent starts its own instance); the repeats cycle through them."""
    print(f"\n## create an agent, its first session and the first append: {users:,} users one after another")
    texts, cls = Texts(2), _agent_class()
    import agentlab  # noqa: F401  imports are not part of the figure
    from agentlab.store import _files as files

    instances: Any  # the module, or None for a revision without it
    try:
        from agentlab.store import _instances as instances
    except ImportError:  # agentlab before spare instances (a "before" run): every agent starts its own
        instances, variants = None, ["own"]
    default_spares = instances.SPARES if instances is not None else 0
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    for rep in range(repeats):
        variant = variants[rep % len(variants)]
        if instances is not None:
            instances.SPARES = default_spares if variant == "spares" else 0
        if instances is not None and variant == "spares":
            instances.start(files.CONFIG)
            instances.ready()
        with tempfile.TemporaryDirectory(prefix="small-create-") as tmp:
            root = Path(tmp)
            ours, ours_cpu, ours_close, anchor, anchor_cpu, anchor_close = [], [], [], [], [], []
            run_cpu = time.process_time()
            for u in range(users):
                first = texts.message(0)
                sides = ["ours", "anchor"] if u % 2 == 0 else ["anchor", "ours"]
                for side in sides:
                    if side == "ours":
                        start = time.perf_counter(), time.process_time()
                        agent, _ = ours_create(root, f"user-{u}", first, cls)
                        wall, cpu = _cpu_ms(start)
                        mid = time.perf_counter()
                        agent.close()
                        ours.append(wall)
                        ours_cpu.append(cpu)
                        ours_close.append((time.perf_counter() - mid) * 1000)
                    else:
                        start = time.perf_counter(), time.process_time()
                        conn = anchor_create(root / f"user-{u}.sqlite", first)
                        wall, cpu = _cpu_ms(start)
                        mid = time.perf_counter()
                        conn.close()
                        anchor.append(wall)
                        anchor_cpu.append(cpu)
                        anchor_close.append((time.perf_counter() - mid) * 1000)
            run_cpu = (time.process_time() - run_cpu) * 1000 / users
        p50, a50 = statistics.median(ours), statistics.median(anchor)
        with_close = (statistics.median([a + b for a, b in zip(ours, ours_close)])
                      / statistics.median([a + b for a, b in zip(anchor, anchor_close)]))
        ratios[variant].append(p50 / a50)
        print(f"run {rep + 1} ({variant}): agentlab p50 {p50:6.2f} ms (cpu {statistics.median(ours_cpu):5.2f})  "
              f"p95 {_pct(ours, 0.95):6.2f} ms  total {sum(ours) / 1000:6.1f} s  "
              f"(+ close p50 {statistics.median(ours_close):5.2f} ms)   |   sqlite3+FTS5 p50 {a50:5.2f} ms "
              f"(cpu {statistics.median(anchor_cpu):4.2f})  p95 {_pct(anchor, 0.95):5.2f} ms  "
              f"total {sum(anchor) / 1000:5.1f} s  (+ close p50 {statistics.median(anchor_close):4.2f} ms)   "
              f"ratio p50 {p50 / a50:4.2f}, with close {with_close:4.2f}; process CPU a user, both sides with "
              f"closes and background threads: {run_cpu:5.2f} ms", flush=True)
    if instances is not None:
        instances.SPARES = default_spares
    for variant, values in ratios.items():
        if values:
            print(f"ratio p50 over {variant} runs: {min(values):.2f}-{max(values):.2f} "
                  f"{'OK' if max(values) <= 3 else 'OVER'} (target <= 3x)")


# --- many -------------------------------------------------------------------------------------------------------

SEEDS = 64  # distinct agents built through the API; the corpus copies them


def build_corpus(folder: Path, count: int) -> None:
    """``count`` agents and their SQLite twins, built fast: :data:`SEEDS` agents are built through the public API
    (20-50 messages in their first session, state set once, closed) with their twins, then agent ``u`` is a copy
    of seed ``u % SEEDS`` whose ``agent_meta`` name is rewritten (one DuckDB connection ATTACHes each copy, updates
    the row and DETACHes it, which checkpoints: the copy has no log and is one 16 KiB block larger than its
    seed); the SQLite twin is a plain copy (it holds no name). Files already there are kept."""
    import duckdb
    from tqdm.auto import tqdm

    from agentlab import get_agent
    from agentlab.session._manager import SessionManager
    from agentlab.store._naming import agent_path

    cls = _agent_class()
    seeds, anchor_seeds = folder / "seeds", folder / "seeds-sqlite"
    anchor_seeds.mkdir(parents=True, exist_ok=True)
    texts, rng = Texts(3), random.Random(5)
    seed_paths = []
    for k in range(SEEDS):
        messages = [texts.message(i) for i in range(rng.randint(20, 50))]
        path, lite = agent_path(cls.__name__, f"seed-{k}", seeds), anchor_seeds / f"seed-{k}.sqlite"
        seed_paths.append(path)
        if path.exists() and lite.exists():
            continue
        agent = get_agent(cls, f"seed-{k}", root=seeds)
        manager = SessionManager(agent)
        manager.session(manager.create("first chat").id).append_messages(messages)
        agent.state  # noqa: B018
        agent.close()
        lite.unlink(missing_ok=True)
        conn = _anchor_bare(lite)
        anchor_set_state(conn, {"visits": 0, "plan": "free"})
        conn.execute("BEGIN")
        for message in messages:
            text = " ".join(p["text"] for p in message["parts"])
            conn.execute("INSERT INTO assistant_messages (id, session_id, role, content) VALUES (?, ?, ?, ?)",
                         [message["id"], "s1", message["role"], json.dumps(message)])
            conn.execute("INSERT INTO assistant_fts (id, session_id, role, content) VALUES (?, ?, ?, ?)",
                         [message["id"], "s1", message["role"], text])
        conn.execute("COMMIT")
        conn.close()
    (folder / "sqlite").mkdir(parents=True, exist_ok=True)
    rename = duckdb.connect()
    for u in tqdm(range(count), desc="copying agents", mininterval=5):
        target = agent_path(cls.__name__, f"user-{u}", folder / "agentlab")
        lite = folder / "sqlite" / f"user-{u}.sqlite"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            work = target.with_name(target.name + ".copying")
            shutil.copyfile(seed_paths[u % SEEDS], work)
            rename.execute(f"ATTACH '{work}' AS copy")
            rename.execute("UPDATE copy.agent_meta SET value = ? WHERE key = 'name'", [f"user-{u}"])
            rename.execute("DETACH copy")
            os.replace(work, target)
        if not lite.exists():
            shutil.copyfile(anchor_seeds / f"seed-{u % SEEDS}.sqlite", lite)
    rename.close()


_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
side, listing = sys.argv[1], sys.argv[2]
paths = open(listing).read().split("\n")
import agentlab, pandas, pyarrow, sqlite3  # imports are not part of the figure (the query returns pandas)
if side == "ours" and {workers!r}:
    import agentlab.frames._multi as multi
    multi.WORKERS = int({workers!r})
start, cpu = time.perf_counter(), time.process_time()
if side == "ours":
    try:
        many = agentlab.open_many(paths, progress=False)
    except TypeError:  # before open_many had a progress bar
        many = agentlab.open_many(paths)
    with many:
        rows = len(many.sql({aggregate!r}))
else:
    out = []
    for path in paths:
        conn = sqlite3.connect("file:" + path + "?mode=ro", uri=True)
        agent = path.rsplit("/", 1)[-1]
        out.extend((agent, *r) for r in conn.execute({anchor!r}))
        conn.close()
    rows = len(out)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({{"seconds": elapsed, "cpu": cpu, "rows": rows,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def _run_child(side: str, paths: list[Path], scratch: Path, workers: str = "") -> dict:
    listing = scratch / f"{side}-{len(paths)}.txt"
    listing.write_text("\n".join(str(p) for p in paths))
    code = _CHILD.format(root=str(ROOT), aggregate=AGGREGATE, anchor=ANCHOR_AGGREGATE, workers=workers)
    out = subprocess.run([sys.executable, "-c", code, side, str(listing)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_many(sizes: list[int], repeats: int, corpus: Path | None, workers: str = "") -> None:
    print(f"\n## open_many + one aggregate over {', '.join(f'{n:,}' for n in sizes)} files "
          f"(fresh process each, {repeats} runs, sides alternated{', workers ' + workers if workers else ''})")
    folder = corpus or Path(tempfile.mkdtemp(prefix="small-many-"))
    try:
        start = time.perf_counter()
        build_corpus(folder, max(sizes))
        print(f"corpus ready in {time.perf_counter() - start:.0f} s: "
              f"{sum(_size(p) for p in (folder / 'agentlab').rglob('*.duckdb')) / 2**20:,.0f} MB agentlab, "
              f"{sum(_size(p) for p in (folder / 'sqlite').glob('*.sqlite')) / 2**20:,.0f} MB sqlite3")
        from agentlab import get_agent  # noqa: F401
        from agentlab.store._naming import agent_path

        ours_all = [agent_path("SmallAgent", f"user-{u}", folder / "agentlab") for u in range(max(sizes))]
        anchor_all = [folder / "sqlite" / f"user-{u}.sqlite" for u in range(max(sizes))]
        per_file: dict[int, list[float]] = {}
        cpu_per_file: dict[int, list[float]] = {}
        for n in sizes:
            results: dict[str, list[dict]] = {"ours": [], "anchor": []}
            for rep in range(repeats):
                for side in (["ours", "anchor"] if rep % 2 == 0 else ["anchor", "ours"]):
                    results[side].append(_run_child(side, (ours_all if side == "ours" else anchor_all)[:n], folder,
                                                    workers))
            ours_s = [r["seconds"] for r in results["ours"]]
            anchor_s = [r["seconds"] for r in results["anchor"]]
            ours_mb = max(r["rss_mb"] for r in results["ours"])
            per_file[n] = [s / n * 1000 for s in ours_s]
            cpu_per_file[n] = [r["cpu"] / n * 1000 for r in results["ours"]]
            ratios = [o / a for o, a in zip(ours_s, anchor_s)]
            verdict = ""
            if n == 5000:
                ok = max(ours_s) <= 10 and ours_mb <= 2048
                verdict = f"   {'OK' if ok else 'OVER'} (target 5,000 files <= 10 s, <= 2 GB)"
            print(f"{n:>6,} files: agentlab {min(ours_s):6.2f}-{max(ours_s):6.2f} s "
                  f"({statistics.median(ours_s) / n * 1000:5.2f} ms/file, cpu "
                  f"{statistics.median(r['cpu'] for r in results['ours']) / n * 1000:5.2f}), peak {ours_mb:6,.0f} MB"
                  f"   |   sqlite3 loop {min(anchor_s):6.2f}-{max(anchor_s):6.2f} s (cpu "
                  f"{statistics.median(r['cpu'] for r in results['anchor']) / n * 1000:4.2f} ms/file), peak "
                  f"{max(r['rss_mb'] for r in results['anchor']):4,.0f} MB   "
                  f"ratio {min(ratios):4.2f}-{max(ratios):4.2f}"
                  f"   rows {results['ours'][0]['rows']:,}/{results['anchor'][0]['rows']:,}{verdict}")
        for label, figures in (("wall", per_file), ("cpu", cpu_per_file)):
            medians = {n: statistics.median(v) for n, v in figures.items()}
            spread = max(medians.values()) / min(medians.values())
            print(f"{label} time per file (median of runs) from {min(sizes):,} to {max(sizes):,} files: "
                  + ", ".join(f"{n:,}: {m:.2f}" for n, m in medians.items())
                  + f" ms; spread {spread:.2f}x {'OK' if spread <= 1.25 else 'OVER'} (target <= 1.25x)")
    finally:
        if corpus is None:
            shutil.rmtree(folder, ignore_errors=True)


# --- block sizes ------------------------------------------------------------------------------------------------

def _sized_class(block_size: int):
    from agentlab import Agent

    return type(f"Blocks{block_size // 1024}", (Agent,), {"initial_state": {"visits": 0, "plan": "free"},
                                                          "block_size": block_size})


def bench_blocks(block_sizes: list[int], repeats: int, bulk: int) -> None:
    """The block size's trade-off: a small agent's file against a bulk import's speed, each size in turn."""
    from session_bench import BATCH, make_messages  # the big-session bench's 12-word Zipf messages

    from agentlab.session._manager import SessionManager
    from agentlab.session._session import Session

    print(f"\n## block sizes {', '.join(f'{b // 1024} KiB' for b in block_sizes)}: a 20- and a 500-message agent's "
          f"file; a bulk import of {bulk:,} messages (batches of {BATCH:,}) into a new agent, then closing it")
    texts = Texts(1)
    small = [texts.message(i) for i in range(500)]
    messages, parents, _ = make_messages(bulk, min(bulk, 10_000))
    for message, parent in zip(messages, parents):
        message["parent_id"] = parent
    rows: dict[int, list[tuple[float, ...]]] = {b: [] for b in block_sizes}
    for rep in range(repeats):
        with tempfile.TemporaryDirectory(prefix="small-blocks-") as tmp:
            root = Path(tmp)
            for size in (block_sizes if rep % 2 == 0 else block_sizes[::-1]):
                from agentlab import get_agent

                cls = _sized_class(size)
                files_kb = []
                for n in (20, 500):
                    agent = get_agent(cls, f"small-{n}-{rep}", root=root)
                    manager = SessionManager(agent)
                    session = manager.session(manager.create("first chat").id)
                    agent.state  # noqa: B018
                    for message in small[:n]:
                        session.append_message(message)
                    path = agent.path
                    agent.close()
                    files_kb.append(_size(path, ".wal") / 1024)
                agent = get_agent(cls, f"bulk-{rep}", root=root)
                session = Session(agent)
                wall, cpu = time.perf_counter(), time.process_time()
                for i in range(0, len(messages), BATCH):
                    session.append_messages(messages[i:i + BATCH])
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                close_wall, close_cpu = time.perf_counter(), time.process_time()
                path = agent.path
                agent.close()
                close_wall, close_cpu = time.perf_counter() - close_wall, time.process_time() - close_cpu
                row = (files_kb[0], files_kb[1], bulk / wall, bulk / cpu, close_wall, close_cpu, _size(path) / 2**20)
                rows[size].append(row)
                print(f"run {rep + 1}, {size // 1024:3d} KiB: 20 messages {row[0]:6.0f} KB, 500 {row[1]:6.0f} KB; "
                      f"import {row[2]:8,.0f} msg/s wall, {row[3]:8,.0f} msg/s cpu; close {row[4]:.2f} s wall "
                      f"({row[5]:.2f} cpu); file {row[6]:.0f} MB", flush=True)
    print("block size | 20-message file | 500-message file | import msg/s wall | import msg/s cpu | close cpu s")
    for size, values in rows.items():
        column = list(zip(*values))
        print(f"{size // 1024:3d} KiB | {statistics.median(column[0]):.0f} KB | "
              f"{statistics.median(column[1]):.0f} KB | {min(column[2]):,.0f}-{max(column[2]):,.0f} | "
              f"{min(column[3]):,.0f}-{max(column[3]):,.0f} | {min(column[5]):.2f}-{max(column[5]):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="size,create,many")
    parser.add_argument("--sizes", default="0,20,50,500")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--files", default="500,1000,2000,5000,10000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--create-repeats", type=int, default=2)
    parser.add_argument("--corpus", type=Path, default=None, help="keep the open_many corpus here between runs")
    parser.add_argument("--create-variants", default="spares,own",
                        help="spares (new agents open in DuckDB instances started ahead) and/or own")
    parser.add_argument("--block-sizes", default="16384,32768,65536,262144")
    parser.add_argument("--bulk", type=int, default=100_000, help="messages of the bulk import in --parts blocks")
    parser.add_argument("--workers", default="", help="open_many's WORKERS (default: the package's)")
    args = parser.parse_args()
    parts = args.parts.split(",")
    load, speed = os.getloadavg()[0], machine_check()
    print(f"load average {load:.1f} on {os.cpu_count()} cores; machine check {speed:.0f} ms (fast ~120, slow ~200)")
    if "size" in parts:
        bench_size([int(x) for x in args.sizes.split(",")])
    if "create" in parts:
        bench_create(args.users, args.create_repeats, args.create_variants.split(","))
    if "many" in parts:
        bench_many([int(x) for x in args.files.split(",")], args.repeats, args.corpus, args.workers)
    if "blocks" in parts:
        bench_blocks([int(x) for x in args.block_sizes.split(",")], args.repeats, args.bulk)
    print(f"\nload average {os.getloadavg()[0]:.1f}; machine check {machine_check():.0f} ms")


if __name__ == "__main__":
    main()
