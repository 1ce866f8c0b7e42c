"""One big session at 10k-1M messages, against sqlite3 + FTS5 (upstream's design) on the same data, same run.

Data (``_scale_corpus.py``): one session, a conversation in which each message answers the previous one and 2 %
are regenerated replies; 20-200 words per message drawn with Zipf weights from 300,000 made-up words; fixed seed.

The anchor is Python's sqlite3 with upstream's schema: ``assistant_messages`` (id primary key, indexes on
parent_id and session_id) and ``assistant_fts`` (FTS5, ``tokenize='porter unicode61'``), WAL mode and
``synchronous=FULL`` (every commit durable, as DuckDB's is). Both sides do the same work:

* **bulk import**: the corpus in batches of 10,000 (``Session.append_messages`` / one transaction of
  ``executemany`` into both tables), the JSON encoding included on both sides, text generation excluded (every
  batch is made before either clock starts). One clock runs from the first batch until the file is closed: the
  anchor's figure includes building its FTS index, ours building and writing our search index, including the
  work its builder thread does while the next batch is written.
* **cold open + first history + first search**: a fresh process (interpreter start and library imports
  excluded: numpy, pyarrow with its compute module, duckdb; agentlab's own modules are imported before the clock
  too, but the ones it imports lazily on first use count) opens the file, reads the latest branch, cut at the same depth on both sides (upstream's CTE cap,
  10,000; ours ``Session(max_depth=10_000)``), every message parsed from JSON, and runs one phrase search (the
  mode of upstream's ``Session.search``), top 20 of the session. The anchor finds the latest leaf with
  upstream's query and walks upstream's recursive CTE. Memory is that process's resident set right after
  (``VmRSS``, with its anonymous and file-backed parts, and the peak ``VmHWM``).
* **queries** (one process opening both, the two sides alternating query by query, p50 over every run of every
  query; the hits' ids are compared): ``rare`` = one word found in 15-40 messages (``all``); ``rare+frequent``
  = that word and one of the 100 most frequent (``all``); ``frequent any`` / ``frequent all`` = two of the 50 most
  frequent; ``phrase`` = two words among ranks 5-200, adjacent. Ours is ``Session.search(q, mode=..., limit=20)``,
  which also reads each hit's message, makes a snippet and says whether it is on the current branch; the
  anchor is the FTS5 query upstream runs for that mode (``"w1 w2"``; ``"w1" "w2"``; ``"w1" OR "w2"``) with
  ``AND session_id = ? ORDER BY rank LIMIT 20``, returning id, role and content.
* **get_branches**, first call after opening (the children of a regenerated reply's parent) against the
  anchor's indexed query; **durable single append** next to DuckDB's own one-row INSERT into a table of the
  same columns in its own file, alternating in one loop (and the anchor's append for reference).

Run: ``.venv/bin/python benchmarks/scale_bench.py [--sizes 10000,100000,1000000] [--repeats 2] [--block-size 262144]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from _scale_corpus import Corpus, message_id, stored_json  # noqa: E402
from _timing import machine_check  # noqa: E402
from _upstream import SQLITE_SCHEMA  # noqa: E402

DEPTH = 10_000
LIMIT = 20
QUERIES_PER_KIND = 12
RUNS_PER_QUERY = 3

# Upstream's latest-leaf query and history CTE (its cap: depth < 10000).
SQLITE_LATEST = """
SELECT m.id FROM assistant_messages m
LEFT JOIN assistant_messages c ON c.parent_id = m.id AND c.session_id = ?
WHERE c.id IS NULL AND m.session_id = ? ORDER BY m.created_at DESC, m.rowid DESC LIMIT 1
"""
SQLITE_PATH = f"""
WITH RECURSIVE path(id, parent_id, content, depth) AS (
  SELECT id, parent_id, content, 0 FROM assistant_messages WHERE id = ? AND session_id = ?
  UNION ALL
  SELECT m.id, m.parent_id, m.content, p.depth + 1 FROM assistant_messages m JOIN path p ON m.id = p.parent_id
  WHERE m.session_id = ? AND p.depth < {DEPTH - 1}
)
SELECT content FROM path ORDER BY depth DESC
"""
SQLITE_SEARCH = """
SELECT id, role, content FROM assistant_fts WHERE assistant_fts MATCH ? AND session_id = ? ORDER BY rank LIMIT ?
"""
SQLITE_BRANCHES = """
SELECT content FROM assistant_messages WHERE parent_id = ? AND session_id = ? ORDER BY created_at, rowid
"""


def fts5_query(words: list[str], mode: str) -> str:
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    if mode == "phrase":
        return '"' + " ".join(words).replace('"', '""') + '"'
    return (" OR " if mode == "any" else " ").join(quoted)


def sqlite_open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


# --- imports ----------------------------------------------------------------------------------------------


def import_anchor(path: Path, chunks: list[list[dict]]) -> float:
    conn = sqlite_open(path)
    conn.executescript(SQLITE_SCHEMA)
    t0 = time.perf_counter()
    for messages in chunks:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO assistant_messages (id, session_id, parent_id, role, content) VALUES (?, '', ?, ?, ?)",
            [(m["id"], m["parent_id"], m["role"], stored_json(m)) for m in messages])
        conn.executemany("INSERT INTO assistant_fts (id, session_id, role, content) VALUES (?, '', ?, ?)",
                         [(m["id"], m["role"], m["parts"][0]["text"]) for m in messages])
        conn.execute("COMMIT")
    conn.execute("ANALYZE")  # without statistics SQLite plans upstream's latest-leaf query quadratically
    conn.close()
    return time.perf_counter() - t0


def import_ours(home: Path, chunks: list[list[dict]], block_size: int | None = None) -> float:
    from agentlab.agent._agent import Agent, get_agent
    from agentlab.session._session import Session

    class BenchAgent(Agent):
        pass

    if block_size is not None:  # the file's DuckDB block size, fixed when it is created
        BenchAgent.block_size = block_size

    agent = get_agent(BenchAgent, "bench", root=home)
    session = Session(agent)
    # One clock from the first batch to the end of close(): the search index builds batches on a thread of its
    # own while the next batch is written, and close() waits for that work, so all of it is inside the figure.
    t0 = time.perf_counter()
    for messages in chunks:
        session.append_messages(messages)
    agent.close()
    return time.perf_counter() - t0


# --- child processes --------------------------------------------------------------------------------------

_MEMORY = """
def memory():
    fields = dict()
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields
"""

COLD_OURS = _MEMORY + """
import sys, time, json, warnings
sys.path.insert(0, {root!r})
import numpy, pyarrow, pyarrow.compute, duckdb  # library imports are not part of the figure
import agentlab
from agentlab.agent._agent import Agent, get_agent
from agentlab.session._session import Session
class BenchAgent(Agent):
    pass
t0 = time.perf_counter()
agent = get_agent(BenchAgent, "bench", root={home!r})
session = Session(agent, max_depth={depth}, **{session_options!r})
history = session.get_history()
t1 = time.perf_counter()
hits = session.search({query!r}, mode="phrase", limit={limit})
t2 = time.perf_counter()
mem = memory()
t3 = time.perf_counter()
branches = session.get_branches({branch_parent!r})
t4 = time.perf_counter()
print(json.dumps({{"open_history": t1 - t0, "search": t2 - t1, "total": t2 - t0, "branches": t4 - t3,
                  "n_branches": len(branches), "messages": len(history), "hits": [h.id for h in hits],
                  "memory": mem}}))
agent.close()
"""

COLD_ANCHOR = _MEMORY + """
import json, sqlite3, time
t0 = time.perf_counter()
conn = sqlite3.connect({path!r})
leaf = conn.execute({latest!r}, ["", ""]).fetchone()[0]
history = [json.loads(r[0]) for r in conn.execute({path_query!r}, [leaf, "", ""])]
t1 = time.perf_counter()
hits = conn.execute({search!r}, [{fts_query!r}, "", {limit}]).fetchall()
t2 = time.perf_counter()
mem = memory()
t3 = time.perf_counter()
branches = [json.loads(r[0]) for r in conn.execute({branches_query!r}, [{branch_parent!r}, ""])]
t4 = time.perf_counter()
print(json.dumps({{"open_history": t1 - t0, "search": t2 - t1, "total": t2 - t0, "branches": t4 - t3,
                  "n_branches": len(branches), "messages": len(history), "hits": [h[0] for h in hits],
                  "memory": mem}}))
"""

QUERIES = """
import sys, time, json, sqlite3, statistics
from datetime import datetime
sys.path.insert(0, {root!r})
import duckdb
from agentlab.agent._agent import Agent, get_agent
from agentlab.session._session import Session
class BenchAgent(Agent):
    pass
agent = get_agent(BenchAgent, "bench", root={home!r})
session = Session(agent, max_depth={depth}, **{session_options!r})
lite = sqlite3.connect({path!r}, isolation_level=None)
lite.execute("PRAGMA synchronous=FULL")
kinds = {kinds!r}
out = {{}}
from agentlab.session._messages import message_text, parse_rows
def ours(words, mode):
    return [h.id for h in session.search(" ".join(words), mode=mode, limit={limit})]
def ours_index(words, mode):  # upstream's work: the ranked ids with each message's role and text
    hits = session.tree.fts.search(" ".join(words), mode=mode, limit={limit}, groups=[""])
    return [(m["id"], m["role"], message_text(m)) for m in parse_rows([h.content for h in hits])]
def anchor(words, mode, query):
    return [r[0] for r in lite.execute({search!r}, [query, "", {limit}]).fetchall()]
ours(["warm"], "any"); anchor(["warm"], "any", '"warm"')
for kind, (mode, queries, fts_queries) in kinds.items():
    mine, index, theirs, differ, hits = [], [], [], 0, []
    for q, words in enumerate(queries):
        for run in range({runs}):
            sides = [0, 2, 1] if (q + run) % 2 == 0 else [1, 2, 0]
            for side in sides:
                t0 = time.perf_counter()
                if side == 0:
                    got = ours(words, mode)
                elif side == 2:
                    ours_index(words, mode)
                else:
                    want = anchor(words, mode, fts_queries[q])
                [mine, theirs, index][side].append(time.perf_counter() - t0)
        differ += got != want
        hits.append(len(want))
    out[kind] = {{"ours": mine, "index": index, "anchor": theirs, "differ": differ, "hits": hits}}
# durable single appends under the tip, next to DuckDB's own one-row INSERT and the anchor's append
floor = duckdb.connect({floor!r})
floor.execute("CREATE TABLE a (seq BIGINT NOT NULL, id VARCHAR NOT NULL, session_id VARCHAR NOT NULL, "
              "parent_id VARCHAR, role VARCHAR NOT NULL, content VARCHAR NOT NULL, "
              "created_at TIMESTAMPTZ NOT NULL, search_tokens VARCHAR, search_seq BIGINT)")
tip = session.latest_leaf_id()
lite_tip = tip
mine, bare, theirs = [], [], []
for i in range({appends}):
    text = "appended note number %d about the weather" % i
    message = {{"id": "app-%d" % i, "role": "user", "parts": [{{"type": "text", "text": text}}],
               "created_at": "2026-11-02T12:00:00.000Z"}}
    content = json.dumps(message, separators=(",", ":"))
    order = (0, 1, 2) if i % 2 == 0 else (2, 1, 0)
    for side in order:
        t0 = time.perf_counter()
        if side == 0:
            session.append_message(message)
        elif side == 1:
            floor.execute("INSERT INTO a VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          [i, message["id"], "", tip, "user", content, datetime(2026, 11, 2, 12), text, i]).fetchall()
        else:
            lite.execute("BEGIN")
            lite.execute("INSERT INTO assistant_messages (id, session_id, parent_id, role, content) "
                         "VALUES (?, '', ?, 'user', ?)", [message["id"], lite_tip, content])
            lite.execute("INSERT INTO assistant_fts (id, session_id, role, content) VALUES (?, '', 'user', ?)",
                         [message["id"], text])
            lite.execute("COMMIT")
        [mine, bare, theirs][side].append(time.perf_counter() - t0)
    tip = lite_tip = message["id"]
out["append"] = {{"ours": mine, "floor": bare, "anchor": theirs}}
print(json.dumps(out))
agent.close()
"""


def run_child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- query selection --------------------------------------------------------------------------------------


def pick_queries(corpus: Corpus, rng: np.random.Generator) -> dict[str, tuple[str, list[list[str]]]]:
    """Query words by the document counts of their stems in this corpus (fixed seed)."""
    counts = corpus.stem_counts()
    stems = corpus.stem_ids
    vocabulary = corpus.vocabulary
    first_word: dict[int, int] = {}
    for rank, stem in enumerate(stems.tolist()):  # vocabulary order is Zipf rank order
        first_word.setdefault(stem, rank)
    rare_stems = np.flatnonzero((counts >= 15) & (counts <= 40))
    rare = [vocabulary[first_word[s]] for s in rng.choice(rare_stems, size=QUERIES_PER_KIND, replace=False)]

    def by_rank(lo: int, hi: int, k: int) -> list[str]:
        return [vocabulary[i] for i in rng.choice(np.arange(lo, hi), size=k, replace=False)]

    frequent = by_rank(0, 100, QUERIES_PER_KIND)
    top = [by_rank(0, 50, 2) for _ in range(QUERIES_PER_KIND)]
    phrases = [by_rank(5, 200, 2) for _ in range(QUERIES_PER_KIND)]
    return {
        "rare": ("all", [[w] for w in rare]),
        "rare+frequent": ("all", [[w, f] for w, f in zip(rare, frequent)]),
        "frequent any": ("any", top),
        "frequent all": ("all", top),
        "phrase": ("phrase", phrases),
    }


# --- the run ----------------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run_size(n: int, repeats: int, base: Path, session_options: dict, block_size: int | None = None) -> list[dict]:
    corpus = Corpus(n)
    rng = np.random.default_rng(5)
    kinds = pick_queries(corpus, rng)
    parents = corpus.parents()
    regenerated = np.flatnonzero(parents[1:] == parents[:-1]) + 1
    branch_parent = message_id(int(parents[regenerated[len(regenerated) // 2]]))
    first_query = " ".join(kinds["phrase"][1][0])
    fts_kinds = {k: (mode, qs, [fts5_query(q, mode) for q in qs]) for k, (mode, qs) in kinds.items()}
    results = []
    for repeat in range(repeats):
        folder = base / f"{n}-{repeat}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        home, lite_path = folder / "agents", folder / "anchor.sqlite"
        record: dict = {"n": n, "repeat": repeat, "load": os.getloadavg()[0], "machine_ms": machine_check()}
        order = ["anchor", "ours"] if repeat % 2 == 0 else ["ours", "anchor"]
        # Both sides take the same messages, made before either clock starts (1M messages: about 1.6 GB).
        chunks = [chunk.messages() for chunk in corpus.chunks()]
        for side in order:
            if side == "anchor":
                record["import_anchor"] = import_anchor(lite_path, chunks)
            else:
                record["import_ours"] = import_ours(home, chunks, block_size)
        del chunks
        cold_ours = COLD_OURS.format(root=str(ROOT), home=str(home), depth=DEPTH, query=first_query, limit=LIMIT,
                                     branch_parent=branch_parent, session_options=session_options)
        cold_anchor = COLD_ANCHOR.format(path=str(lite_path), latest=SQLITE_LATEST, path_query=SQLITE_PATH,
                                         search=SQLITE_SEARCH, fts_query=fts5_query(first_query.split(), "phrase"),
                                         limit=LIMIT, branches_query=SQLITE_BRANCHES, branch_parent=branch_parent)
        for side in order:
            record[f"cold_{side}"] = run_child(cold_ours if side == "ours" else cold_anchor)
        record["cold_same_hits"] = record["cold_ours"]["hits"] == record["cold_anchor"]["hits"]
        record["queries"] = run_child(QUERIES.format(
            root=str(ROOT), home=str(home), path=str(lite_path), depth=DEPTH, kinds=fts_kinds, search=SQLITE_SEARCH,
            limit=LIMIT, runs=RUNS_PER_QUERY, floor=str(folder / "floor.duckdb"), appends=200,
            session_options=session_options))
        record["machine_ms_after"] = machine_check()
        record["load_after"] = os.getloadavg()[0]
        record["bytes_ours"] = sum(f.stat().st_size for f in home.rglob("*") if f.is_file())
        record["bytes_anchor"] = sum(f.stat().st_size for f in folder.glob("anchor.sqlite*"))
        results.append(record)
        report(record)
        shutil.rmtree(folder, ignore_errors=True)
    return results


def report(r: dict) -> None:
    co, ca = r["cold_ours"], r["cold_anchor"]
    print(f"\n== {r['n']:,} messages, repeat {r['repeat'] + 1}: load {r['load']:.1f} -> {r['load_after']:.1f}, "
          f"machine check {r['machine_ms']:.0f} -> {r['machine_ms_after']:.0f} ms; files "
          f"{r['bytes_ours'] / 1e6:,.0f} MB (ours) / {r['bytes_anchor'] / 1e6:,.0f} MB (anchor)", flush=True)
    print(f"{'figure':44} {'agentlab':>12} {'sqlite+FTS5':>12} {'ratio':>7}")
    rate_o, rate_a = r["n"] / r["import_ours"], r["n"] / r["import_anchor"]
    print(f"{'bulk import (msg/s; ratio ours/anchor)':44} {rate_o:12,.0f} {rate_a:12,.0f} {rate_o / rate_a:7.2f}")
    print(f"{'cold open + history + search (s)':44} {co['total']:12.3f} {ca['total']:12.3f} "
          f"{co['total'] / ca['total']:7.2f}")
    print(f"{'  of which open + history (s)':44} {co['open_history']:12.3f} {ca['open_history']:12.3f}")
    print(f"{'  of which first search (s)':44} {co['search']:12.3f} {ca['search']:12.3f}")
    mo, ma = co["memory"], ca["memory"]
    print(f"{'memory after it: VmRSS (MB)':44} {mo['VmRSS']:12.0f} {ma['VmRSS']:12.0f} "
          f"{mo['VmRSS'] / ma['VmRSS']:7.2f}")
    print(f"{'  anonymous / file-backed / peak (MB)':44} {mo['RssAnon']:4.0f}/{mo['RssFile']:3.0f}/{mo['VmHWM']:4.0f}"
          f" {ma['RssAnon']:4.0f}/{ma['RssFile']:3.0f}/{ma['VmHWM']:4.0f}")
    print(f"{'get_branches first call (ms)':44} {co['branches'] * 1e3:12.2f} {ca['branches'] * 1e3:12.2f} "
          f"{co['branches'] / ca['branches']:7.2f}")
    print(f"history rows {co['messages']} / {ca['messages']}; first search same hits: {r['cold_same_hits']}")
    for kind, q in r["queries"].items():
        if kind == "append":
            continue
        o, i, a = median(q["ours"]) * 1e3, median(q["index"]) * 1e3, median(q["anchor"]) * 1e3
        print(f"{kind + ' p50 (ms)':44} {o:12.3f} {a:12.3f} {o / a:7.2f}   hits {min(q['hits'])}-{max(q['hits'])},"
              f" differing top-{LIMIT}: {q['differ']}")
        print(f"{'  same work as upstream (ids, roles, texts)':44} {i:12.3f} {a:12.3f} {i / a:7.2f}")
    ap = r["queries"]["append"]
    o, f, a = (median(ap[k]) * 1e3 for k in ("ours", "floor", "anchor"))
    print(f"{'durable append p50 (ms; ratio to DuckDB floor)':44} {o:12.3f} {a:12.3f} {o / f:7.2f}   floor {f:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "agentlab-scale-bench")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    parser.add_argument("--session-options", default="{}", help="JSON keyword arguments for Session (both children)")
    parser.add_argument("--block-size", type=int, default=None,
                        help="DuckDB block size of our file (Agent.block_size; default: the class default, 16 KiB)")
    args = parser.parse_args()
    results = []
    for n in (int(s) for s in args.sizes.split(",")):
        results += run_size(n, args.repeats, args.dir, json.loads(args.session_options), args.block_size)
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=1))
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
