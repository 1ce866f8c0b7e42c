"""Token usage rows: what the API reports is read defensively, and what is stored fits its columns."""

from __future__ import annotations

import math

import pytest

from agentlab.chat._usage import Usage, record_usage, session_usage, usage_from_api
from agentlab.errors import InvalidArgumentError


def usage_rows(store):
    return store.rows("SELECT * EXCLUDE (created_at) FROM chat_usage ORDER BY seq")


class TestReadingTheApiUsage:
    def test_counts_are_read_and_missing_ones_are_zero(self):
        assert usage_from_api({"input_tokens": 12, "output_tokens": 3.0, "cache_read_input_tokens": None}) == \
            Usage(12, 3, 0, 0, 1)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -4, 10**30, "12", True])
    def test_an_unusable_count_reads_as_zero_instead_of_failing_the_turn(self, bad):
        assert usage_from_api({"input_tokens": bad, "output_tokens": 5}) == Usage(0, 5, 0, 0, 1)


class TestUsageValues:
    @pytest.mark.parametrize("bad", [-1, 1.5, math.nan, "3", None])
    def test_a_usage_holds_whole_counts_of_zero_or_more(self, bad):
        with pytest.raises(InvalidArgumentError, match="input_tokens"):
            Usage(input_tokens=bad)

    def test_sums_may_exceed_a_bigint(self):
        big = Usage(2**63 - 1, calls=1)
        assert (big + big).input_tokens == 2**64 - 2


class TestRecordingUsage:
    def test_a_row_is_recorded(self, store):
        record_usage(store, Usage(10, 5, 2, 1, 1), session_id="s", turn_id="t", step=1, model="claude-x")
        assert session_usage(store, "s") == Usage(10, 5, 2, 1, 1)

    @pytest.mark.parametrize(("usage", "options", "named"), [
        (Usage(2**63), {}, "input_tokens"),
        (Usage(1, cache_write_tokens=10**30), {}, "cache_write_tokens"),
        (Usage(1), {"step": 0}, "step"),
        (Usage(1), {"step": 2.5}, "step"),
        (Usage(1), {"purpose": "fun"}, "purpose"),
        (Usage(1), {"model": "claude-\udc00"}, "model"),
        (Usage(1), {"session_id": "\ud800"}, "session_id"),
        (Usage(1), {"stop_reason": 7}, "stop_reason"),
    ])
    def test_a_value_its_column_cannot_hold_is_refused_and_nothing_is_written(self, store, usage, options, named):
        record_usage(store, Usage(1, 1, 0, 0, 1))
        before = usage_rows(store)
        with pytest.raises(InvalidArgumentError, match=named):
            record_usage(store, usage, **options)
        assert usage_rows(store) == before
