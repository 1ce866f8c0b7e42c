"""Embedders: the hash embedder's contract, output validation, chunked encoding, and the real MiniLM."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from agentlab.errors import AgentlabError, EmbedderError
from agentlab.search._embedders import (
    Embedder,
    HashEmbedder,
    MiniLMEmbedder,
    check_embeddings,
    encode_batched,
)


class TestHashEmbedder:
    def test_it_returns_unit_float32_rows_in_input_order(self):
        embedder = HashEmbedder(32)
        vectors = embedder.encode(["alpha beta", "gamma", "alpha beta"])
        assert vectors.shape == (3, 32)
        assert vectors.dtype == np.float32
        assert vectors.flags.c_contiguous
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), [1.0, 1.0, 1.0], rtol=1e-6)
        assert np.array_equal(vectors[0], vectors[2])
        assert not np.array_equal(vectors[0], vectors[1])

    def test_texts_sharing_words_score_a_higher_cosine(self):
        embedder = HashEmbedder(256)
        query, related, unrelated = embedder.encode(
            ["Melanie adopted a puppy", "the puppy Melanie adopted is brown", "quarterly tax filing deadline"]
        )
        assert float(query @ related) > 0.4
        assert float(query @ related) > float(query @ unrelated) + 0.3

    def test_an_empty_text_gives_the_zero_vector(self):
        vectors = HashEmbedder(16).encode(["", "  ", "word"])
        assert np.array_equal(vectors[:2], np.zeros((2, 16), np.float32))
        assert np.linalg.norm(vectors[2]) == pytest.approx(1.0)

    def test_no_texts_give_an_empty_array(self):
        assert HashEmbedder(8).encode([]).shape == (0, 8)

    def test_model_id_names_the_dimension_and_the_protocol_is_satisfied(self):
        assert HashEmbedder(64).model_id == "hash-v1-64"
        assert HashEmbedder(384).model_id == "hash-v1-384"
        assert isinstance(HashEmbedder(), Embedder)
        assert isinstance(MiniLMEmbedder(), Embedder)

    def test_vectors_are_identical_in_another_process_with_another_hash_seed(self):
        texts = ["Deploy on Friday", "naïve café ünïcode"]
        code = (
            "import sys, numpy as np; from agentlab.search._embedders import HashEmbedder;"
            f"sys.stdout.write(HashEmbedder(24).encode({texts!r}).tobytes().hex())"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], env={"PYTHONHASHSEED": "12345", "PATH": ""},
            capture_output=True, text=True, check=True,
        ).stdout
        assert bytes.fromhex(out) == HashEmbedder(24).encode(texts).tobytes()

    def test_a_too_small_dimension_is_refused(self):
        with pytest.raises(ValueError, match="at least 2"):
            HashEmbedder(1)


class TestCheckEmbeddings:
    def test_valid_float64_lists_come_back_as_float32(self):
        out = check_embeddings([[0.5, 0.25], [1.0, -1.0]], 2, 2)
        assert out.dtype == np.float32
        assert out.tolist() == [[0.5, 0.25], [1.0, -1.0]]

    @pytest.mark.parametrize(
        ("vectors", "n", "dimension", "message"),
        [
            (np.zeros((3, 4), np.float32), 2, 4, r"shape \(3, 4\) for 2 texts"),
            (np.zeros(4, np.float32), 1, 4, r"shape \(4,\) for 1 texts"),
            (np.zeros((2, 5), np.float32), 2, 4, "5-dimensional vectors but declares dimension=4"),
            (np.zeros((2, 4), np.int64), 2, 4, "dtype int64, not floats"),
            ([["a", "b"]], 1, 2, "not floats"),
        ],
    )
    def test_a_wrong_shape_dimension_or_dtype_is_an_embedder_error(self, vectors, n, dimension, message):
        with pytest.raises(EmbedderError, match=message) as info:
            check_embeddings(vectors, n, dimension)
        assert isinstance(info.value, AgentlabError) and isinstance(info.value, ValueError)

    def test_nan_is_reported_with_the_text_number(self):
        vectors = np.ones((4, 3), np.float32)
        vectors[2, 1] = np.nan
        with pytest.raises(EmbedderError, match=r"NaN for text #2 \(0-based\); nothing was stored"):
            check_embeddings(vectors, 4, 3)

    def test_infinity_and_float32_overflow_are_reported(self):
        with pytest.raises(EmbedderError, match="infinite value for text #1"):
            check_embeddings(np.array([[1.0, 2.0], [np.inf, 0.0]]), 2, 2)
        with pytest.raises(EmbedderError, match="infinite value for text #0"):
            check_embeddings(np.array([[1e39, 0.0]]), 1, 2)

    def test_positions_map_rows_back_to_the_callers_texts(self):
        vectors = np.ones((2, 2), np.float32)
        vectors[1, 0] = np.nan
        with pytest.raises(EmbedderError, match="text #7"):
            check_embeddings(vectors, 2, 2, positions=[3, 7])


class _RecordingEmbedder:
    """A real HashEmbedder that remembers the size of each encode() call."""

    def __init__(self, inner: HashEmbedder) -> None:
        self.inner, self.model_id, self.dimension = inner, inner.model_id, inner.dimension
        self.calls: list[int] = []

    def encode(self, texts):
        self.calls.append(len(texts))
        return self.inner.encode(texts)


class TestEncodeBatched:
    def test_chunked_encoding_keeps_input_order(self):
        texts = [f"text number {i} " + "x" * (i % 7) for i in range(23)]
        recording = _RecordingEmbedder(HashEmbedder(16))
        out = encode_batched(recording, texts, chunk_size=5)
        assert recording.calls == [5, 5, 5, 5, 3]
        assert np.array_equal(out, HashEmbedder(16).encode(texts))

    def test_the_progress_bar_appears_only_for_more_than_one_chunk(self, capsys):
        encode_batched(HashEmbedder(8), ["a", "b", "c"], chunk_size=2, progress=True, desc="Embedding kb")
        assert "Embedding kb" in capsys.readouterr().err
        encode_batched(HashEmbedder(8), ["a", "b"], chunk_size=2, progress=True, desc="Embedding kb")
        assert "Embedding kb" not in capsys.readouterr().err

    def test_a_bad_chunk_names_the_original_text(self):
        class NaNOnSecret:
            model_id, dimension = "nan-on-secret", 4

            def encode(self, texts):
                return np.array([[np.nan] * 4 if t == "secret" else [1.0, 0, 0, 0] for t in texts])

        texts = ["aaaaaaaa", "bbbbbbb", "cccccc", "secret", "e"]
        with pytest.raises(EmbedderError, match="text #3"):
            encode_batched(NaNOnSecret(), texts, chunk_size=2)


class TestMiniLMEmbedderLoading:
    def test_constructing_it_imports_no_model_library(self):
        code = (
            "import sys; from agentlab.search._embedders import MiniLMEmbedder; e = MiniLMEmbedder();"
            "print(e.model_id, e.dimension, 'sentence_transformers' in sys.modules, 'torch' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.split() == ["all-MiniLM-L6-v2", "384", "False", "False"]

    def test_a_bad_batch_size_is_refused(self):
        with pytest.raises(ValueError, match="batch_size"):
            MiniLMEmbedder(batch_size=0)


@pytest.mark.slow
class TestMiniLMEmbedderModel:
    def test_it_gives_normalised_384_dimensional_vectors_from_one_shared_model(self):
        first, second = MiniLMEmbedder(), MiniLMEmbedder(batch_size=8)
        vectors = first.encode(["Melanie adopted a puppy", "The weather was rainy"])
        assert vectors.shape == (2, 384) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), [1.0, 1.0], rtol=1e-5)
        assert first.model is second.model
        assert first.encode([]).shape == (0, 384)

    def test_the_progress_path_gives_the_same_vectors(self):
        embedder = MiniLMEmbedder(batch_size=2)
        texts = [f"sentence {i} about {'dogs' if i % 2 else 'tax law'}" for i in range(40)]
        np.testing.assert_allclose(embedder.encode(texts, progress=True), embedder.encode(texts), atol=1e-5)
