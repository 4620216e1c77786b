"""Reading a free-text resume the way a recruiter skims it: positions, dates, titles, skills.

General on purpose — it must work on resumes this project never generated, in English and
Russian. It looks for what almost every resume has:

* **positions**, anchored on a date range ("2021-03 – present", "03.2019 — по настоящее время",
  "Jan 2020 - Mar 2022", "2017–2019"); the title is the most title-like part of the anchor line
  or of the line just above it ("Senior Java Developer — Acme", "2022 · Acme · Data Engineer",
  "Earlier: BI Analyst at Acme, 2015–2017"); the lines that follow, up to a blank line or the
  next position, describe the work;
* **sections** by their usual headers (Summary / About me / О себе, Experience / Опыт работы,
  Skills / Навыки / Стек, Education / Образование, Languages / Языки), with or without a colon;
* **years of experience** from the union of the position intervals (overlaps merged). "Present"
  means the moment the resume was last updated (``as_of``), not today, so the same resume is
  always read the same way. A year-only range counts from mid-year to mid-year.

Every line keeps its character offsets in the original text, so quotes are cut verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Line", "ParsedResume", "Position", "month_index", "parse_as_of", "parse_resume"]

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
    rf"|(?P<{{p}}mon>{_MONTH_NAMES})\.?\s+(?P<{{p}}y3>(?:19|20)\d\d)(?!\d)"
    r"|(?P<{p}y4>(?:19|20)\d\d)(?![\d]))"
)
_PRESENT = (
    r"(?P<present>present|now|current(?:ly)?|today|to date|ongoing|until now|till now"
    r"|по\s+настоящее\s+время|настоящее\s+время|по\s+н\.?\s*в\.?|н\.\s*в\.|сейчас"
    r"|по\s+сей\s+день|наст\.\s*время)"
)
_RANGE_RE = re.compile(
    r"(?<![\w])"
    + _DATE.format(p="a")
    + r"\s*(?:–|—|-|−|to|till|until|по|до|\.\.)\s*(?:"
    + _DATE.format(p="b")
    + "|"
    + _PRESENT
    + r")(?![\w])",
    re.IGNORECASE,
)

_SECTION_WORDS: dict[str, str] = {
    "summary": "summary", "profile": "summary", "about me": "summary", "about": "summary",
    "objective": "summary", "о себе": "summary", "кратко обо мне": "summary", "обо мне": "summary",
    "experience": "experience", "work experience": "experience",
    "professional experience": "experience", "employment history": "experience",
    "career": "experience", "опыт работы": "experience", "опыт": "experience",
    "skills": "skills", "key skills": "skills", "tech stack": "skills", "stack": "skills",
    "technologies": "skills", "technical skills": "skills", "навыки": "skills",
    "ключевые навыки": "skills", "стек": "skills", "технологии": "skills",
    "education": "education", "образование": "education", "courses": "education",
    "certifications": "education", "курсы": "education", "сертификаты": "education",
    "languages": "languages", "языки": "languages", "знание языков": "languages",
    "projects": "experience", "проекты": "experience",
}  # fmt: skip
_SECTION_RE = re.compile(
    r"^\s*(?P<name>"
    + "|".join(sorted((re.escape(w) for w in _SECTION_WORDS), key=len, reverse=True))
    + r")\s*(?::\s*(?P<rest>.*))?$",
    re.IGNORECASE,
)
_EDUCATION_RE = re.compile(
    r"(?<!\w)(?:universit\w*|institute|college|school|academy|bsc|msc|ba|ma|mba|phd|bachelor\w*"
    r"|master'?s?|degree|университет\w*|институт\w*|академи\w*|колледж\w*|техникум\w*|бакалавр\w*"
    r"|магистр\w*|специалитет\w*|мгту|мфти|мгу|спбгу|вшэ|итмо|мифи|урфу|нгу)(?!\w)",
    re.IGNORECASE,
)
_BULLET_RE = re.compile(r"^\s*(?:[•·▪◦●○■□➢►‣⁃*]|-(?=\s)|–(?=\s)|—(?=\s)|\d+[.)](?=\s))\s*")
_SPLIT_RE = re.compile(r"\s+[—–|·•]\s+|\s+-\s+|\s*[|·•]\s*|,\s+|\s+at\s+|\s+@\s+")
_LABEL_PREFIX_RE = re.compile(r"^\s*[^\W\d_][\w ]{0,20}:\s+")
ROLE_NOUNS = re.compile(
    r"(?<!\w)(?:developer|engineer|programmer|manager|analyst|architect|designer|scientist"
    r"|tester|consultant|specialist|administrator|coordinator|owner|researcher|intern|lead"
    r"|director|head|officer|master|sre|devops|qa|cto|cpo"
    r"|разработчик\w*|инженер\w*|программист\w*|менеджер\w*|аналитик\w*|архитектор\w*"
    r"|дизайнер\w*|руководител\w*|специалист\w*|тестировщик\w*|администратор\w*|координатор\w*"
    r"|исследовател\w*|стаж[её]р\w*|владел\w*|директор\w*|лид\w*|консультант\w*|продакт\w*"
    r"|проджект\w*)(?!\w)",
    re.IGNORECASE,
)


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
    kind: str = "other"  # header | anchor | body | section | skills | summary | education | other
    position: int | None = None  # index of the position it belongs to

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

    @property
    def months(self) -> int:
        return max(1, self.end - self.start + 1)

    @property
    def text(self) -> str:
        return "\n".join([self.title, *(ln.text for ln in self.body)])


@dataclass
class ParsedResume:
    text: str
    lines: list[Line]
    positions: list[Position]  # most recent first
    as_of: int | None
    skills_lines: list[Line]
    summary_lines: list[Line]

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


def _title_score(part: str) -> float:
    from hltm.judge.roles import title_evidence  # local import: roles imports this module

    score = sum(title_evidence(part).values())
    if ROLE_NOUNS.search(part):
        score += 1.0
    return score


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
        score = _title_score(stripped)
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
        if not stripped or len(stripped) > 80:
            return None
        return stripped, (offset + s0, offset + s0 + len(stripped))
    return text[best[1] : best[2]], (offset + best[1], offset + best[2])


def _section_of(line: str) -> tuple[str, str | None] | None:
    m = _SECTION_RE.match(line)
    if not m:
        return None
    return _SECTION_WORDS[m.group("name").lower()], m.group("rest")


def parse_resume(text: str, as_of: int | None = None) -> ParsedResume:
    """Split ``text`` into lines, sections and positions (see the module docstring)."""
    lines: list[Line] = []
    offset = 0
    for raw in text.split("\n"):
        lines.append(Line(raw, offset))
        offset += len(raw) + 1

    # 1) sections and date-range anchors
    section = "top"
    anchors: list[tuple[int, re.Match[str]]] = []
    for i, ln in enumerate(lines):
        stripped = ln.text.strip()
        if not stripped:
            continue
        sec = _section_of(stripped) if len(stripped) < 120 else None
        if sec is not None:
            name, rest = sec
            section = name
            if rest:  # "Skills: Go, SQL", "Languages: English (C1)"
                ln.kind = {"skills": "skills", "education": "education"}.get(name, "other")
            else:
                ln.kind = "section"
            continue
        m = _RANGE_RE.search(ln.text)
        if m and section != "education" and not _EDUCATION_RE.search(ln.text):
            anchors.append((i, m))
            ln.kind = "anchor"
            continue
        if section == "summary":
            ln.kind = "summary"
        elif section == "education":
            ln.kind = "education"
        elif section == "skills":
            ln.kind = "skills"

    # 2) "present" = as_of, else the latest month the resume mentions
    if as_of is None:
        latest = None
        for _, m in anchors:
            for p in ("a", "b"):
                d = _date(m, p)
                if d:
                    idx = month_index(d[0], d[1] or 6)
                    latest = idx if latest is None else max(latest, idx)
        as_of = latest

    # 3) positions: title from the anchor line, else from the line above
    positions: list[Position] = []
    by_anchor: dict[int, Position] = {}
    anchor_rows = {i for i, _ in anchors}
    header_rows: set[int] = set()
    for i, m in anchors:
        interval = _interval(m, as_of)
        if interval is None:
            continue
        ln = lines[i]
        rest = ln.text[: m.start()] + " " * (m.end() - m.start()) + ln.text[m.end() :]
        picked = _pick_title(rest, ln.start)
        title_line = ln
        above = i - 1
        while above >= 0 and not lines[above].text.strip():
            above -= 1
        header_ok = (
            above >= 0
            and above not in anchor_rows
            and lines[above].kind in ("other", "body")
            and not _BULLET_RE.match(lines[above].text)
        )
        for plain in (False, True):
            if picked is not None:
                break
            if plain:  # no recognisable title anywhere: the anchor line's own first part
                picked = _pick_title(rest, ln.start, plain_ok=True)
                header_ok = header_ok and above > 0  # the first line of a resume is a name
            if picked is None and header_ok:
                prev = lines[above]
                picked = _pick_title(prev.text, prev.start, plain_ok=plain)
                if picked is not None:
                    prev.kind = "header"
                    header_rows.add(above)
                    title_line = prev
        if picked is None:
            continue
        title, span = picked
        start, end, current = interval
        pos = Position(title, title_line, start, end, current, title_span=span)
        positions.append(pos)
        by_anchor[i] = pos

    # 4) bodies: the lines after each anchor, up to a blank line, a section or the next position
    rows = [i for i, _ in anchors]
    for idx, i in enumerate(rows):
        pos = by_anchor.get(i)
        if pos is None:
            continue
        nxt = rows[idx + 1] if idx + 1 < len(rows) else len(lines)
        j = i + 1
        while j < nxt:
            ln = lines[j]
            if not ln.text.strip() or ln.kind in ("section", "skills", "education", "summary"):
                break
            if j in header_rows:
                break
            ln.kind = "body"
            pos.body.append(ln)
            j += 1

    positions.sort(key=lambda p: (p.end, p.start), reverse=True)
    for n, pos in enumerate(positions):
        pos.line.position = n
        for ln in pos.body:
            ln.position = n
    # Lines that carry a skills list without a section header ("Stack: …", "Стек: …")
    skills = [ln for ln in lines if ln.kind == "skills"]
    summary = [ln for ln in lines if ln.kind == "summary"]
    return ParsedResume(text, lines, positions, as_of, skills, summary)
