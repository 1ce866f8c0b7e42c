"""The arguments and the result of history reads past ``max_depth``.

How each storage reads a branch longer than ``max_depth`` (a warning and a flag, or an error when asked for) is
tested in ``tests/test_storage_conformance.py``, on the DuckDB and the in-memory storage alike."""

from __future__ import annotations

import pickle

import pytest

from agentlab.session._messages import History
from agentlab.session._session import Session


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
