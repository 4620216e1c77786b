"""Reading a free-text resume the way a recruiter skims it: positions, dates, titles, skills.

General on purpose — it must work on resumes this project never generated, in English and
Russian. It looks for what almost every resume has:

* **positions**, anchored on a date range ("2021-03 – present", "03.2019 — по настоящее время",
  "Jan 2020 - Mar 2022", "2017–2019", "Dec 2017 - Till Date", "Sept' 2017 to till date",
  "с 2015 по н.в."). The range may run over several lines, as in text flattened from a PDF
  table ("July 2011 / to / November 2012" on three lines). The title is the most title-like
  short line of the position's header block: the anchor line without its dates, or one of the
  few lines just above or below it ("Senior Java Developer — Acme", "Company Name / dates /
  Accountant", "Earlier: BI Analyst at Acme, 2015–2017"); titles are at most
  ``MAX_TITLE_CHARS`` long. The lines that follow, up to the next position or section,
  describe the work;
* **not employment**: a range in an education section, or next to a degree, a diploma, a
  course or a certificate with no job title beside it ("July 2009 to June 2013 Diploma …"), is
  kept out of the positions;
* **sections** by their usual headers (Summary / About me / О себе, Experience / Опыт работы,
  Skills / Навыки / Стек, Education / Образование, Languages / Языки), with or without a colon;
* **years of experience** from the union of the position intervals (overlaps merged). "Present"
  means the moment the resume was last updated (``as_of``), not today, so the same resume is
  always read the same way. A year-only range counts from mid-year to mid-year.

Every line keeps its character offsets in the original text, so quotes are cut verbatim.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from hltm.vocabulary import load

__all__ = [
    "Line",
    "ParsedResume",
    "Position",
    "Title",
    "dated_intervals",
    "month_index",
    "parse_as_of",
    "parse_resume",
    "present_month",
    "spans_overlap",
]

_MONTHS = {
    # English
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "sept": 9, "oct": 10, "nov": 11, "dec": 12, "january": 1, "february": 2, "march": 3,
    "april": 4, "june": 6, "july": 7, "august": 8, "september": 9, "october": 10,
    "november": 11, "december": 12,
    # Russian (nominative, genitive, short)
    "янв": 1, "фев": 2, "мар": 3, "апр": 4, "май": 5, "мая": 5, "июн": 6, "июл": 7, "авг": 8,
    "сен": 9, "сент": 9, "окт": 10, "ноя": 11, "дек": 12, "январь": 1, "января": 1,
    "февраль": 2, "февраля": 2, "март": 3, "марта": 3, "апрель": 4, "апреля": 4, "июнь": 6,
    "июня": 6, "июль": 7, "июля": 7, "август": 8, "августа": 8, "сентябрь": 9, "сентября": 9,
    "октябрь": 10, "октября": 10, "ноябрь": 11, "ноября": 11, "декабрь": 12, "декабря": 12,
}  # fmt: skip
_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DATE = (
    r"(?:(?P<{p}m1>\d{{1,2}})[./](?P<{p}y1>(?:19|20)\d\d)(?!\d)"
    r"|(?P<{p}y2>(?:19|20)\d\d)[-/.](?P<{p}m2>\d{{1,2}})(?![\d])"
    rf"|(?P<{{p}}mon>{_MONTH_NAMES})\.?['’]?\s*,?\s*(?P<{{p}}y3>(?:19|20)\d\d)(?!\d)"
    r"|(?P<{p}y4>(?:19|20)\d\d)(?![\d]))"
)
_PRESENT = (
    r"(?P<present>present|now|current(?:ly)?|today|(?:till|to|until)\s+(?:date|now|today)"
    r"|date|ongoing"
    r"|по\s+настоящее\s+время|настоящее\s+время|по\s+н\.?\s*в\.?|н\.\s*в\.|сейчас"
    r"|по\s+сей\s+день|наст\.\s*время)"
)
# Between two dates: a dash or a word, or what a PDF or a wrong encoding made of a dash — a short
# run of fullwidth forms, Latin-1 mojibake ("ï¼"), invisible or typographic marks.
_RANGE_SEPARATOR = (
    r"(?:–|—|-|−|to|till|until|through|по|до|\.\.|[\u0080-\u00ff\u2000-\u206f\uff00-\uffef~]{1,4})"
)
_RANGE_RE = re.compile(
    r"(?<![\w])"
    + _DATE.format(p="a")
    + r"\s*"
    + _RANGE_SEPARATOR
    + r"\s*(?:"
    + _DATE.format(p="b")
    + "|"
    + _PRESENT
    + r")(?![\w])",
    re.IGNORECASE,
)

_SECTION_WORDS: dict[str, str] = load(__package__, "resume")["sections"]  # resume.toml
_SECTION_RE = re.compile(
    r"^\s*(?P<name>"
    + "|".join(sorted((re.escape(w) for w in _SECTION_WORDS), key=len, reverse=True))
    + r")\s*(?::\s*(?P<rest>.*))?$",
    re.IGNORECASE,
)
_INSTITUTION_RE = re.compile(
    r"(?<!\w)(?:universit\w*|institute|college|school|academy|университет\w*|институт\w*"
    r"|академи\w*|колледж\w*|техникум\w*|училищ\w*|школ\w*|мгту|мфти|мгу|спбгу|вшэ|итмо|мифи"
    r"|урфу|нгу)(?!\w)",
    re.IGNORECASE,
)
# What a study period names: a degree or diploma (always studies) …
_DEGREE_RE = re.compile(
    r"(?<!\w)(?:b\.?sc|m\.?sc|mba|ph\.?d|bachelor\w*|master'?s|masters? of|associate of"
    r"|associate'?s degree|degree|diploma|ged|gpa|coursework|бакалавр\w*|магистр\w*"
    r"|специалитет\w*|диплом\w*|аспирантур\w*)(?!\w)",
    re.IGNORECASE,
)
# … or a course, a certificate, a school (studies unless a job title stands beside it).
_STUDY_RE = re.compile(
    r"(?<!\w)(?:course|courses|certificat\w*|certified|graduat\w*|major|minor|student|studies"
    r"|курс\w*|сертификат\w*|студент\w*|выпускник\w*)(?!\w)",
    re.IGNORECASE,
)
_BULLET_RE = re.compile(r"^\s*(?:[•·▪◦●○■□➢►‣⁃*]|-(?=\s)|–(?=\s)|—(?=\s)|\d+[.)](?=\s))\s*")
_SPLIT_RE = re.compile(r"\s+[—–|·•]\s+|\s+-\s+|\s*[|·•]\s*|,\s+|\s+at\s+|\s+@\s+")
_LABEL_PREFIX_RE = re.compile(r"^\s*[^\W\d_][\w ]{0,20}:\s+")
ROLE_NOUNS = re.compile(
    r"(?<!\w)(?:developer|engineer|programmer|manager|analyst|architect|designer|scientist"
    r"|tester|consultant|specialist|administrator|coordinator|owner|researcher|intern|lead"
    r"|director|head|officer|master|sre|devops|qa|cto|cpo|cfo|ceo|coo|cio|vp|president"
    r"|accountant|bookkeeper|auditor|controller|clerk|assistant|associate|representative|rep"
    r"|technician|supervisor|instructor|trainer|coach|teacher|tutor|educator|professor|lecturer"
    r"|chef|cook|baker|server|bartender|cashier|nurse|therapist|counselor|physician|pharmacist"
    r"|recruiter|generalist|attorney|lawyer|paralegal|advocate|pilot|mechanic|electrician"
    r"|carpenter|plumber|welder|foreman|superintendent|estimator|inspector|operator|driver"
    r"|agent|advisor|adviser|broker|banker|teller|underwriter|planner|buyer|merchandiser"
    r"|editor|writer|producer|photographer|artist|stylist|secretary|receptionist|dispatcher"
    r"|strategist|marketer|executive|partner|principal|worker|laborer|aide|attendant"
    r"|apprentice|volunteer|owner|founder|member"
    r"|разработчик\w*|инженер\w*|программист\w*|менеджер\w*|аналитик\w*|архитектор\w*"
    r"|дизайнер\w*|руководител\w*|специалист\w*|тестировщик\w*|администратор\w*|координатор\w*"
    r"|исследовател\w*|стаж[её]р\w*|владел\w*|директор\w*|лид\w*|консультант\w*|продакт\w*"
    r"|проджект\w*|бухгалтер\w*|экономист\w*|учител\w*|преподавател\w*|повар\w*|продав\w*"
    r"|кассир\w*|водител\w*|юрист\w*|врач\w*|медсестр\w*|механик\w*|прораб\w*|тренер\w*"
    r"|секретар\w*|технолог\w*|мастер\w*|помощник\w*|ассистент\w*|представител\w*"
    r"|начальник\w*|заместител\w*|оператор\w*|эксперт\w*)(?!\w)",
    re.IGNORECASE,
)


MAX_TITLE_CHARS = 80
_WORD_RE = re.compile(r"[^\W\d_]{2,}")  # a title has at least one real word
# Sections whose dated lines are not jobs: studies, memberships, activities, languages.
_NOT_EMPLOYMENT = frozenset({"education", "other", "languages", "projects"})
# Lines with letters above / below a date range that may hold its title: a flattened table puts
# a company, a city and a state between a title and its dates.
HEADER_WINDOW = 4


def month_index(year: int, month: int) -> int:
    return year * 12 + month - 1


def parse_as_of(value: object) -> int | None:
    """'2025-11-03T…' / '2025-11' → month index; None when absent or unreadable."""
    if not value:
        return None
    m = re.match(r"\s*((?:19|20)\d\d)[-/.](\d{1,2})", str(value))
    if not m:
        return None
    month = int(m.group(2))
    return month_index(int(m.group(1)), month) if 1 <= month <= 12 else None


@dataclass
class Line:
    text: str  # the line as written (no newline)
    start: int  # offset of the line in the resume text
    kind: str = "other"  # header | anchor | body | section | skills | summary | education | projects | other
    position: int | None = None  # index of the position it belongs to
    section: str = "top"  # the section the line stands in

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    def content_span(self) -> tuple[int, int]:
        """Offsets of the line without its bullet marker and surrounding spaces."""
        m = _BULLET_RE.match(self.text)
        lead = m.end() if m else len(self.text) - len(self.text.lstrip())
        body = self.text[lead:].rstrip()
        return self.start + lead, self.start + lead + len(body)


@dataclass
class Position:
    title: str
    line: Line  # the line the title was read from
    start: int  # month index
    end: int  # month index (inclusive)
    current: bool
    body: list[Line] = field(default_factory=list)
    title_span: tuple[int, int] = (0, 0)  # offsets of the title in the resume text
    dates_span: tuple[int, int] = (0, 0)  # offsets of its date range in the resume text

    @property
    def months(self) -> int:
        return max(1, self.end - self.start + 1)

    @property
    def text(self) -> str:
        return "\n".join([self.title, *(ln.text for ln in self.body)])


@dataclass(frozen=True)
class Title:
    """A job title the resume states: a position's title or a title-like line elsewhere."""

    text: str
    span: tuple[int, int]  # offsets in the resume text


@dataclass
class ParsedResume:
    text: str
    lines: list[Line]
    positions: list[Position]  # most recent first
    as_of: int | None
    skills_lines: list[Line]
    summary_lines: list[Line]
    titles: list[Title] = field(default_factory=list)  # job titles, in the order written

    def recent(self, n: int = 3) -> list[Position]:
        return self.positions[:n]

    def total_months(self) -> int:
        return merged_months([(p.start, p.end) for p in self.positions])

    def months_where(self, keep: list[bool]) -> int:
        return merged_months(
            [(p.start, p.end) for p, k in zip(self.positions, keep, strict=True) if k]
        )


def merged_months(intervals: list[tuple[int, int]]) -> int:
    total = 0
    last_end = None
    for start, end in sorted(intervals):
        if last_end is not None and start <= last_end:
            if end > last_end:
                total += end - last_end
                last_end = end
            continue
        total += end - start + 1
        last_end = end
    return total


def _date(match: re.Match[str], p: str) -> tuple[int, int | None] | None:
    g = match.groupdict()
    if g.get(f"{p}y1"):
        month, year = int(g[f"{p}m1"]), int(g[f"{p}y1"])
    elif g.get(f"{p}y2"):
        year, month = int(g[f"{p}y2"]), int(g[f"{p}m2"])
    elif g.get(f"{p}y3"):
        year, month = int(g[f"{p}y3"]), _MONTHS[g[f"{p}mon"].lower().rstrip(".")]
    elif g.get(f"{p}y4"):
        return int(g[f"{p}y4"]), None
    else:
        return None
    if not 1 <= month <= 12:
        return None
    return year, month


def _interval(match: re.Match[str], as_of: int | None) -> tuple[int, int, bool] | None:
    first = _date(match, "a")
    if first is None:
        return None
    current = bool(match.group("present"))
    if current:
        if as_of is None:
            return None  # resolved later, once the latest date in the resume is known
        last = None
    else:
        last = _date(match, "b")
        if last is None:
            return None
    y1, m1 = first
    if last is None:
        start = month_index(y1, m1 or 7)
        end = as_of if as_of is not None else start
    else:
        y2, m2 = last
        if m1 is None and m2 is None:
            if y1 == y2:
                start, end = month_index(y1, 1), month_index(y1, 6)
            else:
                start, end = month_index(y1, 7), month_index(y2, 6)
        else:
            start = month_index(y1, m1 or 1)
            end = month_index(y2, m2 or 12)
    if end < start:
        return None
    return start, end, current


def _latest_month(matches: Iterable[re.Match[str]]) -> int | None:
    months = [
        month_index(d[0], d[1] or 6) for m in matches for p in ("a", "b") if (d := _date(m, p))
    ]
    return max(months, default=None)


def present_month(text: str, as_of: object = None) -> int | None:
    """What "present" means in ``text``: when it was last updated (``as_of``), else the latest
    month its date ranges mention."""
    return parse_as_of(as_of) or _latest_month(_RANGE_RE.finditer(text))


def dated_intervals(text: str, as_of: int | None) -> list[tuple[int, int]]:
    """The (start, end) month intervals of every date range written in ``text`` ("present"
    read as ``as_of``; a range left open without it is skipped) — what a quote's dates add up
    to."""
    found = (_interval(m, as_of) for m in _RANGE_RE.finditer(text))
    return [(start, end) for start, end, _ in (i for i in found if i is not None)]


def title_score(part: str) -> float:
    """1 when ``part`` names a job (has a job-title head noun), else 0."""
    return 1.0 if ROLE_NOUNS.search(part) else 0.0


# The head noun of a title by its form, for jobs no list names ("Phlebotomist", "Bookseller",
# "Landscaper"; "Электромонтажник"): an agent noun — the last word in English, the first in
# Russian.
_AGENT_EN_RE = re.compile(r"[a-z]{3,}(?:er|or|ist|ian)s?", re.IGNORECASE)
_AGENT_RU_RE = re.compile(r"[а-яё]{3,}(?:ист|ер|ор|тель|ник|щик|чик)\w{0,2}", re.IGNORECASE)
_WORDS_RE = re.compile(r"[^\W\d_]+")


def names_a_job(text: str) -> bool:
    """A job-title head noun: one of `ROLE_NOUNS`, else an agent noun where the head stands."""
    if ROLE_NOUNS.search(text):
        return True
    words = _WORDS_RE.findall(text)
    if not words:
        return False
    return bool(_AGENT_EN_RE.fullmatch(words[-1]) or _AGENT_RU_RE.fullmatch(words[0]))


_STRONG_SPLIT_RE = re.compile(
    r"\s+[—–|·•]\s+|\s+-\s+|\s*[|·•]\s*|\s+at\s+|\s+@\s+|\s+в\s+(?=[«\"A-ZА-Я])"
)


def _pieces(text: str, base: int, splitter: re.Pattern[str]) -> list[tuple[int, int]]:
    out = []
    cursor = base
    for m in splitter.finditer(text, base):
        out.append((cursor, m.start()))
        cursor = m.end()
    out.append((cursor, len(text)))
    return out


def _pick_title(
    text: str, offset: int, plain_ok: bool = False
) -> tuple[str, tuple[int, int]] | None:
    """The most title-like part of ``text`` (a header or anchor line without its dates).

    Parts are taken between strong separators ("—", "·", "|", " at ") and, as alternatives,
    between commas too ("Owner, Product" stays whole; "Analyst, Acme, 2019" splits)."""
    label = _LABEL_PREFIX_RE.match(text)
    # "Earlier: BI Analyst at Acme" → drop the "Earlier: " label
    base = label.end() if label and not ROLE_NOUNS.search(text[: label.end()]) else 0
    candidates = _pieces(text, base, _STRONG_SPLIT_RE) + _pieces(text, base, _SPLIT_RE)
    best: tuple[float, int, int] | None = None
    for s, e in candidates:
        part = text[s:e]
        stripped = part.strip(" ,;:()[]")
        if not stripped or not any(ch.isalpha() for ch in stripped):
            continue
        s += part.find(stripped)
        e = s + len(stripped)
        if e - s > MAX_TITLE_CHARS or not _WORD_RE.search(stripped):
            continue  # a sentence, or stray symbols, not a title
        score = title_score(stripped)
        # higher score wins; on a tie the shorter part (no company name attached)
        if best is None or (score, best[2] - best[1]) > (best[0], e - s):
            best = (score, s, e)
    if best is None:
        return None
    if best[0] <= 0:
        if not plain_ok:
            return None
        # No recognisable job title (a cook, a nurse…): the first part, by convention the title.
        first = next((p for p in _pieces(text, base, _SPLIT_RE) if text[p[0] : p[1]].strip()), None)
        if first is None:
            return None
        part = text[first[0] : first[1]]
        stripped = part.strip(" ,;:()[]")
        s0 = first[0] + part.find(stripped)
        if not stripped or len(stripped) > MAX_TITLE_CHARS or not _WORD_RE.search(stripped):
            return None
        return stripped, (offset + s0, offset + s0 + len(stripped))
    return text[best[1] : best[2]], (offset + best[1], offset + best[2])


def _section_of(line: str) -> tuple[str, str | None] | None:
    m = _SECTION_RE.match(line)
    if not m:
        return None
    return _SECTION_WORDS[m.group("name").lower()], m.group("rest")


_KIND_SECTIONS = ("summary", "education", "skills", "projects")
_HEADING_MAX_WORDS = 4


def _looks_like_heading(stripped: str) -> bool:
    """A heading by its form: a short line in capitals (or ending in a colon) that names no job
    and holds no figures — "ACADEMIA", "Functional & Technical Expertise:"."""
    words = stripped.rstrip(":").split()
    if not words or len(words) > _HEADING_MAX_WORDS or any(ch.isdigit() for ch in stripped):
        return False
    if ROLE_NOUNS.search(stripped):
        return False
    letters = [ch for ch in stripped if ch.isalpha()]
    capitals = len(letters) > 3 and all(ch.isupper() for ch in letters)
    return capitals or stripped.endswith(":")


def _line_at(starts: list[int], offset: int) -> int:
    return bisect.bisect_right(starts, offset) - 1


def _is_study(text: str) -> bool:
    """A line about studies: a degree, or a course or institution with no job title beside it."""
    if _DEGREE_RE.search(text):
        return True
    if not (_STUDY_RE.search(text) or _INSTITUTION_RE.search(text)):
        return False
    rest = _INSTITUTION_RE.sub(" ", _STUDY_RE.sub(" ", text))
    return ROLE_NOUNS.search(rest) is None


def _header_rows(lines: list[Line], first: int, last: int, taken: set[int]) -> list[int]:
    """Rows around the date range ``first..last`` that may hold its title, nearest first:
    short, non-bullet lines, at most HEADER_WINDOW non-blank ones on each side, stopping at
    sections and at rows another range already took."""
    out: list[tuple[int, int]] = []
    for step, start in ((-1, first - 1), (1, last + 1)):
        j, seen = start, 0
        while 0 < j < len(lines) and seen < HEADER_WINDOW:
            ln = lines[j]
            stripped = ln.text.strip()
            if stripped and any(ch.isalnum() for ch in stripped):  # ", " or "- " is layout
                if j in taken or ln.kind in ("section", *_KIND_SECTIONS):
                    break
                if _BULLET_RE.match(ln.text) or len(stripped) > 2 * MAX_TITLE_CHARS:
                    break
                seen += 1
                out.append((seen, j))
            j += step
    return [j for _, j in sorted(out, key=lambda x: x[0])]


def parse_resume(text: str, as_of: int | None = None) -> ParsedResume:
    """Split ``text`` into lines, sections and positions (see the module docstring)."""
    lines: list[Line] = []
    offset = 0
    for raw in text.split("\n"):
        lines.append(Line(raw, offset))
        offset += len(raw) + 1
    starts = [ln.start for ln in lines]

    # 1) sections: by their usual headings, else by structure (an unknown heading still ends
    # the section before it, so an education block does not swallow the titles after it)
    section_of: list[str] = []
    section = "top"
    for ln in lines:
        stripped = ln.text.strip()
        sec = _section_of(stripped) if stripped and len(stripped) < 120 else None
        if sec is None and _looks_like_heading(stripped):
            sec = ("unknown", None)
        if sec is not None:
            name, rest = sec
            section = name
            if rest:  # "Skills: Go, SQL", "Languages: English (C1)"
                ln.kind = {"skills": "skills", "education": "education"}.get(name, "other")
            else:
                ln.kind = "section"
        elif stripped and section in _KIND_SECTIONS:
            ln.kind = section
        ln.section = section
        section_of.append(section)

    # 2) date ranges, over the whole text (a flattened table puts one range on several lines)
    ranges: list[tuple[int, int, re.Match[str]]] = []  # (first row, last row, match)
    for m in _RANGE_RE.finditer(text):
        first, last = _line_at(starts, m.start()), _line_at(starts, m.end() - 1)
        if lines[first].kind == "section" or section_of[first] in _NOT_EMPLOYMENT:
            continue
        ranges.append((first, last, m))
    range_rows = {j for first, last, _ in ranges for j in range(first, last + 1)}

    # 3) "present" = as_of, else the latest month the resume mentions
    if as_of is None:
        as_of = _latest_month(m for _, _, m in ranges)

    # 4) positions: the title from the anchor rows without the dates, else from the header rows
    found: list[tuple[Position, int, int]] = []  # (position, first header row, last header row)
    taken: set[int] = set()
    for first, last, m in ranges:
        interval = _interval(m, as_of)
        if interval is None:
            continue
        anchor = lines[first]
        if first == last:
            rest = anchor.text[: m.start() - anchor.start] + " " * (m.end() - m.start())
            rest += anchor.text[m.end() - anchor.start :]
        else:
            rest = anchor.text[: m.start() - anchor.start]
        rest_score = title_score(rest) if rest.strip() else 0.0
        header = _header_rows(lines, first, last, taken | (range_rows - {first}))
        block = [rest, *(lines[j].text for j in header)]
        if any(_is_study(t) for t in block if t.strip()) and not any(
            title_score(t) > 0 and not _is_study(t) for t in block if t.strip()
        ):
            continue  # a study period ("July 2009 to June 2013 Diploma …"), not a job
        picked = _pick_title(rest, anchor.start) if rest_score > 0 else None
        title_row = first
        if picked is None:
            scored = [(title_score(lines[j].text), -n, j) for n, j in enumerate(header)]
            scored = [s for s in scored if s[0] > 0 and not _is_study(lines[s[2]].text)]
            if scored:
                _, _, title_row = max(scored)
                picked = _pick_title(lines[title_row].text, lines[title_row].start)
        if picked is None:  # no recognisable title: the anchor's own words, else the line above
            picked = _pick_title(rest, anchor.start, plain_ok=True) if rest.strip() else None
            above = [j for j in header if j < first]
            if picked is None and above:
                title_row = above[0]
                picked = _pick_title(lines[title_row].text, lines[title_row].start, plain_ok=True)
        if picked is None:
            continue
        title, span = picked
        start, end, current = interval
        for j in range(first, last + 1):
            lines[j].kind = "anchor"
        rows = [first, last, *header]
        if title_row != first:
            lines[title_row].kind = "header"
        taken.update(range(first, last + 1))
        taken.add(title_row)
        pos = Position(
            title, lines[title_row], start, end, current, title_span=span,
            dates_span=(m.start(), m.end()),
        )  # fmt: skip
        found.append((pos, min(first, title_row), max(last, title_row, *rows[:2])))

    # 5) bodies: the lines after each header block, up to the next position or a section
    found.sort(key=lambda f: f[1])
    for n, (pos, _, last_row) in enumerate(found):
        stop = found[n + 1][1] if n + 1 < len(found) else len(lines)
        for j in range(last_row + 1, stop):
            ln = lines[j]
            if ln.kind in ("section", *_KIND_SECTIONS):
                break
            if not ln.text.strip() or ln.kind in ("anchor", "header") or j in taken:
                continue
            ln.kind = "body"
            pos.body.append(ln)

    positions = [pos for pos, _, _ in found]
    positions.sort(key=lambda p: (p.end, p.start), reverse=True)
    for n, pos in enumerate(positions):
        pos.line.position = n
        for ln in pos.body:
            ln.position = n
    skills = [ln for ln in lines if ln.kind == "skills"]
    summary = [ln for ln in lines if ln.kind == "summary"]
    return ParsedResume(text, lines, positions, as_of, skills, summary, _titles(lines, found))


# Sections whose lines name studies, tools or projects, not the jobs a person held.
_NOT_TITLE_SECTIONS = frozenset({"education", "skills", "projects", "languages", "other"})
_TITLE_MAX_WORDS = 8
_LABEL_MAX_WORDS = 2
_FIGURES_RE = re.compile(r"\d{4}|\d[.,]\d|\d\s*%")
_CONTACT_RE = re.compile(r"@|https?:|www\.|\d{5,}|\d[\d ()+-]{7,}\d")


def _title_of_line(ln: Line) -> Title | None:
    """The job title a line states, if the line reads as one: short, not a sentence, not a
    contact, a study, a label ("Type: …") or a heading, and with a job-title head noun."""
    start, end = ln.content_span()
    body = ln.text[start - ln.start : end - ln.start]
    if not body or ln.kind == "section" or ln.section in _NOT_TITLE_SECTIONS:
        return None
    label = _LABEL_PREFIX_RE.match(body)
    if label and len(label.group().split()) <= _LABEL_MAX_WORDS:  # "Role: Test Engineer"
        start += label.end()
        body = body[label.end() :]
    body_no_dates = _RANGE_RE.sub(" ", body).strip(" ,;-–—|")
    top = ln.section == "top"  # before any section: where a resume states its own title
    if (
        not body_no_dates
        or len(body_no_dates) > MAX_TITLE_CHARS
        or len(body_no_dates.split()) > _TITLE_MAX_WORDS
        or ":" in body_no_dates
        or _FIGURES_RE.search(body_no_dates)  # versions, years, amounts
        or _CONTACT_RE.search(body_no_dates)
        or (body_no_dates.endswith(".") and len(body_no_dates.split()) > 3)
        or _is_study(body_no_dates)
        or not (ROLE_NOUNS.search(body_no_dates) or (top and names_a_job(body_no_dates)))
    ):
        return None
    picked = _pick_title(body, start, plain_ok=top)
    return Title(*picked) if picked else None


def _titles(lines: list[Line], found: list[tuple[Position, int, int]]) -> list[Title]:
    """Every job title the resume states, in the order written: the positions' titles (read
    beside their dates) and title-like lines anywhere else (a headline, an undated position,
    a title after an education block)."""
    candidates = {
        pos.title_span: Title(pos.title, pos.title_span)
        for pos, _, _ in found
        if title_score(pos.title) > 0
    }
    for ln in lines:
        title = _title_of_line(ln)
        if title is not None and not any(spans_overlap(title.span, s) for s in candidates):
            candidates[title.span] = title
    return [candidates[span] for span in sorted(candidates)]


def spans_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two half-open character spans share a character."""
    return a[0] < b[1] and b[0] < a[1]
