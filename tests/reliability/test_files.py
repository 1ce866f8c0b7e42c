"""The agent's file under hostile conditions: foreign and broken files, newer schemas, full disks, create races.

Each case checks the typed error (or the defined outcome) and that the file on disk is what it was.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import duckdb
import pytest

from agentlab import Agent, get_agent
from agentlab.errors import (
    AgentFileError,
    AgentLockedError,
    CheckpointWarning,
    DiskFullError,
    SchemaTooNewError,
)
from agentlab.naming import agent_path
from agentlab.session import Session
from agentlab.store import Store


class Owner(Agent):
    initial_state = {"n": 0}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _text(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of a few MiB mounted for the test (root only), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill the disk needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    for live in list(__import__("agentlab.agent", fromlist=["_registry"])._registry.values()):
        live.close()
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    """Write a filler file until only about ``leave`` bytes of the file system are free."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, free - leave))
    return filler


class TestFilesThatAreNotAgents:
    def _target(self, root: Path) -> Path:
        path = agent_path("Owner", "u1", root)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    @pytest.mark.parametrize("kind", ["empty", "garbage", "text", "parquet", "sqlite", "truncated"])
    def test_a_file_that_is_not_an_agent_is_refused_and_left_alone(self, tmp_path, kind):
        path = self._target(tmp_path)
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
        else:
            good = tmp_path / "good.duckdb"
            Store(good).close()
            path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        before = _digest(path)
        with pytest.raises(AgentFileError, match="cannot be opened as an agentlab agent"):
            get_agent(Owner, "u1", root=tmp_path)
        assert _digest(path) == before
        assert not path.with_name(path.name + ".wal").exists()

    def test_a_sqlite_file_never_makes_duckdb_fetch_an_extension(self, tmp_path):
        path = self._target(tmp_path)
        sqlite3.connect(path).close()
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.close()
        with pytest.raises(AgentFileError, match="SQLite database") as caught:
            get_agent(Owner, "u1", root=tmp_path)
        assert "extension" not in str(caught.value).lower()

    def test_a_directory_at_the_path_is_refused(self, tmp_path):
        path = self._target(tmp_path)
        path.mkdir()
        with pytest.raises(AgentFileError, match="directory"):
            get_agent(Owner, "u1", root=tmp_path)

    def test_another_applications_duckdb_file_is_not_adopted(self, tmp_path):
        path = self._target(tmp_path)
        conn = duckdb.connect(str(path))
        conn.execute("CREATE TABLE messages (x INTEGER)")  # even a clashing table name
        conn.execute("INSERT INTO messages VALUES (42)")
        conn.close()
        before = _digest(path)
        with pytest.raises(AgentFileError, match="another application"):
            get_agent(Owner, "u1", root=tmp_path)
        assert _digest(path) == before
        conn = duckdb.connect(str(path), read_only=True)
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        conn.close()
        assert tables == {"messages"}

    def test_a_file_on_a_read_only_file_system_says_to_open_it_read_only(self, tmp_path):
        if os.geteuid() != 0:
            pytest.skip("remounting a tmpfs read-only needs root")
        mount = tmp_path / "ro"
        mount.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)]).returncode:
            pytest.skip("cannot mount a tmpfs here")
        try:
            agent = get_agent(Owner, "u1", root=mount)
            agent.set_state({"n": 3})
            agent.close()
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
            with pytest.raises(AgentFileError, match="read_only=True"):
                get_agent(Owner, "u1", root=mount)
            reader = get_agent(Owner, "u1", root=mount, read_only=True)
            assert reader.state == {"n": 3}
            reader.close()
            with pytest.raises(AgentFileError, match="cannot be created"):
                get_agent(Owner, "u2", root=mount)
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)


class TestSchemaVersions:
    def test_a_file_from_a_newer_agentlab_is_refused_for_writing_and_readable(self, tmp_path):
        agent = get_agent(Owner, "u1", root=tmp_path)
        agent.set_state({"n": 7})
        path = agent.path
        agent.close()
        conn = duckdb.connect(str(path))
        conn.execute("INSERT INTO _agentlab_migrations (name) VALUES ('m999_from_the_future')")
        conn.close()
        before = _digest(path)
        with pytest.raises(SchemaTooNewError, match="m999_from_the_future") as caught:
            get_agent(Owner, "u1", root=tmp_path)
        assert "newer agentlab" in str(caught.value) and "read_only=True" in str(caught.value)
        assert _digest(path) == before
        reader = get_agent(Owner, "u1", root=tmp_path, read_only=True)
        assert reader.state == {"n": 7}
        reader.close()


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


class TestCreateRaces:
    def test_processes_racing_to_create_an_agent_get_it_or_the_lock_error(self, tmp_path):
        outcomes: list[str] = []
        for trial in range(6):
            root = tmp_path / f"trial{trial}"
            import time

            go = time.time() + 1.5
            procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(root), str(go)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(4)]
            results = [p.communicate(timeout=60)[0].strip() for p in procs]
            outcomes += results
            assert all(r in ("won", "locked") for r in results), results
            assert "won" in results
            files = sorted(p.name for p in (root / "racer").iterdir())
            assert len(files) == 1 and files[0].endswith(".duckdb"), files  # no leftover temporary files
        assert outcomes.count("won") >= 6


class TestFullDisk:
    def test_a_commit_that_cannot_be_written_raises_and_stores_nothing(self, small_disk):
        agent = get_agent(Owner, "u1", root=small_disk)
        session = Session.create(agent)
        session.append_message(_text("m0", "before the disk filled"))
        state_before = agent.state
        _fill(small_disk, leave=0)
        big = "x" * 2_000_000
        with pytest.raises(DiskFullError, match="nothing was stored"):
            session.append_message(_text("m1", big))
        with pytest.raises(DiskFullError):
            agent.set_state({"n": 1, "pad": big})
        assert [m["id"] for m in session.get_history()] == ["m0"]
        assert agent.state == state_before
        (small_disk / "filler").unlink()
        session.append_message(_text("m2", "after space came back"))
        agent.close()
        again = get_agent(Owner, "u1", root=small_disk)
        assert [m["id"] for m in Session.create(again).get_history()] == ["m0", "m2"]
        assert again.state == state_before

    def test_a_failed_automatic_checkpoint_loses_no_acknowledged_write_and_recovers(self, small_disk):
        agent = get_agent(Owner, "u1", root=small_disk)
        session = Session.create(agent)
        agent.store.execute("SET checkpoint_threshold = '256KB'")
        filler = _fill(small_disk, leave=1_800_000)
        acknowledged: list[str] = []
        caught: list[warnings.WarningMessage] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(6000):
                try:
                    session.append_message(_text(f"m{i}", f"note {i} " + "padding words " * 20))
                except DiskFullError:
                    break  # the WAL itself could not grow: refused, nothing stored
                acknowledged.append(f"m{i}")
                if not agent.health.ok:
                    break
        assert not agent.health.ok, "the disk never filled at a checkpoint; enlarge the test's writes"
        assert any(issubclass(w.category, CheckpointWarning) for w in caught)
        assert "checkpoint" in (agent.health.error or "").lower()
        # The agent keeps working on a fresh connection: reads see every acknowledged write.
        assert [m["id"] for m in session.get_history()] == acknowledged
        filler.unlink()
        session.append_message(_text("after", "space is back"))
        assert agent.store.checkpoint() and agent.health.ok
        agent.close()
        again = get_agent(Owner, "u1", root=small_disk)
        assert [m["id"] for m in Session.create(again).get_history()] == [*acknowledged, "after"]
