"""Trials on the agent file itself, shared by tests/reliability/test_files.py and benchmarks/reliability.py.

* :func:`bad_file_trial`: a file that is not an agent file at an agent's path (or an agent file whose log cannot
  be replayed) must raise :class:`~agentlab.errors.AgentFileError` and keep its bytes, and its log's.
* :func:`race_trial`: processes racing to create one new agent each get it or the typed lock error.
* :func:`checkpoint_trial`: appends on a small tmpfs until DuckDB's automatic checkpoint fails; every
  acknowledged write must be readable, then and after reopening.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from agentlab import Agent, get_agent
from agentlab.errors import AgentFileError, CheckpointWarning, DiskFullError
from agentlab.session._session import Session
from agentlab.store._database import Store
from agentlab.store._naming import agent_path

BAD_KINDS = ("empty", "garbage", "text", "parquet", "sqlite", "truncated", "foreign", "damaged-log", "foreign-log")


class Owner(Agent):
    initial_state = {"n": 0}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def text_message(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def write_bad_file(kind: str, path: Path, scratch: Path) -> None:
    """Put a file of ``kind`` (one of :data:`BAD_KINDS`) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(os.urandom(9000))
    elif kind == "text":
        path.write_text("hello world\n" * 300)
    elif kind == "parquet":
        duckdb.connect().execute(f"COPY (SELECT 1 AS a) TO '{path}' (FORMAT parquet)")
    elif kind == "sqlite":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.commit()
        conn.close()
    elif kind == "truncated":
        good = scratch / "good.duckdb"
        Store(good).close()
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "foreign":
        duck = duckdb.connect(str(path))
        duck.execute("CREATE TABLE messages (x INTEGER)")  # even a clashing table name
        duck.execute("INSERT INTO messages VALUES (42)")
        duck.close()
    elif kind == "damaged-log":  # an agent whose log has entries that fail their checksums
        _, wal = killed_with_a_log(path.parent.parent)
        data = bytearray(wal.read_bytes())
        for i in range(200, len(data), 97):
            data[i] ^= 0xFF
        wal.write_bytes(bytes(data))
    elif kind == "foreign-log":  # an agent with another agent file's log beside it
        _, wal = killed_with_a_log(path.parent.parent)
        _, other = killed_with_a_log(scratch / "other")
        wal.write_bytes(other.read_bytes())
    else:
        raise ValueError(f"unknown kind {kind!r}")


def bad_file_trial(kind: str, root: Path) -> list[str]:
    """Problems found when opening a ``kind`` file as an agent ([] when refused with its bytes unchanged)."""
    path = agent_path("Owner", "u1", root)
    wal = path.with_name(path.name + ".wal")
    write_bad_file(kind, path, root)
    before = digest(path)
    log_before = digest(wal) if wal.exists() else None
    problems = []
    try:
        get_agent(Owner, "u1", root=root).close()
        problems.append(f"{kind}: opened as an agent")
    except AgentFileError:
        pass
    except Exception as exc:
        problems.append(f"{kind}: {type(exc).__name__}: {exc}")
    if digest(path) != before:
        problems.append(f"{kind}: the file changed")
    if log_before is None and wal.exists():
        problems.append(f"{kind}: a WAL appeared beside it")
    if log_before is not None and (not wal.exists() or digest(wal) != log_before):
        problems.append(f"{kind}: its WAL changed")
    return problems


_RACER = textwrap.dedent(
    """
    import sys, time
    from agentlab import Agent, get_agent
    from agentlab.errors import AgentLockedError

    class Racer(Agent):
        initial_state = {"n": 0}

    root, go = sys.argv[1], float(sys.argv[2])
    while time.time() < go:
        pass
    try:
        agent = get_agent(Racer, "contested", root=root)
        agent.merge_state({"n": 1})
        print("won", flush=True)
        time.sleep(0.5)
        agent.close()
    except AgentLockedError:
        print("locked", flush=True)
    except Exception as exc:
        print("error", type(exc).__name__, exc, flush=True)
    """
)


@dataclass
class RaceResult:
    outcomes: list[str]
    files: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = [o for o in self.outcomes if o not in ("won", "locked")]
        if "won" not in self.outcomes:
            found.append("nobody opened the agent")
        if len(self.files) != 1 or not self.files[0].endswith(".duckdb"):
            found.append(f"files left in the class folder: {self.files}")
        return found


def race_trial(root: Path, racers: int = 4) -> RaceResult:
    """Start ``racers`` processes that all create the same new agent at one moment."""
    go = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(root), str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(racers)]
    outcomes = [p.communicate(timeout=120)[0].strip() for p in procs]
    folder = root / "racer"
    return RaceResult(outcomes, sorted(p.name for p in folder.iterdir()) if folder.exists() else [])


_LOGGED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from agentlab import Agent, get_agent
    from agentlab.session._session import Session

    class Owner(Agent):
        initial_state = {"n": 0}

    agent = get_agent(Owner, "u1", root=sys.argv[1])
    agent.store.execute("SET checkpoint_threshold = '1GB'")  # every write stays in the log
    session = Session.create(agent)
    for i in range(40):
        session.append_message({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"note {i}"}]})
    os.kill(os.getpid(), signal.SIGKILL)  # no checkpoint at close: the log stays beside the file
    """
)


_CREATOR = textwrap.dedent(
    """
    import sys
    from agentlab import Agent, get_agent

    class Creator(Agent):
        initial_state = {"n": 0}

    root = sys.argv[1]
    print("ready", flush=True)
    for i in range(100_000):
        get_agent(Creator, f"user-{i}", root=root).close()
    """
)


def killed_with_a_log(root: Path) -> tuple[Path, Path]:
    """An agent file whose last writes are only in its write-ahead log (a writer SIGKILLed before a checkpoint)."""
    subprocess.run([sys.executable, "-c", _LOGGED_WRITER, str(root)], capture_output=True, timeout=120)
    path = agent_path("Owner", "u1", root)
    wal = path.with_name(path.name + ".wal")
    assert wal.is_file() and wal.stat().st_size > 0, "the writer left no log"
    return path, wal


@dataclass
class KilledCreationResult:
    files: list[str]
    unreadable: list[str]
    leftovers: list[str]
    after_next: list[str]

    @property
    def problems(self) -> list[str]:
        found = [f"{name} is not a whole agent file" for name in self.unreadable]
        found += [f"{name} was left behind after the next creation" for name in self.after_next]
        found += [f"unexpected leftover {name}" for name in self.leftovers
                  if not name.endswith((".creating", ".creating.wal"))]
        return found


def killed_creation_trial(root: Path, delay: float) -> KilledCreationResult:
    """Kill (SIGKILL) a process that creates agents one after another; every file left must be a whole agent."""
    import signal

    proc = subprocess.Popen([sys.executable, "-c", _CREATOR, str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    folder, creating = root / "creator", root / "creator" / ".agentlab-creating"
    files = sorted(p.name for p in folder.glob("*.duckdb")) if folder.exists() else []
    unreadable = []
    for name in files:
        try:
            Store(folder / name, read_only=True).close()  # refuses anything but a whole, migrated agent file
        except Exception as exc:  # reported
            unreadable.append(f"{name} ({type(exc).__name__}: {exc})")
    leftovers = sorted(p.name for p in creating.iterdir()) if creating.exists() else []

    class Creator(Agent):
        initial_state = {"n": 0}

    get_agent(Creator, "one-more", root=root).close()  # sweeps what the killed process left
    after = sorted(p.name for p in creating.iterdir()) if creating.exists() else []
    return KilledCreationResult(files, unreadable, leftovers, after)


def fill(folder: Path, leave: int) -> Path:
    """Write a filler file until only about ``leave`` bytes of the file system are free."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, free - leave))
    return filler


@dataclass
class CheckpointResult:
    acknowledged: list[str]
    seen: list[str]
    reopened: list[str]
    warned: bool
    unhealthy: bool
    recovered: bool

    @property
    def lost(self) -> list[str]:
        return [m for m in self.acknowledged if m not in self.reopened]

    @property
    def problems(self) -> list[str]:
        found = []
        if not self.unhealthy:
            found.append("the disk never filled at a checkpoint")
        if not self.warned:
            found.append("no CheckpointWarning")
        if self.seen != self.acknowledged:
            found.append("reads on the reopened connection differ from the acknowledged writes")
        if not self.recovered:
            found.append("no successful checkpoint once space came back")
        return found


def checkpoint_trial(mount: Path, *, in_spare: bool | None = None) -> CheckpointResult:
    """Append on the tmpfs ``mount`` until an automatic checkpoint fails, free space, append once more.

    ``in_spare``: check that the new agent was opened in a spare DuckDB instance (True) or its own (False).
    """
    agent = get_agent(Owner, "u1", root=mount)
    if in_spare is not None:
        assert agent.store._in_spare == in_spare
    session = Session.create(agent)
    agent.store.execute("SET checkpoint_threshold = '256KB'")
    filler = fill(mount, leave=1_800_000)
    acknowledged: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(20_000):
            # Words DuckDB cannot compress away (its string compression shrinks repeated padding to nothing), so
            # the file grows until a checkpoint finds the disk full, whatever its block size.
            words = " ".join(hashlib.sha256(f"{i}-{k}".encode()).hexdigest()[:12] for k in range(20))
            try:
                session.append_message(text_message(f"m{i}", f"note {i} {words}"))
            except DiskFullError:
                break  # the WAL itself could not grow: refused, nothing stored
            acknowledged.append(f"m{i}")
            if not agent.health.ok:
                break
    unhealthy = not agent.health.ok
    warned = any(issubclass(w.category, CheckpointWarning) for w in caught)
    seen = [m["id"] for m in session.get_history()]
    filler.unlink()
    session.append_message(text_message("after", "space is back"))
    acknowledged.append("after")
    recovered = agent.store.checkpoint() and agent.health.ok
    agent.close()
    again = get_agent(Owner, "u1", root=mount)
    reopened = [m["id"] for m in Session.create(again).get_history()]
    again.close()
    return CheckpointResult(acknowledged, [*seen, "after"], reopened, warned, unhealthy, recovered)


def mount_tmpfs(folder: Path, size: str = "6m") -> str | None:
    """Mount a tmpfs of ``size`` at ``folder``; returns why not (not root, mount refused), or None."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs to fill the disk needs root"
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                            capture_output=True, text=True)
    return None if result.returncode == 0 else f"cannot mount a tmpfs here: {result.stderr.strip()}"


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], check=False)
