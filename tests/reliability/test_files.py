"""The agent's file under hostile conditions: foreign and broken files, newer schemas, full disks, create races.

Each case checks the typed error (or the defined outcome) and that the file on disk is what it was.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import duckdb
import pytest

from agentlab import get_agent
from agentlab.errors import AgentFileError, DiskFullError, SchemaTooNewError
from agentlab.session._session import Session
from agentlab.store._naming import agent_path

from .filelab import (
    BAD_KINDS,
    Owner,
    bad_file_trial,
    checkpoint_trial,
    digest,
    fill,
    killed_creation_trial,
    killed_with_a_log,
    mount_tmpfs,
    race_trial,
    text_message,
    unmount,
    write_bad_file,
)


def _block(session, label):
    session.context.load()
    return session.get_context_block(label).content


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of a few MiB mounted for the test (root only), unmounted after."""
    mount = tmp_path / "disk"
    why = mount_tmpfs(mount)
    if why:
        pytest.skip(why)
    yield mount
    for live in list(__import__("agentlab.agent._agent", fromlist=["_registry"])._registry.values()):
        live.close()
    unmount(mount)


@pytest.fixture(params=["own", "spare"])
def instance(request, monkeypatch):
    """Whether a new agent file opens in a DuckDB instance of its own or in a spare started ahead."""
    from agentlab.store import _files as files
    from agentlab.store import _instances as instances

    if request.param == "own":
        monkeypatch.setattr(instances, "SPARES", 0)
    else:
        instances.start(files.CONFIG)
        assert instances.ready(), "no spare DuckDB instance started"
    return request.param


class TestFilesThatAreNotAgents:
    def _target(self, root: Path) -> Path:
        path = agent_path("Owner", "u1", root)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    @pytest.mark.parametrize("kind", BAD_KINDS)
    def test_a_file_that_is_not_an_agent_is_refused_and_left_alone(self, tmp_path, kind):
        assert bad_file_trial(kind, tmp_path) == []

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
        # DuckDB's own message says whether it tried: with autoloading on it reports a failed download here.
        assert "download" not in str(caught.value.__cause__).lower()

    def test_agent_connections_never_install_or_load_extensions(self, tmp_path):
        agent = get_agent(Owner, "u1", root=tmp_path)
        settings = dict(agent.store.conn.execute(
            "SELECT name, value FROM duckdb_settings() "
            "WHERE name IN ('autoinstall_known_extensions', 'autoload_known_extensions')").fetchall())
        agent.close()
        assert settings == {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}

    def test_a_directory_at_the_path_is_refused(self, tmp_path):
        path = self._target(tmp_path)
        path.mkdir()
        with pytest.raises(AgentFileError, match="directory"):
            get_agent(Owner, "u1", root=tmp_path)

    def test_another_applications_duckdb_file_keeps_only_its_own_tables(self, tmp_path):
        assert bad_file_trial("foreign", tmp_path) == []
        conn = duckdb.connect(str(agent_path("Owner", "u1", tmp_path)), read_only=True)
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


class TestBrokenLogs:
    @pytest.mark.parametrize("kind", ["damaged-log", "foreign-log"])
    def test_a_log_that_cannot_be_replayed_is_named_in_the_error(self, tmp_path, kind):
        path = agent_path("Owner", "u1", tmp_path)
        write_bad_file(kind, path, tmp_path)
        with pytest.raises(AgentFileError, match="write-ahead log") as caught:
            get_agent(Owner, "u1", root=tmp_path)
        assert f"{path}.wal" in str(caught.value) and "last checkpoint" in str(caught.value)

    def test_an_intact_log_is_replayed(self, tmp_path):
        killed_with_a_log(tmp_path)
        agent = get_agent(Owner, "u1", root=tmp_path)
        assert [m["id"] for m in Session.create(agent).get_history()] == [f"m{i}" for i in range(40)]
        agent.close()


class TestSchemaVersions:
    def test_a_file_from_a_newer_agentlab_is_refused_for_writing_and_readable(self, tmp_path):
        agent = get_agent(Owner, "u1", root=tmp_path)
        agent.set_state({"n": 7})
        path = agent.path
        agent.close()
        conn = duckdb.connect(str(path))
        conn.execute("INSERT INTO _agentlab_migrations (name) VALUES ('m999_from_the_future')")
        conn.close()
        before = digest(path)
        with pytest.raises(SchemaTooNewError, match="m999_from_the_future") as caught:
            get_agent(Owner, "u1", root=tmp_path)
        assert "newer agentlab" in str(caught.value) and "read_only=True" in str(caught.value)
        assert digest(path) == before
        reader = get_agent(Owner, "u1", root=tmp_path, read_only=True)
        assert reader.state == {"n": 7}
        reader.close()


@pytest.mark.slow
class TestCreateRaces:
    def test_processes_racing_to_create_an_agent_get_it_or_the_lock_error(self, tmp_path):
        for trial in range(6):
            result = race_trial(tmp_path / f"trial{trial}")
            assert result.problems == [], result


@pytest.mark.slow
class TestKilledCreation:
    def test_a_creator_killed_at_any_moment_leaves_only_whole_files_and_nothing_after_the_next(self, tmp_path):
        for trial, delay in enumerate((0.05, 0.2, 0.45, 0.7, 1.0, 1.3)):
            result = killed_creation_trial(tmp_path / f"trial{trial}", delay)
            assert result.problems == [], result


class TestFullDisk:
    def test_a_commit_that_cannot_be_written_raises_and_stores_nothing(self, small_disk, instance):
        agent = get_agent(Owner, "u1", root=small_disk)
        assert agent.store._in_spare == (instance == "spare")
        session = Session.create(agent)
        session.append_message(text_message("m0", "before the disk filled"))
        state_before = agent.state
        fill(small_disk, leave=0)
        big = "x" * 2_000_000
        with pytest.raises(DiskFullError, match="nothing was stored"):
            session.append_message(text_message("m1", big))
        with pytest.raises(DiskFullError):
            agent.set_state({"n": 1, "pad": big})
        assert [m["id"] for m in session.get_history()] == ["m0"]
        assert agent.state == state_before
        (small_disk / "filler").unlink()
        session.append_message(text_message("m2", "after space came back"))
        agent.close()
        again = get_agent(Owner, "u1", root=small_disk)
        assert [m["id"] for m in Session.create(again).get_history()] == ["m0", "m2"]
        assert again.state == state_before

    @pytest.mark.parametrize("writer", ["append_messages", "set_block", "vectors"])
    def test_every_writer_raises_the_typed_error_and_stores_nothing(self, small_disk, writer):
        from agentlab.search._embedders import HashEmbedder
        from agentlab.search._vectors import VectorStore

        agent = get_agent(Owner, "u1", root=small_disk)
        session = Session.create(agent).with_context("memory", description="facts", max_tokens=10**7)
        vectors = VectorStore(agent.store, "kb", HashEmbedder(8))
        session.append_message(text_message("m0", "before the disk filled"))
        session.set_block("memory", "a fact")
        vectors.add("k0", "first entry")
        fill(small_disk, leave=0)
        big = "x" * 2_000_000
        write = {
            "append_messages": lambda: session.append_messages([text_message("m1", big), text_message("m2", big)]),
            "set_block": lambda: session.set_block("memory", big),
            "vectors": lambda: vectors.add_many([("k1", big, None), ("k2", big, None)], progress=False),
        }[writer]
        with pytest.raises(DiskFullError, match="nothing was stored"):
            write()
        assert [m["id"] for m in session.get_history()] == ["m0"]
        assert _block(session, "memory") == "a fact"
        assert vectors.keys() == ["k0"]
        (small_disk / "filler").unlink()
        agent.close()
        again = get_agent(Owner, "u1", root=small_disk)
        reopened = Session.create(again).with_context("memory", description="facts", max_tokens=10**7)
        assert [m["id"] for m in reopened.get_history()] == ["m0"]
        assert _block(reopened, "memory") == "a fact"
        assert VectorStore(again.store, "kb", HashEmbedder(8)).keys() == ["k0"]

    def test_a_failed_automatic_checkpoint_loses_no_acknowledged_write_and_recovers(self, small_disk, instance):
        # A file opened in a spare instance is ATTACHed: DuckDB reports its failed checkpoint as an IO error
        # ("Detach and reattach"), not the fatal error of its own instance; the store treats both alike.
        result = checkpoint_trial(small_disk, in_spare=instance == "spare")
        assert result.problems == [] and result.lost == []
        assert result.reopened == result.acknowledged
