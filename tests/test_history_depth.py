"""A branch longer than ``max_depth`` is never read silently: a warning and a flag, or an error when asked for."""

from __future__ import annotations

import pickle
import warnings

import pytest

from agentlab.errors import HistoryTooDeepError, HistoryTruncatedWarning
from agentlab.session.messages import History
from agentlab.session.session import Session
from helpers import ids, msg


@pytest.fixture
def chain(store):
    """A 12-message chain m0 .. m11 in the default session."""
    Session(store).append_messages([msg(f"m{i}") for i in range(12)])
    return store


class TestWithinTheCap:
    def test_a_branch_exactly_max_depth_long_is_whole_and_quiet(self, chain):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            history = Session(chain, max_depth=12).get_history()
        assert ids(history) == [f"m{i}" for i in range(12)] and history.truncated is False

    def test_a_branch_stopped_by_a_deleted_ancestor_at_the_cap_is_not_cut(self, chain):
        Session(chain).delete_messages(["m1"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            history = Session(chain, max_depth=10).get_history()
        assert ids(history) == [f"m{i}" for i in range(2, 12)] and not history.truncated

    def test_an_empty_session_reads_an_empty_history(self, store):
        history = Session(store, max_depth=1, on_overflow="raise").get_history()
        assert history == [] and not history.truncated


class TestPastTheCap:
    def test_the_default_warns_and_flags_the_newest_messages(self, chain):
        with pytest.warns(HistoryTruncatedWarning, match=r"'m11' is longer than max_depth=5"):
            history = Session(chain, max_depth=5).get_history()
        assert ids(history) == [f"m{i}" for i in range(7, 12)] and history.truncated is True

    def test_raise_gives_a_typed_error_naming_the_leaf_and_the_cap(self, chain):
        session = Session(chain, max_depth=5, on_overflow="raise")
        with pytest.raises(HistoryTooDeepError, match="max_depth=5") as caught:
            session.get_history("m9")
        assert (caught.value.leaf_id, caught.value.max_depth) == ("m9", 5)

    def test_truncate_flags_without_warning(self, chain):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            history = Session(chain, max_depth=5).get_history(on_overflow="truncate")
        assert ids(history) == [f"m{i}" for i in range(7, 12)] and history.truncated

    def test_a_call_overrides_the_sessions_mode(self, chain):
        session = Session(chain, max_depth=5, on_overflow="truncate")
        with pytest.raises(HistoryTooDeepError):
            session.get_history(on_overflow="raise")

    def test_a_cached_branch_read_again_is_still_flagged(self, chain):
        session = Session(chain, max_depth=5, on_overflow="truncate")
        first, second = session.get_history(), session.get_history()
        assert first == second and first.truncated and second.truncated

    def test_a_leaf_within_reach_of_a_cut_branch_is_not_flagged(self, chain):
        session = Session(chain, max_depth=5, on_overflow="truncate")
        assert session.get_history().truncated
        assert not session.get_history("m4").truncated

    def test_recent_history_counts_a_cut_as_truncated(self, chain):
        window = Session(chain, max_depth=5).get_recent_history(10**9)
        assert ids(window.messages) == [f"m{i}" for i in range(7, 12)] and window.truncated


class TestArguments:
    @pytest.mark.parametrize("mode", ["ignore", None, 3])
    def test_an_unknown_mode_is_refused(self, store, mode):
        with pytest.raises(ValueError, match="on_overflow must be one of"):
            Session(store, on_overflow=mode)
        if mode is not None:
            with pytest.raises(ValueError, match="on_overflow must be one of"):
                Session(store).get_history(on_overflow=mode)


class TestTheResult:
    def test_history_is_a_list_that_pickles_with_its_flag(self):
        history = History([{"id": "a", "role": "user", "parts": []}], truncated=True)
        copy = pickle.loads(pickle.dumps(history))
        assert copy == [{"id": "a", "role": "user", "parts": []}] and copy.truncated is True
        assert isinstance(copy, list)
