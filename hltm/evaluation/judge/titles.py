"""How well the resume reader finds job titles, measured on real resumes of two layouts.

* ``resumes_indeed_ner.jsonl``: people marked the job titles (``Designation`` spans). A title
  the reader finds is *correct* when it overlaps a marked span (precision); a marked span is
  *found* when a title the reader finds overlaps it (recall). Resumes without any marked span
  are left out (nothing to measure against).
* ``resumes_livecareer.csv``: line 1 is the person's own title. Recall is the share of resumes
  whose line 1 the reader finds as a title; the other titles it finds (positions further down)
  are not marked, so precision there is read as the share of resumes whose *first* found
  title is line 1.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from hltm.judge.resume import parse_resume, spans_overlap
from hltm.settings import realdata_dir

__all__ = ["TitleMeasure", "measure_indeed", "measure_livecareer"]

INDEED_FILE = "resumes_indeed_ner.jsonl"
LIVECAREER_FILE = "resumes_livecareer.csv"


@dataclass(frozen=True)
class TitleMeasure:
    name: str
    resumes: int
    found: int  # titles the reader found
    correct: int  # of those, correct
    marked: int  # titles people marked (or resumes, on livecareer)
    recalled: int  # of those, found

    @property
    def precision(self) -> float:
        return self.correct / self.found if self.found else 0.0

    @property
    def recall(self) -> float:
        return self.recalled / self.marked if self.marked else 0.0

    def line(self) -> str:
        return (
            f"{self.name}: {self.resumes} resumes; precision {self.precision:.1%}"
            f" ({self.correct}/{self.found}), recall {self.recall:.1%}"
            f" ({self.recalled}/{self.marked})"
        )


def designation_spans(row: dict) -> list[tuple[int, int]]:
    """The ``Designation`` spans of one Indeed row as half-open offsets (the file's ends are
    inclusive), leading and trailing spaces trimmed."""
    text = row["content"]
    spans = set()
    for ann in row.get("annotation") or ():
        if "Designation" not in ann.get("label", ()):
            continue
        for point in ann["points"]:
            start, end = int(point["start"]), int(point["end"]) + 1
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if end > start:
                spans.add((start, end))
    return sorted(spans)


def measure_indeed(realdata: Path | None = None) -> TitleMeasure:
    path = (realdata or realdata_dir()) / INDEED_FILE
    resumes = found = correct = marked = recalled = 0
    with path.open(encoding="utf-8") as fh:
        for raw in fh:
            row = json.loads(raw)
            gold = designation_spans(row)
            if not gold:
                continue
            titles = [t.span for t in parse_resume(row["content"]).titles]
            resumes += 1
            found += len(titles)
            correct += sum(1 for t in titles if any(spans_overlap(t, g) for g in gold))
            marked += len(gold)
            recalled += sum(1 for g in gold if any(spans_overlap(t, g) for t in titles))
    return TitleMeasure("indeed (Designation spans)", resumes, found, correct, marked, recalled)


def measure_livecareer(realdata: Path | None = None) -> TitleMeasure:
    path = (realdata or realdata_dir()) / LIVECAREER_FILE
    csv.field_size_limit(1 << 30)
    resumes = first_right = recalled = 0
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            text = row["Resume_text"]
            lead = len(text) - len(text.lstrip())
            line1 = (lead, lead + len(text.lstrip().split("\n", 1)[0]))
            if not text[line1[0] : line1[1]].strip():
                continue
            titles = [t.span for t in parse_resume(text).titles]
            resumes += 1
            recalled += any(spans_overlap(t, line1) for t in titles)
            first_right += bool(titles) and spans_overlap(titles[0], line1)
    return TitleMeasure("livecareer (line 1)", resumes, resumes, first_right, resumes, recalled)
