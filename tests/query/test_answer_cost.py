"""What an answer computes that the memory build already did: the offline answer compares each
sentence of its context with the question by e5, and those sentences are embedded when their
node is built, not at every answer (on the really built session world)."""

from __future__ import annotations

from typing import Any

import bm25s
import pytest

from hltm import e5_onnx, embeddings
from hltm.query.engine import QueryEngine
from hltm.query.scope import Identity
from tests.support.query import BuiltWorld, built_world, engine  # noqa: F401


def test_an_answer_embeds_its_question_not_the_statements_of_its_context(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A process that has embedded nothing yet: what the answer needs comes from the stores.
    monkeypatch.setattr(embeddings, "_SHORT_MEMO", {})
    monkeypatch.setattr(embeddings, "_SHORT_UNSTORED", set())
    embedded: list[str] = []
    encode = e5_onnx.E5Onnx.encode

    def counted(model: e5_onnx.E5Onnx, texts: list[str], is_query: bool = False):  # type: ignore[no-untyped-def]
        if not is_query:
            embedded.extend(texts)
        return encode(model, texts, is_query)

    monkeypatch.setattr(e5_onnx.E5Onnx, "encode", counted)
    project = built_world.projects()[0]
    question = "What did the hiring manager say about the timeline?"
    result = engine.ask(Identity("project", project), question, log=False)
    statements = [q["answer"] for q in result.context["qa"]]
    assert result.citations or result.nearest, result.answer
    assert statements, "the answer should have had prepared answers to compare"
    assert embedded == [embeddings.short_key(question)], embedded


def test_a_question_asked_again_of_its_scope_reuses_its_pools_lexical_ranking(
    built_world: BuiltWorld,  # noqa: F811
    engine: QueryEngine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[int] = []
    index = bm25s.BM25.index

    def counted(self: bm25s.BM25, corpus: list[list[str]], **kwargs: Any) -> Any:
        built.append(len(corpus))
        return index(self, corpus, **kwargs)

    monkeypatch.setattr(bm25s.BM25, "index", counted)
    seat = Identity("seat", built_world.seats()[0])
    question = "Which projects mention a relocation budget?"
    first = engine.ask(seat, question, log=False)
    again = engine.ask(seat, question, log=False)
    assert len(built) == 1 and built[0] > 1, built  # the second answer ranked nothing anew
    assert (again.context, again.answer) == (first.context, first.answer)
