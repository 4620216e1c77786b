"""The label function, a pure function of ground truth, and each vacancy's labelled pairs."""

from __future__ import annotations

from hltm_devkit.generator.helpers import _rng
from hltm_devkit.generator.vocabulary import LEVEL_INDEX


def label_pair(vacancy_truth: dict, resume_truth: dict) -> str:
    """ "fit" | "borderline" | "miss" for one vacancy–resume pair, from ground truth only.

    Role first: a resume whose actual role family (from its recent positions, not its headline)
    differs from the vacancy's is a miss however many keywords it shares. Then level and the
    mandatory skills: same level and every must-have → fit; off by one level with every must-have,
    or same level missing exactly one must-have → borderline; anything further off → miss.
    """
    if resume_truth["role_family"] != vacancy_truth["role_family"]:
        return "miss"
    gap = abs(LEVEL_INDEX[resume_truth["level"]] - LEVEL_INDEX[vacancy_truth["level"]])
    have = set(resume_truth.get("skills") or ())
    missing = sum(1 for s in vacancy_truth.get("must_have_skills") or () if s not in have)
    if gap == 0 and missing == 0:
        return "fit"
    if (gap == 1 and missing == 0) or (gap == 0 and missing == 1):
        return "borderline"
    return "miss"


LABELS_PER_VACANCY = 25
MAX_LABELLED = {"fit": 12, "borderline": 8}


def _select_labels(seed: int, v: dict, active: list[str], truth: dict[str, dict]) -> list[dict]:
    rng = _rng(seed, "labels", v["vacancy_id"])
    lab = {rid: label_pair(v, truth[rid]) for rid in active}

    def capped(label: str) -> list[str]:
        """Planted candidates first, then a sample of incidental ones, up to the cap."""
        rows = [r for r in active if lab[r] == label]
        planted = [r for r in rows if v["vacancy_id"] in truth[r]["targets"]]
        incidental = [r for r in rows if r not in planted]
        room = max(0, MAX_LABELLED[label] - len(planted))
        return planted + rng.sample(incidental, k=min(room, len(incidental)))

    traps = [r for r in active if truth[r]["trap"] and v["vacancy_id"] in truth[r]["targets"]]
    selected = list(dict.fromkeys(capped("fit") + capped("borderline") + traps))
    chosen = set(selected)
    misses = [r for r in active if lab[r] == "miss" and r not in chosen]
    same = [r for r in misses if truth[r]["role_family"] == v["role_family"]]
    other = [r for r in misses if truth[r]["role_family"] != v["role_family"]]
    need = max(6, LABELS_PER_VACANCY - len(selected))
    take = rng.sample(same, k=min(len(same), need // 3))
    take += rng.sample(other, k=min(len(other), need - len(take)))
    pairs = sorted(selected + take)
    return [{"vacancy_id": v["vacancy_id"], "resume_id": r, "label": lab[r]} for r in pairs]
