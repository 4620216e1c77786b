"""The Chroma vector index: embedded `PersistentClient` by default, a Chroma server when configured.

We always hand Chroma our own vectors and our own embedding function: Chroma's default downloads
a model at run time, which fails offline and would silently use a different model from ours.
Collections use cosine space; vectors are normalised, so distance = 1 - cosine.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from typing import Any

import chromadb
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings as ChromaSettings
from chromadb.utils.embedding_functions import register_embedding_function

from hltm.embeddings import CachedEmbedder, make_embedder
from hltm.settings import Settings

_NAME_OK = re.compile(r"[^a-zA-Z0-9._-]")


@register_embedding_function
class HltmEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma's view of our embedder (passages for documents, queries for searches)."""

    def __init__(self, embedder: CachedEmbedder | None = None) -> None:
        self._embedder = embedder

    @property
    def embedder(self) -> CachedEmbedder:
        if self._embedder is None:
            self._embedder = make_embedder(Settings.from_env())
        return self._embedder

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.embedder.passages(list(input)))

    def embed_query(self, input: Documents) -> Embeddings:
        return [self.embedder.query(text) for text in input]

    @staticmethod
    def name() -> str:
        return "hltm"

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> HltmEmbeddingFunction:
        return HltmEmbeddingFunction()


def collection_name(prefix: str, key: str) -> str:
    """Chroma names allow [a-zA-Z0-9._-], 3–512 chars, alphanumeric at both ends. A key that
    needs sanitising gets a hash of itself appended, so distinct keys never share a collection."""
    raw = f"{prefix}-{key}"
    name = _NAME_OK.sub("-", raw).strip("-._")
    if name != raw:
        name = f"{name[:400]}-{hashlib.sha1(key.encode()).hexdigest()[:12]}".strip("-._")
    return name if len(name) >= 3 else f"{name}-xx"


@cache
def _client(settings: Settings) -> ClientAPI:
    chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
    if settings.chroma_host:
        return chromadb.HttpClient(
            host=settings.chroma_host, port=settings.chroma_port, settings=chroma_settings
        )
    settings.chroma_path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(settings.chroma_path), settings=chroma_settings)


class VectorStore:
    """One client, collections created on demand with our embedding function and cosine space."""

    def __init__(self, settings: Settings, embedder: CachedEmbedder) -> None:
        self.client = _client(settings)
        self.embedding_function = HltmEmbeddingFunction(embedder)

    def collection(self, name: str) -> Collection:
        return self.client.get_or_create_collection(
            name,
            embedding_function=self.embedding_function,  # type: ignore[arg-type]
            configuration={"hnsw": {"space": "cosine"}},
        )

    def existing(self, name: str) -> Collection | None:
        """A collection that exists already, never created by a reader."""
        try:
            return self.client.get_collection(name, embedding_function=self.embedding_function)  # type: ignore[arg-type]
        except (chromadb.errors.NotFoundError, ValueError):
            return None

    def list_names(self) -> list[str]:
        return sorted(c.name for c in self.client.list_collections())

    def drop(self, name: str) -> None:
        if self.existing(name) is not None:
            self.client.delete_collection(name)
