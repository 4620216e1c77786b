"""A local OpenAI-protocol server for a test module, and the LLM settings that point at it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel

from hltm.llm import LLM, Task
from hltm.llm.openai_backend import ENDPOINTS
from hltm.llm.registry import register_task
from hltm.settings import Settings
from hltm_devkit.openai_server import LocalOpenAIServer


class WordStats(BaseModel):
    words: list[str]
    count: int
    source_id: str


def _word_stats(payload: dict[str, Any]) -> dict[str, Any]:
    words = payload["text"].split()
    return {"words": words, "count": len(words), "source_id": payload["id"]}


WORD_TASK = register_task(
    Task(
        name="protocol_test_words",
        version="1",
        system="You split text into words.",
        user="Split the text of the payload into words; count them; repeat the source id.",
        output_model=WordStats,
        offline=_word_stats,
    )
)


def words(text: str, source_id: str = "doc-1") -> dict[str, Any]:
    return {"id": source_id, "text": text}


@pytest.fixture(scope="module")
def server() -> Iterator[LocalOpenAIServer]:
    with LocalOpenAIServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _clean_server(server: LocalOpenAIServer) -> Iterator[None]:
    server.clear_faults()
    server.wait_idle()  # an answer abandoned by an earlier test's timeout is not counted here
    server.reset_stats()
    ENDPOINTS.forget()  # what a fault taught about the endpoint must not leak into other tests
    yield
    server.clear_faults()
    ENDPOINTS.forget()


def openai_settings(server: LocalOpenAIServer, **overrides: Any) -> Settings:
    options: dict[str, Any] = {
        "llm_backend": "openai",
        "openai_base_url": server.base_url,
        "openai_api_key": "test",
        "llm_timeout_s": 1,
        "llm_max_retries": 2,
        "llm_timeout_backoff_s": 0.6,  # the timeout fault's 1.5 s answer is over by then
    }
    return Settings.from_env(**{**options, **overrides})


def quick(llm: LLM) -> LLM:
    """Short pauses between our retries (the Retry-After a server sends is still honoured)."""
    llm.backend.limits = replace(llm.backend.limits, backoff_s=0.01)
    return llm
