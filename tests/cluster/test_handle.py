"""Agents as named Ray actors: the handle's methods, one actor per name, errors as their own types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cluster_agents import Assistant, Notes, OtherNotes

from agentlab import Agent, get_agent
from agentlab.cluster._simulation import CompactionPolicy
from agentlab.errors import (
    AgentClassConflictError,
    AgentClosedError,
    AgentlabError,
    AgentLockedError,
    InvalidArgumentError,
    InvalidMessageError,
    RayNotInstalledError,
    SqlError,
    StateRejectedError,
    UnknownMessageError,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _msg(mid: str, text: str, role: str = "user") -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)]), **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environment, timeout=300)


# --- without Ray -----------------------------------------------------------------------------------------------


def test_import_agentlab_does_not_import_ray():
    done = _python("import sys, agentlab, agentlab.cluster; print('ray' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_unknown_backend_and_backend_options_without_a_backend(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"Unknown backend 'rai'.*'local', 'ray'"):
        get_agent(Agent, "a", root=tmp_path, backend="rai")
    with pytest.raises(TypeError, match="namespace"):
        get_agent(Agent, "a", root=tmp_path, namespace="x")
    assert not any(tmp_path.iterdir())  # nothing was created


def test_without_ray_installed_the_error_says_how_to_install_it(tmp_path):
    done = _python(f"""
        import sys
        sys.modules["ray"] = None  # what an install without the extra looks like to an import
        from agentlab import Agent, get_agent
        from agentlab.errors import RayNotInstalledError
        try:
            get_agent(Agent, "a", root={str(tmp_path)!r}, backend="ray")
        except RayNotInstalledError as exc:
            print(isinstance(exc, ImportError), exc)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True ") and "pip install 'agentlab[ray]'" in done.stdout
    assert RayNotInstalledError.__mro__[1].__name__ == "ClusterError"


# --- on the session's Ray --------------------------------------------------------------------------------------


def test_state_sql_and_the_default_session_through_a_handle(ray, tmp_path):
    handle = get_agent(Notes, "user-42", root=tmp_path, backend="ray")
    assert handle.state == {"visits": 0} and handle.has_state
    assert handle.merge_state({"visits": 1, "city": "Lisbon"}) == {"visits": 1, "city": "Lisbon"}
    handle.set_state({"visits": 2})
    handle.sql("CREATE TABLE facts (body VARCHAR)")
    handle.sql("INSERT INTO facts VALUES (?)", "likes espresso")
    assert handle.sql("SELECT body FROM facts") == [{"body": "likes espresso"}]
    assert handle.sql.df("SELECT count(*) AS n FROM facts")["n"].tolist() == [1]
    assert handle.sql.arrow("SELECT body FROM facts").column("body").to_pylist() == ["likes espresso"]

    first = handle.append_message(_msg("q1", "Plan a trip"))
    assert (first.id, first.parent_id, first.duplicate) == ("q1", None, False)
    handle.append_message(_msg("r1", "Lisbon?", "assistant"))
    handle.append_message(_msg("r2", "Porto?", "assistant"), parent_id="q1")  # a second branch
    handle.append_messages([_msg("q2", "Porto it is"), _msg("r3", "Booked.", "assistant")])
    assert [m["id"] for m in handle.get_history()] == ["q1", "r2", "q2", "r3"]
    assert [m["id"] for m in handle.get_history("r1")] == ["q1", "r1"]
    assert [m["id"] for m in handle.get_branches("q1")] == ["r1", "r2"]
    assert [hit.id for hit in handle.search("Porto", mode="any")] == ["r2", "q2"]
    assert handle.append_message(_msg("q1", "again")).duplicate  # the first content wins, as locally

    other = handle.session("notes")
    other.append_message(_msg("n1", "a note"))
    assert [m["id"] for m in other.get_history()] == ["n1"]
    assert len(handle.get_history()) == 4  # sessions stay apart
    assert handle.session("") is handle.session()

    path = handle.path
    handle.close()
    with get_agent(Notes, "user-42", root=tmp_path) as local:  # the file holds exactly what the handle wrote
        assert local.path == path
        assert local.state == {"visits": 2}
        assert local.sql("SELECT body FROM facts") == [{"body": "likes espresso"}]
        from agentlab import Session

        assert [m["id"] for m in Session.create(local).get_history()] == ["q1", "r2", "q2", "r3"]


def test_two_handles_for_one_name_reach_one_actor(ray, tmp_path):
    first = get_agent(Notes, "shared", root=tmp_path, backend="ray")
    second = get_agent(Notes, "shared", root=tmp_path, backend="ray")
    assert first is not second
    assert first.actor_name == second.actor_name == f"agentlab:{first.path}"
    assert first.namespace == second.namespace == "agentlab"
    assert first.actor._actor_id == second.actor._actor_id
    assert first.info()["pid"] == second.info()["pid"]
    first.set_state({"visits": 7})
    assert second.state == {"visits": 7}
    # Another namespace means another actor, which cannot take the file while the first one holds it.
    with pytest.raises(AgentLockedError):
        get_agent(Notes, "shared", root=tmp_path, backend="ray", namespace="another", lock_wait=0.3)
    assert second.state == {"visits": 7}


def test_a_second_driver_finds_the_same_actor(ray, tmp_path):
    handle = get_agent(Notes, "across-drivers", root=tmp_path, backend="ray")
    handle.set_state({"visits": 3})
    address = ray.get_runtime_context().gcs_address
    done = _python(f"""
        import json, ray
        from cluster_agents import Notes
        from agentlab import get_agent
        ray.init(address={address!r}, logging_level="error")
        other = get_agent(Notes, "across-drivers", root={str(tmp_path)!r}, backend="ray")
        other.merge_state({{"from": "driver 2"}})
        print(json.dumps([other.info()["pid"], other.state]))
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    pid, state = json.loads(done.stdout.strip().splitlines()[-1])
    assert pid == handle.info()["pid"]
    assert state == {"visits": 3, "from": "driver 2"} == handle.state


def test_errors_in_the_actor_arrive_as_their_own_types(ray, tmp_path):
    handle = get_agent(Notes, "errors", root=tmp_path, backend="ray")
    handle.append_message(_msg("q1", "hello"))
    with get_agent(Notes, "errors-local", root=tmp_path) as local:  # the message a local agent gives
        from agentlab import Session

        with pytest.raises(UnknownMessageError) as local_error:
            Session.create(local).append_message(_msg("q2", "x"), parent_id="missing")

    with pytest.raises(UnknownMessageError) as caught:
        handle.append_message(_msg("q2", "x"), parent_id="missing")
    assert type(caught.value) is UnknownMessageError
    assert str(caught.value) == str(local_error.value)
    assert caught.value.id == "missing"
    assert handle.actor_name in caught.value.__notes__[0] and "Traceback" in caught.value.__notes__[0]
    assert "RayTaskError" not in type(caught.value).__mro__.__repr__()

    with pytest.raises(StateRejectedError, match="visits must be >= 0"):
        handle.set_state({"visits": -1})
    assert handle.state == {"visits": 0}  # nothing stored
    with pytest.raises(SqlError) as sql_error:
        handle.sql("SELEC 1")
    assert sql_error.value.query == "SELEC 1"
    with pytest.raises(InvalidMessageError):
        handle.append_message({"id": "bad", "role": "user", "parts": "not a list"})
    with pytest.raises(TypeError, match="merge_state takes a dict"):
        handle.merge_state(["no"])
    assert [m["id"] for m in handle.get_history()] == ["q1"]  # failed writes left the file as it was


def test_a_file_held_by_another_process_gives_agent_locked_and_leaves_no_actor(ray, tmp_path):
    from ray.util import list_named_actors

    with get_agent(Notes, "held", root=tmp_path) as local:
        with pytest.raises(AgentLockedError) as caught:
            get_agent(Notes, "held", root=tmp_path, backend="ray", lock_wait=0.3)
        assert caught.value.path == str(local.path)
        assert not [a for a in list_named_actors(all_namespaces=True) if a["name"].endswith(local.path.name)]
    handle = get_agent(Notes, "held", root=tmp_path, backend="ray")  # released: now it opens
    assert handle.state == {"visits": 0}


def test_mode_and_class_conflicts_are_refused(ray, tmp_path):
    handle = get_agent(Notes, "mode", root=tmp_path, backend="ray")
    with pytest.raises(AgentlabError, match="already open read-write"):
        get_agent(Notes, "mode", root=tmp_path, backend="ray", read_only=True)
    Impostor = type("Notes", (Agent,), {"__module__": "somewhere_else"})
    with pytest.raises(AgentClassConflictError, match=r"cluster_agents.Notes"):
        get_agent(Impostor, "mode", root=tmp_path, backend="ray")
    assert handle.state == {"visits": 0}


def test_ask_runs_a_chat_turn_in_the_actor(ray, tmp_path):
    handle = get_agent(Assistant, "chatty", root=tmp_path, backend="ray")
    turn = handle.ask("Remember that I take my coffee black.")
    assert turn.text and turn.steps >= 1
    history = handle.get_history()
    assert history[0]["role"] == "user" and history[-1]["role"] == "assistant"
    assert history[0]["parts"][0]["text"] == "Remember that I take my coffee black."
    assert [m["id"] for m in history][-1] == turn.leaf_id
    plain = get_agent(OtherNotes, "plain", root=tmp_path, backend="ray")
    with pytest.raises(TypeError, match="needs a ChatAgent"):
        plain.ask("hello")


def test_a_closed_handle_raises_and_the_file_is_released(ray, tmp_path):
    handle = get_agent(Notes, "closing", root=tmp_path, backend="ray")
    other = get_agent(Notes, "closing", root=tmp_path, backend="ray")
    handle.set_state({"visits": 5})
    handle.close()
    handle.close()  # twice is fine
    with pytest.raises(AgentClosedError):
        _ = handle.state
    with get_agent(Notes, "closing", root=tmp_path) as local:  # the actor let go of the file
        assert local.state == {"visits": 5}
    assert other.state == {"visits": 5}  # the other handle starts a new actor


def test_configure_session_sets_compaction_and_survives_a_restart(ray, tmp_path):
    policy = CompactionPolicy(after_tokens=120, tail_token_budget=40, protect_head=1, min_tail_messages=2)
    handle = get_agent(Notes, "compacting", root=tmp_path, backend="ray", configure_session=policy.apply)
    words = "the quick brown fox jumps over the lazy dog near the river bank today"
    for i in range(12):
        handle.append_message(_msg(f"m{i}", f"{words} {i}.", "user" if i % 2 == 0 else "assistant"))
    before = handle.sql("SELECT count(*) AS n FROM compactions")[0]["n"]
    assert before >= 1
    ray.kill(handle.actor, no_restart=True)
    for i in range(12, 24):
        handle.append_message(_msg(f"m{i}", f"{words} {i}.", "user" if i % 2 == 0 else "assistant"))
    assert handle.sql("SELECT count(*) AS n FROM compactions")[0]["n"] > before  # the new actor compacts too
    assert len(handle.get_history()) < 24  # an overlay shortens the history read
