"""How good the calibration is, on a world whose ground truth holds each seat's latent preferences.

Two measurements, printed side by side by `hltm judge calibration evaluate`:

* **Preferences**: for every vacancy, the usual values memory reports for its seat (proposed or
  left out because the vacancy settles them) against that seat's latent preferences in
  ``ground_truth.json`` — locations, work mode, employment type, seniority and title family
  (qualifications have no ground truth there, so they are counted, not scored). Precision and
  recall are pooled over vacancies (Σ correct / Σ reported, Σ correct / Σ true). The ground
  truth's role families (``backend_engineer``) are mapped onto the judge's lexicon by reading
  their name as a title with the judge's own title rules.
* **Ranking**: strict and soft precision@10 of union + judge on the frozen golden set, closed
  set and live pool, with the vacancies as posted and with the memory items added.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hltm.evaluation.judge.golden import GoldenSet
from hltm.evaluation.judge.golden_eval import GoldenReport
from hltm.judge.calibration import Calibration, calibrate_vacancies
from hltm.judge.lexicon import FAMILY_BY_NAME
from hltm.judge.roles import title_evidence
from hltm.memory import lexicon as lx

SCORED_FIELDS = ("location", "work_mode", "employment_type", "seniority", "title_family")


@dataclass
class PreferenceScore:
    reported: int = 0
    correct: int = 0
    true: int = 0
    per_field: dict[str, list[int]] = field(
        default_factory=dict
    )  # field → [correct, reported, true]
    unscored: int = 0  # reported values of fields the ground truth does not hold
    proposed: int = 0  # items the judge received (after the vacancy's text won)
    proposed_correct: int = 0
    proposed_scored: int = 0

    @property
    def precision(self) -> float:
        return self.correct / self.reported if self.reported else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.true if self.true else 0.0


def _family_label(family: str) -> str | None:
    """The judge lexicon's label for a ground-truth role family, read as a title."""
    evidence = title_evidence(family.replace("_", " "))
    if not evidence:
        return None
    return FAMILY_BY_NAME[max(evidence, key=evidence.__getitem__)].label


def seat_truth(truth: dict[str, Any]) -> dict[str, set[tuple]]:
    """seat id → {(field, normalised value)} of its latent preferences."""
    out: dict[str, set[tuple]] = {}
    for seat_id, seat in truth["seats"].items():
        prefs = {("location", lx.normalise_value(c)) for c in seat.get("locations") or ()}
        for name in ("work_mode", "employment_type", "seniority"):
            if seat.get(name):
                prefs.add((name, lx.normalise_value(str(seat[name]))))
        fam = seat.get("title_family")
        label = _family_label(fam) if fam else None
        if label:
            prefs.add(("title_family", lx.normalise_value(label)))
        out[seat_id] = prefs
    return out


def score_preferences(
    calibrations: Sequence[Calibration], truth: dict[str, set[tuple]]
) -> PreferenceScore:
    score = PreferenceScore()
    for cal in calibrations:
        want = truth.get(cal.seat_id or "")
        if want is None:
            continue
        usual = [p for p in cal.proposals] + [p for p, _ in cal.skipped]
        got = {(p.field, lx.normalise_value(p.value)) for p in usual if p.field in SCORED_FIELDS}
        score.unscored += sum(1 for p in usual if p.field not in SCORED_FIELDS)
        score.reported += len(got)
        score.correct += len(got & want)
        score.true += len(want)
        for name in SCORED_FIELDS:
            row = score.per_field.setdefault(name, [0, 0, 0])
            mine = {g for g in got if g[0] == name}
            theirs = {w for w in want if w[0] == name}
            row[0] += len(mine & theirs)
            row[1] += len(mine)
            row[2] += len(theirs)
        for p in cal.proposals:
            score.proposed += 1
            if p.field in SCORED_FIELDS:
                score.proposed_scored += 1
                score.proposed_correct += (p.field, lx.normalise_value(p.value)) in want
    return score


@dataclass
class CalibrationReport:
    preferences: PreferenceScore
    without: GoldenReport
    with_memory: GoldenReport
    calibrated_vacancies: int

    def table(self) -> str:
        p = self.preferences
        lines = [
            "Usual preferences from memory vs each seat's latent preferences (ground truth):",
            "| field | correct / reported | precision | correct / true | recall |",
            "|---|---|---|---|---|",
        ]
        for name, (ok, reported, true) in p.per_field.items():
            prec = f"{ok / reported:.1%}" if reported else "–"
            rec = f"{ok / true:.1%}" if true else "–"
            lines.append(f"| {name} | {ok}/{reported} | {prec} | {ok}/{true} | {rec} |")
        lines.append(
            f"| **all** | {p.correct}/{p.reported} | {p.precision:.1%} | {p.correct}/{p.true}"
            f" | {p.recall:.1%} |"
        )
        proposed_prec = p.proposed_correct / p.proposed_scored if p.proposed_scored else 0.0
        lines += [
            "",
            f"Items the judge received (the vacancy's own text won every overlap): {p.proposed}"
            f" over {self.calibrated_vacancies} vacancies; {p.proposed_correct}/"
            f"{p.proposed_scored} scored ones correct ({proposed_prec:.1%}); {p.unscored}"
            " usual qualifications (no ground truth) not scored.",
            "",
            "Golden set, union + judge, precision@10 without and with calibration:",
            "| setting | strict without | strict with | soft without | soft with |",
            "|---|---|---|---|---|",
        ]
        for setting in ("closed", "live"):
            cells = []
            for soft in (False, True):
                for report in (self.without, self.with_memory):
                    r = report.precision[(setting, "union+judge", "soft" if soft else "strict")]
                    cells.append(f"{r.value:.1%} ({r.hits}/{r.shown})")
            lines.append(f"| {setting} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
        return "\n".join(lines)


def evaluate_calibration(
    gs: GoldenSet,
    world_dir: Path,
    sources_db: Path,
    derived_db: Path,
    judge: Callable[[GoldenSet], GoldenReport],
) -> CalibrationReport:
    """Calibrate the golden vacancies from the current memory (the world's, built from the
    sources), score the preferences against the world's ground truth, and judge the golden set
    with and without the memory items."""
    truth_path = world_dir / "ground_truth.json"
    if not truth_path.exists():
        raise FileNotFoundError(f"{truth_path} not found: generate the world (`hltm demo`)")
    truth = json.loads(truth_path.read_text(encoding="utf-8"))
    calibrations = calibrate_vacancies(sources_db, derived_db, gs.vacancies)
    by_id = {c.vacancy_id: c for c in calibrations}
    calibrated = [
        v.calibrated(by_id[v.vacancy_id].requirements(), by_id[v.vacancy_id].version)
        for v in gs.vacancies
    ]
    return CalibrationReport(
        preferences=score_preferences(calibrations, seat_truth(truth)),
        without=judge(gs),
        with_memory=judge(replace(gs, vacancies=calibrated)),
        calibrated_vacancies=sum(1 for c in calibrations if c.proposals),
    )
