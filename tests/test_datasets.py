"""Dataset loaders: the real LoCoMo file, a LongMemEval instance built here, user records, the bundled set."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agentlab.errors import DatasetError
from agentlab.eval.datasets import (
    Dataset,
    load_bundled,
    load_locomo,
    load_longmemeval,
    normalize_locomo_evidence,
    parse_date,
)
from agentlab.eval.records import load_records

LOCOMO_PATH = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "locomo" / "locomo10.json"
needs_locomo = pytest.mark.skipif(
    not LOCOMO_PATH.is_file(),
    reason=f"LoCoMo is not in the repository (CC BY-NC); these tests read it from {LOCOMO_PATH}, which is absent.",
)

# datasets.md §1.4: sample_id -> (sessions, turns, QA, c1, c2, c3, c4, c5)
LOCOMO_COUNTS = {
    "conv-26": (19, 419, 199, 32, 37, 13, 70, 47),
    "conv-30": (19, 369, 105, 11, 26, 0, 44, 24),
    "conv-41": (32, 663, 193, 31, 27, 8, 86, 41),
    "conv-42": (29, 629, 260, 37, 40, 11, 111, 61),
    "conv-43": (29, 680, 242, 31, 26, 14, 107, 64),
    "conv-44": (28, 675, 158, 30, 24, 7, 62, 35),
    "conv-47": (31, 689, 190, 20, 34, 13, 83, 40),
    "conv-48": (30, 681, 239, 21, 42, 10, 118, 48),
    "conv-49": (25, 509, 196, 37, 33, 13, 73, 40),
    "conv-50": (30, 568, 204, 32, 32, 7, 87, 46),
}


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_locomo(LOCOMO_PATH)


@needs_locomo
class TestLoCoMoLoaderMatchesThePublishedCounts:
    def test_totals_are_10_conversations_272_sessions_5882_turns_1986_questions(self, locomo):
        assert len(locomo.conversations) == 10
        assert sum(len(c.sessions) for c in locomo.conversations) == 272
        assert sum(1 for _ in locomo.iter_turns()) == 5882
        assert sum(1 for _ in locomo.iter_questions()) == 1986

    def test_categories_are_282_321_96_841_446(self, locomo):
        assert locomo.category_counts() == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}

    def test_every_conversation_matches_its_row_of_the_table(self, locomo):
        found = {}
        for c in locomo.conversations:
            cats = Counter(q.category for q in c.questions)
            found[c.id] = (len(c.sessions), len(c.turns), len(c.questions), *(cats[i] for i in range(1, 6)))
        assert found == LOCOMO_COUNTS

    def test_sessions_come_from_session_keys_not_date_keys(self, locomo):
        # conv-26 has session_20_date_time .. session_35_date_time but no session_20 .. session_35.
        conv = locomo.conversation("conv-26")
        assert [s.id for s in conv.sessions] == [f"session_{n}" for n in range(1, 20)]
        assert conv.sessions[0].date == "1:56 pm on 8 May, 2023"
        assert conv.turns[0].date == conv.sessions[0].date

    def test_speakers_turn_fields_and_captions_are_kept(self, locomo):
        conv = locomo.conversation("conv-26")
        assert conv.speakers == ["Caroline", "Melanie"]
        first = conv.turns[0]
        assert (first.id, first.speaker, first.session_id, first.index) == ("D1:1", "Caroline", "session_1", 0)
        captions = [t for _, t in locomo.iter_turns() if "blip_caption" in t.metadata]
        assert len(captions) == 1226
        assert sum(1 for _, t in locomo.iter_turns() if "img_url" in t.metadata) == 910
        assert sum(1 for _, t in locomo.iter_turns() if "query" in t.metadata) == 888


@needs_locomo
class TestLoCoMoEvidenceIsNormalised:
    def test_exactly_three_ids_are_dropped(self, locomo):
        dropped = [(c.id, d) for c, q in locomo.iter_questions() for d in q.metadata["dropped_evidence"]]
        assert sorted(dropped) == [("conv-42", "D"), ("conv-42", "D10:19"), ("conv-47", "D4:36")]

    def test_1536_questions_of_categories_1_to_4_keep_evidence(self, locomo):
        scoreable = [q for _, q in locomo.iter_questions((1, 2, 3, 4), with_evidence=True)]
        assert len(scoreable) == 1536
        assert Counter(q.category for q in scoreable) == {1: 282, 2: 321, 3: 92, 4: 841}

    def test_the_four_empty_evidence_questions_are_category_3(self, locomo):
        empty = [(q.id, q.category) for _, q in locomo.iter_questions() if not q.evidence]
        assert empty == [("conv-26/q30", 3), ("conv-26/q46", 3), ("conv-50/q39", 3), ("conv-50/q42", 3)]

    @pytest.mark.parametrize(
        ("question_id", "evidence"),
        [
            ("conv-26/q37", ["D8:6", "D9:17"]),  # "D8:6; D9:17"
            ("conv-49/q31", ["D9:1", "D4:4", "D4:6"]),  # "D9:1 D4:4 D4:6"
            ("conv-49/q38", ["D22:1", "D22:2", "D9:10", "D9:11"]),
            ("conv-49/q46", ["D21:18", "D21:22", "D11:15", "D11:19"]),
            ("conv-43/q18", ["D1:14", "D2:7", "D4:7", "D5:15", "D11:26", "D20:21", "D26:36"]),  # "D:11:26"
            ("conv-50/q69", ["D30:5"]),  # "D30:05"
            ("conv-42/q88", ["D1:18", "D1:20"]),  # "D" dropped
            ("conv-50/q5", ["D4:5", "D5:5"]),  # "D4:5" listed twice
        ],
    )
    def test_malformed_ids_parse_as_documented(self, locomo, question_id, evidence):
        conv = locomo.conversation(question_id.split("/")[0])
        question = next(q for q in conv.questions if q.id == question_id)
        assert question.evidence == evidence

    def test_every_kept_id_is_a_turn_of_its_conversation(self, locomo):
        for conv, question in locomo.iter_questions():
            ids = {t.id for t in conv.turns}
            assert set(question.evidence) <= ids, question.id
            assert len(set(question.evidence)) == len(question.evidence)


@needs_locomo
class TestLoCoMoAnswers:
    def test_adversarial_questions_have_no_answer_and_keep_the_trap(self, locomo):
        adversarial = [q for _, q in locomo.iter_questions((5,))]
        assert len(adversarial) == 446
        assert all(q.answer is None and "adversarial_answer" in q.metadata for q in adversarial)
        both = [q for q in adversarial if "locomo_answer" in q.metadata]
        assert [(q.id, q.metadata["locomo_answer"], q.metadata["adversarial_answer"]) for q in both] == [
            ("conv-26/q167", "No", "Yes"),
            ("conv-26/q178", "No", "Yes"),
        ]

    def test_integer_answers_become_strings(self, locomo):
        answers = [q.answer for _, q in locomo.iter_questions((1, 2, 3, 4))]
        assert all(isinstance(a, str) for a in answers)
        conv = locomo.conversation("conv-26")
        assert [conv.questions[i].answer for i in (1, 40, 75)] == ["2022", "2", "3"]

    def test_frames_have_one_row_per_turn_and_question(self, locomo):
        turns, questions = locomo.turns_df(), locomo.questions_df()
        assert turns.shape[0] == 5882 and questions.shape[0] == 1986
        assert list(turns.columns[:7]) == ["conversation_id", "session_id", "turn_id", "index", "date", "speaker", "text"]
        assert turns["blip_caption"].notna().sum() == 1226
        assert questions.groupby("category").size().to_dict() == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}


class TestNormalizeLocomoEvidenceOnItsOwn:
    KNOWN = ["D1:1", "D1:2", "D11:26", "D30:5", "D8:6", "D9:17"]

    @pytest.mark.parametrize(
        ("raw", "kept", "dropped"),
        [
            (["D8:6; D9:17"], ["D8:6", "D9:17"], []),
            (["D:11:26"], ["D11:26"], []),
            (["D30:05"], ["D30:5"], []),
            (["(D1:1)", "D1:2,D1:1"], ["D1:1", "D1:2"], []),
            (["D", "D4:36", "D1:2"], ["D1:2"], ["D", "D4:36"]),
            ([" D1:1 "], ["D1:1"], []),
            ([], [], []),
        ],
    )
    def test_cases(self, raw, kept, dropped):
        assert normalize_locomo_evidence(raw, self.KNOWN) == (kept, dropped)


class TestLoCoMoErrors:
    def test_a_missing_file_names_the_path(self, tmp_path):
        with pytest.raises(DatasetError, match=r"not found: .*nope.json"):
            load_locomo(tmp_path / "nope.json")

    def test_invalid_json_is_reported(self, tmp_path):
        (tmp_path / "bad.json").write_text("{not json")
        with pytest.raises(DatasetError, match="not valid JSON"):
            load_locomo(tmp_path / "bad.json")

    def test_a_dict_at_the_top_is_not_locomo(self, tmp_path):
        (tmp_path / "d.json").write_text("{}")
        with pytest.raises(DatasetError, match="JSON list of samples"):
            load_locomo(tmp_path / "d.json")

    def test_the_missing_key_is_named(self, tmp_path):
        sample = {"sample_id": "x", "conversation": {"speaker_a": "A", "speaker_b": "B",
                                                     "session_1": [{"speaker": "A", "text": "hi"}]}, "qa": []}
        (tmp_path / "m.json").write_text(json.dumps([sample]))
        with pytest.raises(DatasetError, match="sample x: session_1 turn #0 has no 'dia_id' key"):
            load_locomo(tmp_path / "m.json")


def _longmemeval_instance(question_id: str, answer) -> dict:
    return {
        "question_id": question_id,
        "question_type": "single-session-user",
        "question": "What breed is my dog?",
        "answer": answer,
        "question_date": "2023/05/30 (Tue) 23:40",
        "haystack_session_ids": ["sharegpt_abc_0", "answer_1a2b"],
        "haystack_dates": ["2023/05/01 (Mon) 10:00", "2023/05/20 (Sat) 09:15"],
        "haystack_sessions": [
            [{"role": "user", "content": "Recipe ideas?"}, {"role": "assistant", "content": "Try soup."}],
            [
                {"role": "user", "content": "I walked my corgi today.", "has_answer": True},
                {"role": "assistant", "content": "Corgis love walks.", "has_answer": True},
                {"role": "user", "content": "Any tips for rain?", "has_answer": False},
                {"role": "user", "content": "My corgi is called Pip.", "has_answer": True},
            ],
        ],
        "answer_session_ids": ["answer_1a2b"],
    }


class TestLongMemEvalLoader:
    def test_each_question_is_its_own_conversation_with_turn_level_evidence(self, tmp_path):
        path = tmp_path / "lme.json"
        path.write_text(json.dumps([_longmemeval_instance("e47becba", "corgi"), _longmemeval_instance("x9_abs", 3)]))
        data = load_longmemeval(path)
        assert [c.id for c in data.conversations] == ["e47becba", "x9_abs"]
        conv = data.conversations[0]
        assert [t.id for t in conv.turns] == [
            "sharegpt_abc_0_1", "sharegpt_abc_0_2", "answer_1a2b_1", "answer_1a2b_2", "answer_1a2b_3", "answer_1a2b_4"
        ]
        question = conv.questions[0]
        # User turns with has_answer only: the assistant turn is ignored, index counts every turn.
        assert question.evidence == ["answer_1a2b_1", "answer_1a2b_4"]
        assert question.category == "single-session-user"
        assert question.metadata == {
            "question_type": "single-session-user",
            "question_date": "2023/05/30 (Tue) 23:40",
            "answer_session_ids": ["answer_1a2b"],
            "evidence_session_ids": ["answer_1a2b"],
            "abstention": False,
            "dropped_evidence": [],
        }
        assert conv.sessions[1].date == "2023/05/20 (Sat) 09:15"
        assert conv.turns[0].metadata == {"has_answer": False}  # a missing key counts as false

    def test_abstention_is_flagged_and_answers_are_strings(self, tmp_path):
        path = tmp_path / "lme.json"
        path.write_text(json.dumps([_longmemeval_instance("x9_abs", 3)]))
        question = load_longmemeval(path).conversations[0].questions[0]
        assert question.metadata["abstention"] is True
        assert question.answer == "3"

    def test_an_answer_session_without_user_answer_turns_is_not_session_gold(self, tmp_path):
        item = _longmemeval_instance("q1", "corgi")
        for turn in item["haystack_sessions"][1]:
            turn["has_answer"] = turn["role"] == "assistant"
        (tmp_path / "l.json").write_text(json.dumps([item]))
        question = load_longmemeval(tmp_path / "l.json").conversations[0].questions[0]
        assert question.evidence == []
        assert question.metadata["evidence_session_ids"] == []

    def test_parallel_lists_of_different_lengths_are_rejected(self, tmp_path):
        item = _longmemeval_instance("q1", "corgi")
        item["haystack_dates"] = item["haystack_dates"][:1]
        (tmp_path / "l.json").write_text(json.dumps([item]))
        with pytest.raises(DatasetError, match=r"q1: .*same length"):
            load_longmemeval(tmp_path / "l.json")

    def test_a_missing_key_is_named(self, tmp_path):
        item = _longmemeval_instance("q1", "corgi")
        del item["haystack_sessions"]
        (tmp_path / "l.json").write_text(json.dumps([item]))
        with pytest.raises(DatasetError, match="item #0 has no 'haystack_sessions' key"):
            load_longmemeval(tmp_path / "l.json")


TURN_ROWS = [
    {"conversation_id": "c1", "session_id": "s1", "session_date": "2024-01-02", "turn_id": "t1",
     "speaker": "Ana", "text": "I adopted a cat.", "mood": "happy"},
    {"conversation_id": "c1", "session_id": "s1", "session_date": "2024-01-02", "turn_id": "t2",
     "speaker": "Ben", "text": "What's its name?"},
    {"conversation_id": "c1", "session_id": "s2", "session_date": "2024-02-01", "turn_id": "t3",
     "speaker": "Ana", "text": "Miso is doing well."},
    {"conversation_id": "c2", "session_id": "s1", "speaker": "Cy", "text": "No ids here."},
]
QUESTION_ROWS = [
    {"conversation_id": "c1", "question_id": "q1", "question": "What pet does Ana have?", "answer": "A cat",
     "category": 4, "evidence": "t1; t3"},
    {"conversation_id": "c1", "question_id": "q2", "question": "Cat's name?", "answer": None,
     "category": "1", "evidence": ["t3", "t3"]},
    {"conversation_id": "c2", "question": "Anything?", "evidence": "s1_1"},
]


class TestLoadRecords:
    def _check(self, data: Dataset) -> None:
        c1, c2 = data.conversations
        assert [(s.id, s.date, [t.id for t in s.turns]) for s in c1.sessions] == [
            ("s1", "2024-01-02", ["t1", "t2"]), ("s2", "2024-02-01", ["t3"])
        ]
        assert c1.speakers == ["Ana", "Ben"]
        assert c1.turns[0].metadata == {"mood": "happy"}
        assert [t.id for t in c2.turns] == ["s1_1"]  # a missing turn id is generated
        assert [(q.id, q.answer, q.category, q.evidence) for q in c1.questions] == [
            ("q1", "A cat", 4, ["t1", "t3"]), ("q2", None, 1, ["t3"])
        ]
        assert [(q.id, q.evidence) for q in c2.questions] == [("c2/q0", ["s1_1"])]

    def test_from_dataframes(self):
        import pandas as pd

        self._check(load_records(pd.DataFrame(TURN_ROWS), pd.DataFrame(QUESTION_ROWS)))

    def test_from_jsonl_files(self, tmp_path):
        turns, questions = tmp_path / "turns.jsonl", tmp_path / "questions.jsonl"
        turns.write_text("\n".join(json.dumps(r) for r in TURN_ROWS) + "\n")
        questions.write_text("\n".join(json.dumps(r) for r in QUESTION_ROWS))
        data = load_records(turns, questions, name="mine")
        assert data.name == "mine"
        self._check(data)

    def test_unknown_evidence_raises_or_is_dropped(self):
        rows = [{"conversation_id": "c1", "question": "?", "evidence": "t1;t9"}]
        with pytest.raises(DatasetError, match=r"'t9'.*unknown_evidence='drop'"):
            load_records(TURN_ROWS, rows)
        question = load_records(TURN_ROWS, rows, unknown_evidence="drop").conversations[0].questions[0]
        assert (question.evidence, question.metadata["dropped_evidence"]) == (["t1"], ["t9"])

    def test_missing_columns_and_unknown_conversations_are_named(self, tmp_path):
        with pytest.raises(DatasetError, match="turn row #0 has no value for 'text'"):
            load_records([{"conversation_id": "c", "session_id": "s", "speaker": "A"}])
        with pytest.raises(DatasetError, match="conversation 'zz', which has no turns"):
            load_records(TURN_ROWS, [{"conversation_id": "zz", "question": "?"}])
        with pytest.raises(DatasetError, match="does not exist"):
            load_records(tmp_path / "absent.jsonl")

    def test_duplicate_turn_ids_are_rejected(self):
        with pytest.raises(DatasetError, match="'t1' appears twice in conversation 'c1'"):
            load_records([*TURN_ROWS, TURN_ROWS[0]])


class TestBundledDataset:
    def test_it_loads_with_the_promised_shape(self):
        data = load_bundled()
        assert data.name == "agentlab-mini"
        assert len(data.conversations) == 3
        for conv in data.conversations:
            assert 4 <= len(conv.sessions) <= 6
            assert all(15 <= len(s.turns) <= 25 for s in conv.sessions)
            assert all(parse_date(s.date) is not None for s in conv.sessions)
            assert len(conv.speakers) == 2 and {t.speaker for t in conv.turns} == set(conv.speakers)
        assert sum(1 for _ in data.iter_questions()) == 40
        assert set(data.category_counts()) == {1, 2, 3, 4}

    def test_every_evidence_id_exists_as_written(self):
        data = load_bundled()
        for _conv, question in data.iter_questions():
            assert question.evidence, question.id
            assert question.metadata["raw_evidence"] == question.evidence  # nothing needed fixing
            assert question.metadata["style"] in ("lexical", "paraphrase")
        multi_hop = [q for _, q in data.iter_questions((1,))]
        assert all(len({e.split(":")[0] for e in q.evidence}) >= 2 for q in multi_hop)

    def test_sessions_are_in_date_order(self):
        for conv in load_bundled().conversations:
            dates = [parse_date(s.date) for s in conv.sessions]
            assert dates == sorted(dates)


class TestParseDate:
    def test_both_benchmark_formats(self):
        assert parse_date("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08T13:56:00"
        assert parse_date("2023/05/30 (Tue) 23:40").isoformat() == "2023-05-30T23:40:00"
        assert parse_date("next tuesday") is None and parse_date(None) is None


class TestLoadRecordsFromCsv:
    def test_ids_stay_strings_and_digit_categories_become_ints(self, tmp_path):
        turns, questions = tmp_path / "turns.csv", tmp_path / "questions.csv"
        turns.write_text("conversation_id,session_id,turn_id,speaker,text\nc,s,007,Ana,Hello there\nc,s,008,Ben,Hi\n")
        questions.write_text('conversation_id,question,category,evidence\nc,Who greets?,4,007;008\n')
        conv = load_records(turns, questions).conversations[0]
        assert [t.id for t in conv.turns] == ["007", "008"]
        assert [(q.category, q.evidence, q.answer) for q in conv.questions] == [(4, ["007", "008"], None)]
