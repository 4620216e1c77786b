"""The language of a text, for rows whose file has no language column.

py3langid's bundled model (naive Bayes over byte n-grams, no download), restricted to the
languages the schema accepts, so every answer is a valid value. Loaded once per process, on the
first file that needs it."""

from __future__ import annotations

from functools import cache

from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

from hltm.sources.schema import LANGUAGES

# A resume's or posting's opening says its language; reading all of a long one costs time only.
DETECT_CHARS = 2_000


@cache
def _identifier() -> LanguageIdentifier:
    identifier = LanguageIdentifier.from_modelpath(MODEL_DIR / MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(LANGUAGES))
    return identifier


def detect_language(text: str | None) -> str | None:
    """The schema language `text` is written in, or None when it has no letters to tell by."""
    if not text or not any(ch.isalpha() for ch in text[:DETECT_CHARS]):
        return None
    language, _ = _identifier().classify(text[:DETECT_CHARS])
    return str(language)
