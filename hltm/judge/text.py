"""Tokenizer for BM25 over resumes and vacancies (English and Russian).

Why a tokenizer of our own: BM25 is in the pool to rescue candidates the vector search never
returns, and those candidates are found by *rare exact terms* ("Erlang", "C#", "1С"). Generic
tokenizers (bm25s's default ``\\w\\w+`` pattern included) drop ``C#``, ``C++`` and ``R`` and
split ``.NET`` and ``Node.js``, which are exactly the terms that matter here.

Rules, in order (deterministic, no stemming of tech terms):

* Unicode NFKC, ``ё`` → ``е``; everything is lowercased.
* Tech terms with punctuation survive as one token: ``c#``, ``f#``, ``c++`` (also ``C++17``),
  ``.net`` (``ASP.NET`` → ``asp`` + ``.net``), ``node.js``/``vue.js``/…, ``ci/cd``,
  ``tcp/ip``, ``pl/sql``, ``ui/ux``, ``r&d``, ``objective-c``. A Cyrillic ``С`` typed for a
  Latin ``C`` in ``С#``/``С++`` is repaired (a common slip in Russian resumes).
* Case decides the ambiguous short words, because case is the only cheap signal there is:
  ``R`` and ``C`` count as languages only when written as a capital standing alone (not in
  ``R&D``, ``C-level``, ``Go-to-market``; ``Go-разработчик`` is kept); ``Go``/``GO`` is the
  language while lowercase ``go`` is the English verb and dropped; ``IT`` (the industry) is
  kept while lowercase ``it`` is a stopword.
* Other single characters and pure numbers are dropped; EN + RU stopwords are dropped.
* A few spelling aliases are folded (``golang`` → ``go``, ``dotnet`` → ``.net``, ``csharp`` →
  ``c#``, ``cpp`` → ``c++``, ``nodejs`` → ``node.js``, ``k8s`` → ``kubernetes``).

The same function tokenizes documents and queries, so both sides always agree.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable

from hltm.judge.lexicon import GENERIC_REQUIREMENT_STEMS_RU, GENERIC_REQUIREMENT_WORDS

__all__ = [
    "ENGLISH_STOPWORDS",
    "RUSSIAN_STOPWORDS",
    "STOPWORDS",
    "TERM_ALIASES",
    "is_generic",
    "key_terms",
    "stem",
    "tokenize",
]


def _words(block: str) -> frozenset[str]:
    return frozenset(block.split())


ENGLISH_STOPWORDS: frozenset[str] = _words(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each etc few for
    from further had has have having he her here hers herself him himself his how i if in into
    is it its itself just me more most my myself no nor not of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves per via eg ie go
    """
)

RUSSIAN_STOPWORDS: frozenset[str] = _words(
    """
    а без более бы был была были было быть в вам вас весь во вот все всего всех вы где да даже
    для до его ее ей ею если есть еще же за здесь и из или им их к как какой когда кто ли либо
    между меня мне много может мы на над надо наш не него нее нет ни них но ну о об однако он
    она они оно от очень по под при про с со так также такой там те тем то того тоже той только
    том ту ты у уже хотя чего чей чем что чтобы чье эта эти это этот я т д др пр
    """
)

STOPWORDS: frozenset[str] = ENGLISH_STOPWORDS | RUSSIAN_STOPWORDS

TERM_ALIASES: dict[str, str] = {
    "golang": "go",
    "dotnet": ".net",
    "csharp": "c#",
    "cpp": "c++",
    "cplusplus": "c++",
    "nodejs": "node.js",
    "k8s": "kubernetes",
}

# Words whose meaning depends on case: the exact original spelling -> token.
_CASE_SENSITIVE: dict[str, str] = {"R": "r", "C": "c", "Go": "go", "GO": "go", "IT": "it"}

# Characters joining a capital letter into an abbreviation ("R&D", "R'n'D"), not a language.
_ABBREVIATION_JOINERS = frozenset("&'’")


def _is_latin_letter(ch: str) -> bool:
    return ch.isascii() and ch.isalpha()


_TOKEN_RE = re.compile(
    r"""
      (?P<sharp>(?<![^\W_])[cfсj](?:\#|\+\+)\d*(?![^\W\d_]))   # c#, f#, c++, c++17, Cyrillic с#
    | (?P<dotnet>\.net(?![^\W_]))                             # .net, asp.net -> asp + .net
    | (?P<js>(?<![^\W_])[^\W_]+\.js(?![^\W_]))                # node.js, vue.js
    | (?P<slash>(?<![^\W_])(?:ci/cd|tcp/ip|pl/sql|ui/ux|r&d|objective-c)(?![^\W_]))
    | (?P<word>[^\W_]+)
    """,
    re.IGNORECASE | re.VERBOSE,
)


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("ё", "е").replace("Ё", "Е")


def _word_token(raw: str, text: str, start: int, end: int) -> str | None:
    """Decide what a plain word found at ``text[start:end]`` becomes; None drops it."""
    if raw in _CASE_SENSITIVE:
        before = text[start - 1] if start > 0 else ""
        after = text[end] if end < len(text) else ""
        if before in _ABBREVIATION_JOINERS or after in _ABBREVIATION_JOINERS:
            return None
        # "C-level", "go-live", "Go-to-market" are not languages; "Go-разработчик" is.
        after2 = text[end + 1] if end + 1 < len(text) else ""
        if before == "-" or (after == "-" and _is_latin_letter(after2)):
            return None
        return _CASE_SENSITIVE[raw]
    low = raw.lower()
    if len(low) < 2 or low.isdigit() or low in STOPWORDS:
        return None
    return TERM_ALIASES.get(low, low)


def tokenize(text: str | None, stemmer: Callable[[str], str] | None = None) -> list[str]:
    """Split ``text`` into BM25 tokens, keeping tech terms and Cyrillic words intact.

    ``stemmer`` (optional) is applied to plain alphabetic words only, never to tech terms
    (``c#``, ``.net``, ``node.js``, ``go``, ``r`` …) and never to aliases.
    """
    if not text:
        return []
    norm = _normalise(text)
    tokens: list[str] = []
    for m in _TOKEN_RE.finditer(norm):
        kind = m.lastgroup
        raw = m.group()
        if kind == "sharp":
            base = raw.lower().rstrip("0123456789")
            tokens.append("c" + base[1:] if base[0] == "с" else base)
        elif kind == "dotnet":
            tokens.append(".net")
        elif kind in ("js", "slash"):
            tokens.append(raw.lower())
        else:
            tok = _word_token(raw, norm, m.start(), m.end())
            if tok is None:
                continue
            if stemmer is not None and tok == raw.lower() and tok.isalpha():
                tok = stemmer(tok)
            tokens.append(tok)
    return tokens


_EN_SUFFIXES = (
    "izations", "ization", "ations", "ation", "ments", "ment", "ings", "ing", "ities", "ity",
    "ical", "ics", "ies", "ied", "ants", "ant", "ers", "er", "ed", "es", "al", "ive", "ly", "s",
    "e", "y",
)  # fmt: skip


@functools.lru_cache(maxsize=65536)
def stem(token: str) -> str:
    """Light stemming of plain words, identical on both sides of a comparison (memoised: the
    same words recur in every resume).

    English: strip one common suffix ("testing" → "test", "statistics" → "statist"). Russian:
    keep the first six letters (case endings vary, stems rarely do). Tech terms with symbols
    (c#, .net, node.js) and short words are left alone.
    """
    if not token.isalpha() or len(token) < 5:
        return token
    if token.isascii():
        for suffix in _EN_SUFFIXES:
            if token.endswith(suffix) and len(token) - len(suffix) >= 4:
                return token[: -len(suffix)]
        return token
    return token[:6] if len(token) > 6 else token


def is_generic(token: str) -> bool:
    """A filler word of requirement lines ("experience", "strong", "опыт"…)."""
    if token in GENERIC_REQUIREMENT_WORDS:
        return True
    return any(token.startswith(prefix) for prefix in GENERIC_REQUIREMENT_STEMS_RU)


def key_terms(requirement: str) -> list[str]:
    """What a requirement asks to see in the resume, filler words removed."""
    return list(_key_terms(requirement))


@functools.lru_cache(maxsize=8192)
def _key_terms(requirement: str) -> tuple[str, ...]:
    """Memoised: a vacancy's requirements are read again for every resume it is judged with."""
    out: list[str] = []
    for tok in tokenize(requirement):
        if is_generic(tok):
            continue
        root = stem(tok)
        if root not in out:
            out.append(root)
    return tuple(out)
