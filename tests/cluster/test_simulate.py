"""``agentlab simulate``: a dataset replayed as N users, one agent each, here or on Ray; frames gathered."""

from __future__ import annotations

import pandas as pd
import pytest

from agentlab.cli import main
from agentlab.cluster import CompactionPolicy, simulate
from agentlab.cluster import _simulation as simulation_module
from agentlab.errors import InvalidArgumentError
from agentlab.eval.datasets import load_bundled

COLUMNS = ["agent", "agent_class", "session_id", "id", "parent_id", "role", "text", "n_parts"]


@pytest.fixture(scope="module")
def dataset():
    return load_bundled()


def _expected_messages(dataset, users, turns=None):
    sizes = [len(c.turns[:turns]) for c in dataset.conversations]
    return sum(sizes[i % len(sizes)] for i in range(users))


def test_local_replay_appends_every_turn_and_compacts(dataset, tmp_path):
    result = simulate(dataset, 4, root=tmp_path, progress=False)
    assert result.users == 4 and result.messages == _expected_messages(dataset, 4)
    assert len(result.frames) == result.messages  # compaction adds overlays, never removes rows
    assert sorted(result.frames["agent"].unique()) == ["user-0", "user-1", "user-2", "user-3"]
    first = result.frames[result.frames["agent"] == "user-0"]
    conversation = dataset.conversations[0]
    assert first["id"].tolist() == [t.id for t in conversation.turns]
    assert first["text"].tolist() == [t.text for t in conversation.turns]
    assert set(first["role"]) == {"user", "assistant"}
    # user 3 replays conversation 0 again, as its own agent
    assert result.frames[result.frames["agent"] == "user-3"]["id"].tolist() == first["id"].tolist()
    assert result.compactions > 0
    assert result.messages_per_second > 0 and result.workers[0]["memory"]["rss"] > 0


def test_ray_replay_gives_the_same_frames_as_the_local_one(ray, dataset, tmp_path):
    policy = CompactionPolicy(after_tokens=800, tail_token_budget=300)
    here = simulate(dataset, 5, turns=60, root=tmp_path / "here", policy=policy, progress=False)
    there = simulate(dataset, 5, turns=60, root=tmp_path / "there", policy=policy, executor="ray", workers=2,
                     progress=False)
    pd.testing.assert_frame_equal(here.frames[COLUMNS], there.frames[COLUMNS])
    assert there.messages == here.messages == _expected_messages(dataset, 5, 60)
    assert there.compactions == here.compactions > 0  # the extractive summarizer is deterministic
    assert len(there.workers) == 2 and sum(w["users"] for w in there.workers) == 5
    assert all(w["memory"]["uss"] > 0 for w in there.workers)


def test_files_other_nodes_hold_are_gathered_by_their_workers(ray, dataset, tmp_path, monkeypatch):
    here = simulate(dataset, 3, turns=20, root=tmp_path / "here", progress=False)
    monkeypatch.setattr(simulation_module, "_readable_here", lambda paths: False)  # as on a multi-node cluster
    there = simulate(dataset, 3, turns=20, root=tmp_path / "there", executor="ray", workers=2, progress=False)
    pd.testing.assert_frame_equal(here.frames[COLUMNS], there.frames[COLUMNS])


def test_bad_arguments_are_refused_before_anything_is_written(dataset, tmp_path):
    with pytest.raises(InvalidArgumentError, match="users must be a positive int"):
        simulate(dataset, 0, root=tmp_path, progress=False)
    with pytest.raises(InvalidArgumentError, match="tail_token_budget"):
        CompactionPolicy(after_tokens=300, tail_token_budget=300)
    with pytest.raises(InvalidArgumentError, match="executor"):
        simulate(dataset, 1, root=tmp_path, executor="spark", progress=False)
    assert not any(tmp_path.iterdir())
    simulate(dataset, 1, turns=3, root=tmp_path, progress=False)
    with pytest.raises(InvalidArgumentError, match="already holds 1 simulated users"):
        simulate(dataset, 1, root=tmp_path, progress=False)


def test_cli_simulate(dataset, tmp_path, capsys):
    out = tmp_path / "frames.parquet"
    assert main(["simulate", "bundled", "--users", "2", "--turns", "10", "--root", str(tmp_path / "agents"),
                 "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("2 users, 20 messages, ")
    assert len(pd.read_parquet(out)) == 20


@pytest.mark.parametrize("argv, message", [
    (["simulate", "locomo", "--users", "2"], "agentlab simulate: give the file with --data PATH.\n"),
    (["simulate", "bundled", "--users", "0"], "agentlab simulate: users must be a positive int, not 0.\n"),
    (["simulate", "bundled", "--users", "2", "--workers", "2"], "agentlab simulate: --workers needs --ray.\n"),
    (["simulate", "bundled", "--users", "2", "--compact-after", "lots"],
     "agentlab simulate: --compact-after takes a number of tokens or 'none', not 'lots'.\n"),
])
def test_cli_simulate_errors_are_one_line(argv, message, capsys, tmp_path):
    assert main([*argv, "--root", str(tmp_path), "--no-progress"]) == 2
    assert capsys.readouterr().err == message


def test_cli_simulate_on_ray(ray, tmp_path, capsys):
    assert main(["simulate", "bundled", "--users", "3", "--turns", "10", "--root", str(tmp_path), "--ray",
                 "--workers", "2", "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("3 users, 30 messages, ")
    assert ray.is_initialized()  # it used the running Ray and left it running
