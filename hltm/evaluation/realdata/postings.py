"""Facet extraction on real job postings, scored per field against their structured columns.

Each posting becomes one project (contract = seat = the company, project = the posting) whose
only document is its free text: the LinkedIn `description` (EN), or the hh.ru `name` with the
`snippet_requirement` / `snippet_responsibility` texts (RU). The structured columns never enter
the sources; they are the reference. The real ingest and memory build make the facets.

**Matching rules** (the same for every system and written before looking at any output):

* Per field, every predicted value of a labelled posting is either right or wrong:
  precision = right values / predicted values, recall = labelled postings with at least one
  right value / labelled postings, F1 their harmonic mean. A posting whose column is blank is
  not labelled for that field and is left out (a blank is not a "no": LinkedIn leaves salary
  blank on many postings whose text states one). Remote is the exception: LinkedIn labels only
  `remote_allowed = 1`, so a blank counts as "not remote" and precision is a lower bound.
* **location** — both sides are reduced to (city, region) (`Princeton, NJ` → princeton / NJ;
  `New York City Metropolitan Area` → new york; Cyrillic names to their GeoNames English name)
  and cities that the hub gazetteer groups are one city (`Palo Alto` ≡ `San Francisco Bay
  Area`). Equal cities match (and regions, when both state one). A reference without a city (a
  country or a state) is matched by a value in that country or state (a bare well-known city
  by the region of the largest city of that name: `Austin` is in Texas). A LinkedIn metro area
  named by its principal cities (`Raleigh-Durham-Chapel Hill Area`) is matched by each of them.
* **salary** — the currency must be equal (`$` = USD; `₽`, `руб`, hh.ru's `RUR` = RUB) and
  every end both sides state must agree within 1% (`from 80,000` states only the low end).
  **salary period** is scored apart: LinkedIn's `pay_period` (HOURLY → hour, YEARLY → year …);
  hh.ru salaries are monthly.
* **work type** — LinkedIn `formatted_work_type` (Full-time, Part-time, Contract, Temporary,
  Internship, Volunteer; `Other` is unlabelled) and hh.ru `employment_name` (Полная → full-time,
  Частичная → part-time, Проектная работа → contract or freelance, Стажировка → internship;
  hh.ru's own `internship = true` flag adds internship) against the `employment_type` facets.
* **work format** — hh.ru `work_format` (Удалённо / Гибрид / На месте работодателя, several
  per posting) as remote / hybrid / onsite against the `work_mode` facets; LinkedIn `remote`.
* **seniority** — LinkedIn `formatted_experience_level`: Internship → intern, Entry level →
  intern or junior, Associate → junior or middle, Mid-Senior level → middle, senior, lead or
  principal, Director and Executive → head.
* **experience** — hh.ru `experience_name` bands (none, 1–3, 3–6, 6+ years) against the low end
  of the `years_experience` facets.
* **skills** — LinkedIn `skills_desc` (free text, kept out of the sources) read with the same
  skills vocabulary; each vocabulary skill is a labelled item.

Besides the figures over every labelled posting, each field is also scored on the postings
whose text *states* the reference at all (a literal check independent of the extractor: the
reference city as a whole name, in any Russian case ending, `St`/`Saint` alike, one city of a
metro area, for a state its name or `, ST` code, for the United States any state; an amount
with a currency mark; a period word beside an amount; the work-type or work-format phrase,
"удалённая работа" but not "удалённый сервер"), since no extractor can recover from the text
what the text does not say.
"""

from __future__ import annotations

import csv
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hltm.evaluation.realdata import (
    build_memory,
    ingest_rows,
    realdata_file,
    scratch_settings,
    slug,
)
from hltm.memory import lexicon as lx
from hltm.memory import read_nodes
from hltm.memory.offline.places import city_region, place_key, us_state_names
from hltm.memory.salary import Salary, parse_value
from hltm.memory.salary import find_salaries as read_salaries
from hltm.settings import Settings
from hltm.warehouse import connect

EN_FILE = "postings_linkedin_en.csv"
RU_FILE = "vacancies_hh_ru.csv"


@dataclass(frozen=True)
class Posting:
    posting_id: str
    company: str
    title: str
    text: str
    truth: dict[str, Any]  # field → reference (None: unlabelled)


# ---- loading -----------------------------------------------------------------------------------


def _float(value: str) -> float | None:
    try:
        return float(value) if value.strip() else None
    except ValueError:
        return None


_LINKEDIN_PERIOD = {"HOURLY": "hour", "YEARLY": "year", "MONTHLY": "month", "WEEKLY": "week"}
_LINKEDIN_WORK = {
    "Full-time": {"full-time"}, "Part-time": {"part-time"}, "Contract": {"contract"},
    "Temporary": {"temporary"}, "Internship": {"internship"}, "Volunteer": {"volunteer"},
}  # fmt: skip
_LINKEDIN_LEVEL = {
    "Internship": {"intern"}, "Entry level": {"intern", "junior"},
    "Associate": {"junior", "middle"}, "Mid-Senior level": {"middle", "senior", "lead", "principal"},
    "Director": {"head"}, "Executive": {"head"},
}  # fmt: skip
_HH_WORK = {
    "Полная занятость": {"full-time"}, "Частичная занятость": {"part-time"},
    "Проектная работа": {"contract", "freelance"}, "Стажировка": {"internship"},
}  # fmt: skip
_HH_FORMAT = {"удалённо": "remote", "удаленно": "remote", "гибрид": "hybrid"}
_HH_EXPERIENCE = {
    "Нет опыта": (0, 1), "От 1 года до 3 лет": (1, 3), "От 3 до 6 лет": (3, 6), "Более 6 лет": (6, 99),
}  # fmt: skip


def _salary_truth(low: str, high: str, med: str, currency: str) -> Salary | None:
    lo, hi, mid = _float(low), _float(high), _float(med)
    if lo is None and hi is None and mid is None:
        return None
    code = {"RUR": "RUB"}.get(currency.strip(), currency.strip()) or "USD"
    return Salary(lo if lo is not None else mid, hi if hi is not None else mid, code, "")


def load_linkedin(path: Path, limit: int | None = None) -> list[Posting]:
    out = []
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            text = (row.get("description") or "").strip()
            if not text:
                continue
            skills = {n for n, _ in lx.find_terms(lx.SKILLS_ALL, row.get("skills_desc") or "")}
            truth = {
                "location": row.get("location") or None,
                "salary": _salary_truth(
                    row.get("min_salary", ""),
                    row.get("max_salary", ""),
                    row.get("med_salary", ""),
                    row.get("currency", ""),
                ),  # fmt: skip
                "salary_period": _LINKEDIN_PERIOD.get(row.get("pay_period") or ""),
                "work_type": _LINKEDIN_WORK.get(row.get("formatted_work_type") or ""),
                "remote": bool(_float(row.get("remote_allowed") or "")),
                "seniority": _LINKEDIN_LEVEL.get(row.get("formatted_experience_level") or ""),
                "skills": skills or None,
            }
            out.append(
                Posting(
                    f"li-{row['job_id']}", row.get("company_name") or "", row["title"], text, truth
                )
            )
            if limit and len(out) >= limit:
                break
    return out


def _hh_work_type(row: dict[str, str]) -> set[str] | None:
    """hh.ru's employment, and its separate `internship` flag: an internship labelled
    "Полная занятость" is also an internship."""
    work = _HH_WORK.get(row.get("employment_name") or "")
    if (row.get("internship") or "").strip().casefold() == "true":
        return (work or set()) | {"internship"}
    return work


def load_hh(path: Path, limit: int | None = None) -> list[Posting]:
    out = []
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            texts = [row.get(k) or "" for k in ("snippet_requirement", "snippet_responsibility")]
            text = "\n".join([row["name"], *[t for t in texts if t.strip()]])
            formats = {
                _HH_FORMAT.get(part.strip().casefold(), "onsite")
                for part in (row.get("work_format") or "").replace("\u00a0", " ").split(";")
                if part.strip()
            }
            salary = _salary_truth(
                row.get("salary_from", ""),
                row.get("salary_to", ""),
                "",
                row.get("salary_currency", ""),
            )
            truth = {
                "location": row.get("area_name") or None,
                "salary": salary,
                "salary_period": "month" if salary else None,
                "work_type": _hh_work_type(row),
                "work_format": formats or None,
                "experience": _HH_EXPERIENCE.get(row.get("experience_name") or ""),
            }
            out.append(
                Posting(f"hh-{row['id']}", row.get("employer_name") or "", row["name"], text, truth)
            )
            if limit and len(out) >= limit:
                break
    return out


def source_tables(postings: list[Posting]) -> dict[str, list[dict[str, Any]]]:
    """contract = seat = the company, project = the posting, one document = its free text."""
    companies = sorted({p.company for p in postings})
    ids = {name: f"co-{slug(name, 'unknown')}" for name in companies}
    return {
        "contracts": [{"contract_id": ids[c], "name": c or "unknown company"} for c in companies],
        "seats": [
            {"seat_id": f"{ids[c]}-seat", "contract_id": ids[c], "recruiter_name": c or "unknown"}
            for c in companies
        ],
        "projects": [
            {
                "project_id": p.posting_id,
                "seat_id": f"{ids[p.company]}-seat",
                "title": p.title,
                "status": "open",
            }
            for p in postings
        ],  # fmt: skip
        "project_documents": [
            {
                "document_id": f"{p.posting_id}-text",
                "project_id": p.posting_id,
                "kind": "job_description",
                "text": p.text,
            }
            for p in postings
        ],  # fmt: skip
    }


# ---- matching ----------------------------------------------------------------------------------


def _city(key: tuple[str, str]) -> tuple[str, str]:
    """Cities the hub gazetteer groups count as one (`palo alto` ≡ `san francisco bay area`)."""
    hub = lx.find_terms(lx.LOCATIONS, key[0])
    return (lx.normalise_value(hub[0][0]) if hub else key[0]), key[1]


_COUNTRY_ONLY = {"united states", "usa", "us", "россия", "russia"}
_METRO = re.compile(r"\s*(?:metropolitan area|metro area|area|metroplex)$", re.IGNORECASE)


def reference_places(reference: str) -> list[str]:
    """The places a reference names: itself, or each city of a metro area that LinkedIn names by
    its principal cities (`Raleigh-Durham-Chapel Hill Area`, `Washington DC-Baltimore Area`,
    `Greensboro--Winston-Salem--High Point Area`); a hyphenated city stays whole."""
    if not _METRO.search(reference) or "-" not in reference or "," in reference:
        return [reference]
    body = _METRO.sub("", re.sub(r"^greater\s+", "", reference, flags=re.IGNORECASE))
    if place_key(body)[0] and "--" not in body and len(body.split("-")) == 2 and " " not in body:
        return [reference]  # one hyphenated name ("Winston-Salem Area")
    parts = body.split("--") if "--" in body else body.split("-")
    return [part.strip() for part in parts if part.strip()]


def _region_of(key: tuple[str, str]) -> str:
    """The region a place key states, or that of the best-known city of that name (a bare
    `Austin` is in Texas)."""
    return key[1] or city_region(key[0])


def _one_location_matches(predicted: str, reference: str) -> bool:
    pred_key = place_key(predicted)
    pred, ref = _city(pred_key), _city(place_key(reference))
    if not ref[0]:  # a state: any place in it
        return _region_of(pred_key) == ref[1] or lx.normalise_value(predicted) == ref[1]
    if ref[0] in _COUNTRY_ONLY:
        country = ref[0] or ref[1]
        if country in ("united states", "usa", "us"):
            return pred[0] in _COUNTRY_ONLY or len(_region_of(pred_key)) == 2
        return pred[0] == country
    if pred[0] != ref[0]:
        return False
    return not (pred[1] and ref[1] and pred[1] != ref[1])


def location_matches(predicted: str, reference: str) -> bool:
    return any(_one_location_matches(predicted, ref) for ref in reference_places(reference))


def _parse_salary(value: str) -> Salary | None:
    found = read_salaries(value)
    return parse_value(value) or (found[0][0] if found else None)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 0.01 * max(abs(a), abs(b), 1.0)


def salary_matches(predicted: str, reference: Salary) -> bool:
    pred = _parse_salary(predicted)
    if pred is None or pred.currency != reference.currency:
        return False
    ends = [
        (p, r)
        for p, r in ((pred.low, reference.low), (pred.high, reference.high))
        if p is not None and r is not None
    ]
    return bool(ends) and all(_close(p, r) for p, r in ends)


def period_of(predicted: str) -> str:
    pred = _parse_salary(predicted)
    return pred.period if pred else ""


def _experience_low(value: str) -> int | None:
    match = re.match(r"(\d+)", value)
    return int(match.group(1)) if match else None


# Each field: the facet field it reads, and whether a predicted value is right for a reference.
FIELDS: dict[str, tuple[str, Callable[[str, Any], bool]]] = {
    "location": ("location", location_matches),
    "salary": ("salary", salary_matches),
    "salary_period": ("salary", lambda v, ref: period_of(v) == ref),
    "work_type": ("employment_type", lambda v, ref: v in ref),
    "work_format": ("work_mode", lambda v, ref: v in ref),
    "remote": ("work_mode", lambda v, ref: v == "remote" and ref),
    "seniority": ("seniority", lambda v, ref: v in ref),
    "experience": (
        "years_experience",
        lambda v, ref: (low := _experience_low(v)) is not None and ref[0] <= low < ref[1],
    ),
    "skills": ("skill", lambda v, ref: v in ref),
}


# ---- "the text states it" (literal checks, independent of the extractor) -----------------------


_MONEY = re.compile(
    r"(?:[$€£₽]|us\$|usd|eur|rub)\s?(?P<a>\d[\d,.\s\u00a0]*\d|\d)(?P<ak>\s?k\b)?"
    r"(?:\s?(?:-|–|—|to)\s?\$?(?P<a2>\d[\d,.]*\d|\d)(?P<a2k>\s?k\b)?)?"
    r"|(?P<b>\d[\d,.\s\u00a0]*\d|\d)(?P<bk>\s?k|\s?тыс\.?)?\s?(?:[$€£₽]|usd|eur|rub\b|rur\b|руб|р\.)"
)


def _money_amounts(low: str) -> list[float]:
    """Amounts the text writes with a currency mark beside them (`$18`, `80,000 ₽`, `$45K`):
    a bare number ("30 years", "June 18th") is no salary."""
    out = []
    for match in _MONEY.finditer(low):
        for raw, scaled in (
            (match.group("a") or match.group("b"), match.group("ak") or match.group("bk")),
            (match.group("a2"), match.group("a2k")),
        ):
            if not raw:
                continue
            digits = re.sub(r"[,\s\u00a0]", "", raw)
            digits = digits if digits.count(".") <= 1 else digits.replace(".", "")
            try:
                out.append(float(digits) * (1000 if scaled else 1))
            except ValueError:
                continue
    return out


_WORK_PHRASES = {
    "full-time": r"full[- ]?time|полн\w+ занят", "part-time": r"part[- ]?time|частичн\w+ занят",
    "contract": r"contract|проектн", "temporary": r"temporary|temp\b|seasonal",
    "internship": r"intern|стаж", "volunteer": r"volunteer|unpaid", "freelance": r"freelance|проектн",
}  # fmt: skip
_FORMAT_PHRASES = {  # the format of the work: "удалённая работа", not "удалённый сервер"
    "remote": r"remote|work from home|(?:удал[её]нн|дистанционн)\w* (?:работ|формат|режим)|"
              r"удал[её]нно|дистанционно|удал[её]нк",
    "hybrid": r"hybrid|гибрид(?![а-яё])|гибридн\w* (?:формат|график|режим|работ)",
    "onsite": r"on[- ]?site|in[- ]office|(?<![-\w])офис(?![\w-])|в офисе",
}  # fmt: skip


def _name_pattern(name: str) -> str:
    """A place name as a text may write it: whole words, `St`/`St.`/`Saint` alike, a hyphen or
    a space alike, and a Russian name in any case ending (`Казань` → Казани, `Москва` →
    Москве; a stem of at least 4 letters: `Курск` is not `курсы`)."""
    name = name.strip().casefold()
    if re.search(r"[а-яё]", name) and len(name) > 4 and name[-1] in "аяьйоеыи":
        name = name[:-1]
    words = [re.escape(w) for w in re.split(r"[\s-]+", name) if w]
    if words and re.fullmatch(r"saint|st\\?\.?", words[0]):
        words[0] = r"(?:saint|st\.?)"
    body = r"[\s-]+".join(words)
    tail = r"[а-яё]{0,3}" if re.search(r"[а-яё]", name) else r"(?:['’]s)?"
    return rf"(?<!\w){body}{tail}(?!\w)"


def _place_stated(reference: str, text: str) -> bool:
    """Whether the text names the reference place, or (for a state or country reference) a
    place the matching rule would accept for it: a state's name or `, ST` code, and for the
    United States any state."""
    low = text.casefold()
    city, region = place_key(reference)
    if city in ("россия", "russia"):
        return bool(re.search(r"россия|\bрф\b|russia", low))
    if city in _COUNTRY_ONLY or not city:
        names = us_state_names() if city else [reference.split(",")[0].strip()]
        named = "|".join(_name_pattern(n) for n in names if len(n) > 2)
        codes = (
            "|".join(n.upper() for n in us_state_names() if len(n) == 2) if city else region.upper()
        )
        us = r"united states|\busa\b|\bu\.s\.|" if city else ""
        return bool(re.search(f"{us}{named}", low) or re.search(rf",\s?(?:{codes})\b", text))
    names = {city, reference.split(",")[0].strip().casefold()}  # canonical and as written
    names = {_METRO.sub("", re.sub(r"^greater\s+", "", n)).strip() for n in names}
    return any(n and re.search(_name_pattern(n), low) for n in names)


def text_states(name: str, reference: Any, text: str) -> bool:
    low = text.casefold()
    if name == "location":
        return any(_place_stated(ref, text) for ref in reference_places(reference))
    if name in ("salary", "salary_period"):
        if name == "salary_period":  # a period word right after an amount with a currency
            return any(
                re.match(r"[\s+]*(?:/\s?|per |an? |each |в |за )?(?:hour|hr\b|year|yr\b|annual|month|"
                         r"week|месяц|мес\b|час|год)", low[m.end() : m.end() + 30])
                or re.search(r"hourly|annual|yearly|monthly|weekly|в месяц|в час", low[max(0, m.start() - 30) : m.start()])
                for m in _MONEY.finditer(low)
            )  # fmt: skip
        money = _money_amounts(low)
        ref = reference if isinstance(reference, Salary) else None
        amounts = [] if ref is None else [x for x in (ref.low, ref.high) if x is not None]
        return any(_close(x, m) for x in amounts for m in money)
    if name == "remote":
        return bool(re.search(_FORMAT_PHRASES["remote"], low))
    if name in ("work_type", "work_format", "seniority"):
        phrases = _WORK_PHRASES if name == "work_type" else _FORMAT_PHRASES
        if name == "seniority":
            return bool(
                re.search(
                    r"senior|junior|entry[- ]level|director|associate|lead|principal|intern", low
                )
            )
        return any(re.search(phrases.get(v, re.escape(v)), low) for v in reference)
    if name == "experience":
        return bool(re.search(r"\d\s?\+?\s?(?:years?|yrs|лет|года?)\b|без опыта|опыт", low))
    return name == "skills"  # a skills list is the text's own


# ---- scoring -----------------------------------------------------------------------------------


@dataclass
class FieldScore:
    name: str
    predicted: int = 0
    right: int = 0
    labelled: int = 0
    found: int = 0

    @property
    def precision(self) -> float:
        return self.right / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.found / self.labelled if self.labelled else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class FacetReport:
    name: str
    postings: int
    seconds: float
    all_rows: list[FieldScore] = field(default_factory=list)
    stated_rows: list[FieldScore] = field(default_factory=list)
    baseline_rows: list[FieldScore] = field(default_factory=list)

    def table(self) -> str:
        head = (
            f"{'field':<14} | {'HLTM: every labelled posting':^30} | {'HLTM: text states it':^30}"
            f" | {'baseline: majority':^22}"
        )
        sub = f"{'':<14} | {'P':>6} {'R':>6} {'F1':>6} {'n':>8} | {'P':>6} {'R':>6} {'F1':>6} {'n':>8} | {'F1':>6} {'n':>14}"
        lines = [
            f"{self.name}: {self.postings} postings, {self.seconds:.0f} s",
            head,
            sub,
            "-" * len(sub),
        ]
        for a, s, b in zip(self.all_rows, self.stated_rows, self.baseline_rows, strict=True):
            lines.append(
                f"{a.name:<14} | {a.precision:6.3f} {a.recall:6.3f} {a.f1:6.3f} {a.labelled:>8} |"
                f" {s.precision:6.3f} {s.recall:6.3f} {s.f1:6.3f} {s.labelled:>8} |"
                f" {b.f1:6.3f} {b.labelled:>14}"
            )
        lines.append(
            "Every labelled posting counts, so a posting whose text does not state the value is a"
            " miss for any text reader: over every posting, recall is bounded by (text states it"
            " n) / (labelled n), e.g. "
            + ", ".join(
                f"{a.name} {s.labelled / a.labelled:.2f}"
                for a, s in zip(self.all_rows, self.stated_rows, strict=True)
                if a.labelled and a.name != "skills"
            )
            + "."
        )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        def rows(items: list[FieldScore]) -> dict[str, dict[str, float]]:
            return {
                r.name: {"precision": round(r.precision, 4), "recall": round(r.recall, 4),
                         "f1": round(r.f1, 4), "labelled": r.labelled}
                for r in items
            }  # fmt: skip

        return {"postings": self.postings, "all": rows(self.all_rows),
                "stated": rows(self.stated_rows), "baseline": rows(self.baseline_rows)}  # fmt: skip


def score(
    postings: list[Posting], facets: dict[str, dict[str, list[str]]], fields: list[str]
) -> tuple[list[FieldScore], list[FieldScore]]:
    """(every labelled posting, postings whose text states the reference) per field."""
    every = {name: FieldScore(name) for name in fields}
    stated = {name: FieldScore(name) for name in fields}
    for posting in postings:
        mine = facets.get(posting.posting_id, {})
        for name in fields:
            base, _, mode = name.partition(":")
            reference = posting.truth.get(base)
            if reference is None:
                continue
            facet_field, matches = FIELDS[base]
            values = mine.get(facet_field, [])
            if mode:  # one work format as a yes/no label: is the posting's format this one?
                reference = mode in reference
                says = text_states(base, {mode}, posting.text)
            else:
                says = text_states(name, reference, posting.text)
            targets = [every[name]] + ([stated[name]] if says else [])
            for target in targets:
                if name == "remote" or mode:  # a yes/no label: only predictions of it count
                    said = (mode or "remote") in values
                    target.predicted += said
                    target.right += said and reference
                    target.labelled += reference
                    target.found += said and reference
                elif name == "skills":  # a set label: each skill is an item
                    target.predicted += len(values)
                    target.right += sum(v in reference for v in values)
                    target.labelled += len(reference)
                    target.found += len(set(values) & reference)
                else:
                    right = sum(matches(v, reference) for v in values)
                    target.predicted += len(values)
                    target.right += right
                    target.labelled += 1
                    target.found += bool(right)
    return list(every.values()), list(stated.values())


def majority_facets(postings: list[Posting], fields: list[str]) -> dict[str, dict[str, list[str]]]:
    """The baseline: every posting gets each field's most frequent reference value."""
    chosen: dict[str, list[str]] = {}
    for name in fields:
        if ":" in name:
            continue  # a yes/no label per work format: no majority value to give
        counts: Counter[str] = Counter()
        for posting in postings:
            reference = posting.truth.get(name)
            if isinstance(reference, set):
                counts.update(sorted(reference))
            elif isinstance(reference, Salary):
                counts[reference.value] += 1
            elif isinstance(reference, tuple):
                counts[f"{reference[0]}+ years"] += 1
            elif reference is True:
                counts["remote"] += 1
            elif reference:
                counts[str(reference)] += 1
        if counts:
            value = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            if name == "salary_period":
                value = f"1 USD per {value}"  # only the period of this value is scored
            chosen[FIELDS[name][0]] = chosen.get(FIELDS[name][0], []) + [value]
    return {p.posting_id: chosen for p in postings}


def stored_facets(settings: Settings, posting_ids: list[str]) -> dict[str, dict[str, list[str]]]:
    """posting id → facet field → values, as the memory build stored them."""
    with connect(settings.derived_db, read_only=True) as con:
        nodes = read_nodes(con, [f"project:{pid}" for pid in posting_ids])
    out: dict[str, dict[str, list[str]]] = {}
    for node in nodes.values():
        fields: dict[str, list[str]] = defaultdict(list)
        for facet in node.facets:
            fields[facet.field].append(facet.value)
        out[str(node.placement.project_id)] = dict(fields)
    return out


EN_FIELDS = ["location", "salary", "salary_period", "work_type", "remote", "seniority", "skills"]
# hh.ru lists every format a vacancy allows; the memory gives one, the job's own arrangement:
# scored against the list, and per format as a yes/no label, so on-site and hybrid are measured.
WORK_FORMATS = ["work_format:remote", "work_format:hybrid", "work_format:onsite"]
RU_FIELDS = [
    "location", "salary", "salary_period", "work_type", "work_format", *WORK_FORMATS, "experience"
]  # fmt: skip


def evaluate_postings(
    base: Settings,
    which: str,
    *,
    data_dir: Path | None = None,
    limit: int | None = None,
    keep: Path | None = None,
) -> FacetReport:
    """Load one posting set as sources, build its memory, and score the stored facets."""
    started = time.perf_counter()
    if which == "en":
        postings, fields = load_linkedin(realdata_file(EN_FILE, data_dir), limit), EN_FIELDS
    elif which == "ru":
        postings, fields = load_hh(realdata_file(RU_FILE, data_dir), limit), RU_FIELDS
    else:
        raise ValueError(f"unknown posting set {which!r}: expected 'en' or 'ru'")
    with scratch_settings(base, keep) as settings:
        ingest_rows(settings, source_tables(postings))
        build_memory(settings)
        facets = stored_facets(settings, [p.posting_id for p in postings])
    every, stated = score(postings, facets, fields)
    baseline, _ = score(postings, majority_facets(postings, fields), fields)
    name = f"{EN_FILE if which == 'en' else RU_FILE} ({'description' if which == 'en' else 'name + snippets'} only)"
    return FacetReport(name, len(postings), time.perf_counter() - started, every, stated, baseline)
