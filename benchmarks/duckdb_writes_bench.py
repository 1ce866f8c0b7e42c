"""DuckDB alone: what a bulk import of chat messages costs to write, by block size, string compression and
checkpoint threshold. The evidence behind migration m090 (ZSTD for message texts and tokens) and the store's
``checkpoint_threshold`` (agentlab/store/_files.py), with no agentlab code in the timed loop.

Data: ``_scale_corpus.py``'s messages (20-200 Zipf words each), as agentlab stores them: the JSON and the FTS5
tokens (``token_strings``), written in batches of 10,000 into a table of the four columns that matter (seq, id,
content, tokens), one transaction a batch, then a final CHECKPOINT and close. The figure is the whole time, and
the file's size after it. Variants run in turn, repeated, so that drifts of the machine's speed touch them all.

* ``compression``: 30,000 messages (default ``--compression-messages``), 16 KiB and 256 KiB blocks, the text
  columns with DuckDB's own choice (``dict_fsst`` for this data) or ``USING COMPRESSION zstd`` / ``uncompressed``.
* ``threshold``: 300,000 messages (``--threshold-messages``), 16 KiB blocks, ZSTD, with DuckDB's default
  ``checkpoint_threshold`` (16 MB of log) and with 256 MB and 1 GB; prints each batch's commit time too, so the
  checkpoints that rewrite the growing table show.

Run: ``.venv/bin/python benchmarks/duckdb_writes_bench.py [--parts compression,threshold] [--repeats 2]``
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _scale_corpus import Corpus, stored_json
from _timing import machine_check


def batches(n: int) -> list:
    import numpy as np
    import pyarrow as pa

    from agentlab.search._postings import arrow_ints, arrow_strings
    from agentlab.search._tokenizer import token_strings

    out = []
    for chunk in Corpus(n).chunks():
        messages = chunk.messages()
        out.append(pa.table({
            "seq": arrow_ints(np.arange(chunk.start, chunk.start + len(messages), dtype=np.int64)),
            "id": arrow_strings([m["id"] for m in messages]),
            "content": arrow_strings([stored_json(m) for m in messages]),
            "tokens": arrow_strings(token_strings([m["parts"][0]["text"] for m in messages])),
        }))
    return out


def write(folder: Path, data: list, block_size: int, compression: str | None,
          threshold: str | None) -> tuple[float, int, list[float], list[str]]:
    """(seconds, file bytes, each batch's seconds, the compressions DuckDB used for the text columns)."""
    import duckdb

    path = folder / "bench.duckdb"
    conn = duckdb.connect(str(path), config={"default_block_size": str(block_size)})
    if threshold is not None:
        conn.execute(f"SET checkpoint_threshold = '{threshold}'")
    using = f" USING COMPRESSION {compression}" if compression else ""
    conn.execute(f"CREATE TABLE m (seq BIGINT, id VARCHAR, content VARCHAR{using}, tokens VARCHAR{using})")
    per_batch = []
    start = time.perf_counter()
    for table in data:
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        conn.register("batch", table)
        conn.execute("INSERT INTO m SELECT seq, id, content, tokens FROM batch")
        conn.execute("COMMIT")
        conn.unregister("batch")
        per_batch.append(time.perf_counter() - t0)
    conn.execute("CHECKPOINT")
    conn.close()
    spent = time.perf_counter() - start
    size = path.stat().st_size
    check = duckdb.connect(str(path), read_only=True)
    used = [r[0] for r in check.execute(
        "SELECT DISTINCT compression FROM pragma_storage_info('m') WHERE column_name IN ('content', 'tokens') "
        "AND segment_type = 'VARCHAR' ORDER BY 1").fetchall()]
    check.close()
    path.unlink()
    return spent, size, per_batch, used


def bench_compression(n: int, repeats: int, base: Path) -> None:
    print(f"\n## {n:,} messages in batches of 10,000: block size x compression of the text columns")
    data = batches(n)
    variants = [(b, c) for b in (16_384, 262_144) for c in (None, "zstd", "uncompressed")]
    results: dict[tuple, list] = {v: [] for v in variants}
    for repeat in range(repeats):
        for variant in variants if repeat % 2 == 0 else variants[::-1]:
            results[variant].append(write(base, data, variant[0], variant[1], None))
    print(f"{'blocks':>8} {'compression':>13} {'used':>14} {'seconds':>15} {'file MB':>8}")
    for (block, compression), runs in results.items():
        times = sorted(r[0] for r in runs)
        print(f"{block:>8,} {compression or 'DuckDB picks':>13} {','.join(runs[0][3]):>14} "
              f"{times[0]:6.2f}-{times[-1]:<6.2f}   {runs[0][1] / 1e6:8.0f}")


def bench_threshold(n: int, repeats: int, base: Path) -> None:
    print(f"\n## {n:,} messages in batches of 10,000, 16 KiB blocks, ZSTD: checkpoint_threshold")
    data = batches(n)
    variants = [None, "256MB", "1GB"]
    results: dict[str | None, list] = {v: [] for v in variants}
    for repeat in range(repeats):
        for variant in variants if repeat % 2 == 0 else variants[::-1]:
            results[variant].append(write(base, data, 16_384, "zstd", variant))
    for threshold, runs in results.items():
        times = sorted(r[0] for r in runs)
        slowest = max(runs, key=lambda r: r[0])
        print(f"checkpoint_threshold {threshold or '16MB (default)':>15}: {times[0]:6.2f}-{times[-1]:<6.2f} s, "
              f"file {runs[0][1] / 1e6:,.0f} MB; batches of the slowest run (s): "
              f"{' '.join(f'{t:.2f}' for t in slowest[2])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="compression,threshold")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compression-messages", type=int, default=30_000)
    parser.add_argument("--threshold-messages", type=int, default=300_000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="duckdb-writes-"))
    try:
        print(f"machine check {machine_check():.0f} ms")
        parts = args.parts.split(",")
        if "compression" in parts:
            bench_compression(args.compression_messages, args.repeats, base)
        if "threshold" in parts:
            bench_threshold(args.threshold_messages, args.repeats, base)
        print(f"machine check {machine_check():.0f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
