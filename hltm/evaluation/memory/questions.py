"""The evaluation harness: question sets from the sample world's ground truth, HLTM against
baselines and ablations, one printed table — and the leakage test beside it.

Question sets (from `ground_truth.json`, the generator's latent truth, never from the memory):

* **summary** questions, asked by a seat ("Where do I usually hire?") or a contract ("Where does
  our organisation usually hire?") about usual locations, work mode, employment type, roles and
  seniority; the reference answer is the latent preference (`location: Berlin, Munich`).
  Scored with Token-F1, BLEU-1 and, when a real LLM is configured, LLM-as-judge correctness.
* **retrieval** questions ("Which projects are for a data engineer in Berlin?") asked by a seat or
  a contract; the reference is the set of projects in the asker's subtree whose true attributes
  satisfy both conditions. Scored with precision / recall / F1 of the cited projects.

Systems: HLTM (three retrievers over the collapsed tree), the ablations leaf-only (no aggregated
nodes), facets-only, QA-only, summary-only, and the baselines full context, RAG over fixed chunks
and schema filter (`hltm.evaluation.memory.baselines`). Every system makes the same two LLM calls per
question (parse, answer); cost columns are means per question.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hltm.evaluation.memory.baselines import Baselines, RawCorpus, SystemAnswer
from hltm.evaluation.memory.leakage import LeakageReport, leakage_questions, run_leakage
from hltm.evaluation.memory.metrics import bleu1, set_prf, token_f1
from hltm.evaluation.memory.tasks import ANSWER_JUDGE
from hltm.llm import LLMError
from hltm.query.engine import QueryEngine
from hltm.query.retrieve import RetrievalConfig
from hltm.query.scope import Identity
from hltm.settings import OFFLINE_BACKEND, Settings


@dataclass(frozen=True)
class EvalQuestion:
    qid: str
    kind: str  # "summary" | "retrieval"
    identity: Identity
    question: str
    reference: str = ""
    reference_nodes: tuple[str, ...] = ()
    field: str = ""


def load_ground_truth(world_dir: Path | str) -> dict[str, Any]:
    path = Path(world_dir) / "ground_truth.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: the evaluation needs the sample world's ground truth "
            "(`hltm generate` / `hltm demo` write it)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def family_name(family: str) -> str:
    try:
        from hltm_devkit.generator import FAMILIES

        return str(FAMILIES[family].get("name_en") or family.replace("_", " "))
    except (ImportError, KeyError):
        return family.replace("_", " ")


def _physical(cities: Iterable[str]) -> list[str]:
    return [c for c in cities if not c.lower().startswith("remote")]


# ---- question sets -----------------------------------------------------------------------------

SEAT_SUMMARY = (
    ("location", "Where do I usually hire?", "location"),
    ("work_mode", "What work mode do I usually offer?", "work mode"),
    ("employment_type", "Which employment type do I usually offer?", "employment type"),
    ("title", "Which roles do I usually hire for?", "roles"),
    ("seniority", "Which seniority level do I usually hire?", "seniority"),
)
CONTRACT_SUMMARY = (
    ("location", "Where does our organisation usually hire?", "location"),
    ("work_mode", "What work mode does our organisation usually offer?", "work mode"),
    ("employment_type", "Which employment type do we usually offer?", "employment type"),
    ("title", "Which roles do we usually hire for?", "roles"),
)


def summary_questions(gt: dict[str, Any]) -> list[EvalQuestion]:
    out = []
    for sid, seat in sorted(gt["seats"].items()):
        truth = {
            "location": ", ".join(seat["locations"]),
            "work_mode": seat["work_mode"],
            "employment_type": seat["employment_type"],
            "title": family_name(seat["title_family"]),
            "seniority": seat["seniority"],
        }
        for fld, question, phrase in SEAT_SUMMARY:
            out.append(
                EvalQuestion(
                    f"sum-{sid}-{fld}",
                    "summary",
                    Identity("seat", sid),
                    question,
                    f"{phrase}: {truth[fld]}",
                    field=fld,
                )
            )
    for cid, contract in sorted(gt["contracts"].items()):
        truth = {
            "location": ", ".join(contract["office_cities"]),
            "work_mode": contract["default_work_mode"],
            "employment_type": contract["default_employment_type"],
            "title": ", ".join(family_name(f) for f in contract["core_families"]),
        }
        for fld, question, phrase in CONTRACT_SUMMARY:
            out.append(
                EvalQuestion(
                    f"sum-{cid}-{fld}",
                    "summary",
                    Identity("contract", cid),
                    question,
                    f"{phrase}: {truth[fld]}",
                    field=fld,
                )
            )
    return out


def _retrieval_templates(p: dict[str, Any]) -> list[tuple[str, Callable[[dict], bool]]]:
    fam, level, mode, emp = p["role_family"], p["seniority"], p["work_mode"], p["employment_type"]
    out: list[tuple[str, Callable[[dict], bool]]] = []
    cities = _physical(p["locations"])
    if cities:
        city = cities[0]
        out.append(
            (
                f"Which projects are for a {family_name(fam)} in {city}?",
                lambda q, fam=fam, city=city: q["role_family"] == fam and city in q["locations"],
            )
        )
        out.append(
            (
                f"Which projects hire {level} people in {city}?",
                lambda q, level=level, city=city: (
                    q["seniority"] == level and city in q["locations"]
                ),
            )
        )
    out.append(
        (
            f"Which projects are {mode} {family_name(fam)} roles?",
            lambda q, fam=fam, mode=mode: q["role_family"] == fam and q["work_mode"] == mode,
        )
    )
    out.append(
        (
            f"Which projects offer {emp} work for a {level} {family_name(fam)}?",
            lambda q, fam=fam, level=level, emp=emp: (
                q["role_family"] == fam and q["seniority"] == level and q["employment_type"] == emp
            ),
        )
    )
    return out


def retrieval_questions(
    gt: dict[str, Any], per_identity: int = 3, max_reference: int = 6
) -> list[EvalQuestion]:
    projects = gt["projects"]
    identities = [Identity("seat", s) for s in sorted(gt["seats"])]
    identities += [Identity("contract", c) for c in sorted(gt["contracts"])]
    out = []
    for identity in identities:
        key = "seat_id" if identity.level == "seat" else "contract_id"
        mine = {pid: p for pid, p in sorted(projects.items()) if p[key] == identity.id}
        asked: set[str] = set()
        picked = 0
        # Walk projects round-robin over templates, so an identity gets varied questions.
        candidates = [
            (i, pid, text, test)
            for pid, p in mine.items()
            for i, (text, test) in enumerate(_retrieval_templates(p))
        ]
        candidates.sort(key=lambda c: (c[0], c[1]))
        for _i, _pid, text, test in candidates:
            if picked >= per_identity or text in asked:
                continue
            asked.add(text)
            reference = tuple(sorted(f"project:{q}" for q, p in mine.items() if test(p)))
            if not 1 <= len(reference) <= max_reference:
                continue
            picked += 1
            out.append(
                EvalQuestion(
                    f"ret-{identity.level}-{identity.id}-{picked}",
                    "retrieval",
                    identity,
                    text,
                    reference_nodes=reference,
                )
            )
    return out


# ---- systems -----------------------------------------------------------------------------------

HLTM_VARIANTS: dict[str, dict[str, Any]] = {
    "HLTM": {},
    "ablation: leaf-only": {"levels": ("project",)},
    "ablation: facets-only": {"retrievers": ("facet",)},
    "ablation: QA-only": {"retrievers": ("qa",)},
    "ablation: summary-only": {"retrievers": ("summary",)},
}
RAG_SYSTEM = "baseline: RAG (chunks)"
BASELINES = ("baseline: full context", RAG_SYSTEM, "baseline: schema filter")
ALL_SYSTEMS = (*HLTM_VARIANTS, *BASELINES)


def _hltm_system(engine: QueryEngine, config: RetrievalConfig):  # type: ignore[no-untyped-def]
    def run(identity: Identity, question: str) -> SystemAnswer:
        result = engine.ask(identity, question, config=config, log=False, channel="eval")
        entities = list(dict.fromkeys(result.context_ids + result.citations))
        return SystemAnswer(
            result.answer, result.citations, entities, result.cost, result.dropped_citations
        )

    return run


def systems_for(
    engine: QueryEngine, baselines: Baselines, names: Iterable[str] = ALL_SYSTEMS
) -> dict[str, Callable[[Identity, str], SystemAnswer]]:
    out: dict[str, Callable[[Identity, str], SystemAnswer]] = {}
    for name in names:
        if name in HLTM_VARIANTS:
            out[name] = _hltm_system(engine, replace(engine.config, **HLTM_VARIANTS[name]))
        elif name == "baseline: full context":
            out[name] = baselines.full_context
        elif name == RAG_SYSTEM:
            out[name] = baselines.rag
        elif name == "baseline: schema filter":
            out[name] = baselines.schema_filter
        else:
            raise ValueError(f"unknown system {name!r}; expected one of {ALL_SYSTEMS}")
    return out


# ---- scoring -----------------------------------------------------------------------------------


@dataclass
class SystemScores:
    name: str
    summary_f1: float = 0.0
    bleu1: float = 0.0
    judge: float | None = None
    ret_precision: float = 0.0
    ret_recall: float = 0.0
    ret_f1: float = 0.0
    llm_calls: float = 0.0
    tokens: float = 0.0
    total_ms: float = 0.0
    non_llm_ms: float = 0.0
    dropped_citations: int = 0
    n_summary: int = 0
    n_retrieval: int = 0
    per_question: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "per_question"}
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


@dataclass
class EvalReport:
    rows: list[SystemScores]
    questions: list[EvalQuestion]
    leakage: LeakageReport | None
    judge_model: str | None
    seconds: float

    def row(self, name: str) -> SystemScores:
        return next(r for r in self.rows if r.name == name)

    def table(self) -> str:
        head = (
            f"{'system':<26} {'sumF1':>6} {'BLEU1':>6} {'judge':>6} {'retP':>6} {'retR':>6}"
            f" {'retF1':>6} {'calls':>5} {'tokens':>7} {'ms':>7} {'exLLM':>7}"
        )
        lines = [head, "-" * len(head)]
        for r in self.rows:
            judge = f"{r.judge:6.3f}" if r.judge is not None else f"{'n/a':>6}"
            lines.append(
                f"{r.name:<26} {r.summary_f1:6.3f} {r.bleu1:6.3f} {judge} {r.ret_precision:6.3f}"
                f" {r.ret_recall:6.3f} {r.ret_f1:6.3f} {r.llm_calls:5.2f} {r.tokens:7.0f}"
                f" {r.total_ms:7.1f} {r.non_llm_ms:7.1f}"
            )
        n_sum = sum(q.kind == "summary" for q in self.questions)
        n_ret = len(self.questions) - n_sum
        lines.append(
            f"\n{n_sum} summary + {n_ret} retrieval questions; means per question; ms = latency, exLLM = latency excluding time inside the LLM; judge = "
            + (
                f"LLM-as-judge ({self.judge_model})"
                if self.judge_model
                else "n/a (offline: no LLM)"
            )
        )
        if self.leakage is not None:
            lines += ["", self.leakage.table()]
        return "\n".join(lines)

    def metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {"questions": len(self.questions), "seconds": round(self.seconds, 1)}
        for r in self.rows:
            out[r.name] = r.as_dict()
        if self.leakage is not None:
            out["leakage"] = self.leakage.as_dict()
        return out


def _judge(engine: QueryEngine, question: EvalQuestion, answer: str) -> float | None:
    payload = {"question": question.question, "reference": question.reference, "answer": answer}
    try:
        out = engine.llm.run(ANSWER_JUDGE, payload, context=f"judge {question.qid}")
    except LLMError:
        return None
    return min(1.0, max(0.0, float(out.score)))


def score_system(
    name: str,
    run: Callable[[Identity, str], SystemAnswer],
    questions: list[EvalQuestion],
    engine: QueryEngine,
    judge: bool,
) -> SystemScores:
    scores = SystemScores(name)
    engine.embed.clear()  # each system pays for its own query embeddings
    f1s, bleus, judged, precisions, recalls, rf1s = [], [], [], [], [], []
    calls, tokens, total, non_llm = [], [], [], []
    for q in questions:
        got = run(q.identity, q.question)
        calls.append(got.cost.llm_calls)
        tokens.append(got.cost.tokens)
        total.append(got.cost.total_ms)
        non_llm.append(got.cost.non_llm_ms)
        scores.dropped_citations += len(got.dropped)
        record: dict[str, Any] = {"qid": q.qid, "answer": got.answer, "citations": got.citations}
        if q.kind == "summary":
            f1s.append(token_f1(got.answer, q.reference))
            bleus.append(bleu1(got.answer, q.reference))
            record |= {"token_f1": f1s[-1], "bleu1": bleus[-1]}
            if judge:
                value = _judge(engine, q, got.answer)
                if value is not None:
                    judged.append(value)
                    record["judge"] = value
        else:
            cited = [c for c in got.citations if c.startswith("project:")]
            p, r, f = set_prf(cited, q.reference_nodes)
            precisions.append(p)
            recalls.append(r)
            rf1s.append(f)
            record |= {"precision": p, "recall": r, "f1": f}
        scores.per_question.append(record)

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    scores.summary_f1, scores.bleu1 = mean(f1s), mean(bleus)
    scores.judge = mean(judged) if judge and judged else None
    scores.ret_precision, scores.ret_recall, scores.ret_f1 = (
        mean(precisions),
        mean(recalls),
        mean(rf1s),
    )
    scores.llm_calls, scores.tokens = mean(calls), mean(tokens)
    scores.total_ms, scores.non_llm_ms = mean(total), mean(non_llm)
    scores.n_summary, scores.n_retrieval = len(f1s), len(precisions)
    return scores


def evaluate(
    settings: Settings,
    world_dir: Path | str,
    *,
    systems: Iterable[str] = ALL_SYSTEMS,
    judge: bool | None = None,
    leakage: bool = True,
    leakage_baseline: bool = True,
    limit: int | None = None,
    engine: QueryEngine | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvalReport:
    """Run every system on the question sets (and the leakage test) and collect the table.

    `limit` caps the questions of each kind (for quick runs and tests); `judge=None` runs the
    LLM judge only when a real LLM is configured; `leakage_baseline=False` measures HLTM's
    leakage without unfiltered RAG beside it.
    """
    started = time.perf_counter()
    gt = load_ground_truth(world_dir)
    engine = engine or QueryEngine(settings, log_queries=False)
    corpus = RawCorpus.load(settings.sources_db)
    systems = tuple(systems)
    # Embedding every document's chunks is most of a small run's cost: only when a system needs it.
    against_rag = leakage and leakage_baseline
    baselines = Baselines(engine, corpus, build_chunks=against_rag or RAG_SYSTEM in systems)
    summary = summary_questions(gt)
    retrieval = retrieval_questions(gt)
    if limit is not None:
        summary, retrieval = summary[:limit], retrieval[:limit]
    questions = summary + retrieval
    use_judge = settings.llm_backend != OFFLINE_BACKEND if judge is None else judge
    engine.warm_up()  # model loading is not any system's latency
    rows = []
    for name, run in systems_for(engine, baselines, systems).items():
        if progress:
            progress(name)
        rows.append(score_system(name, run, questions, engine, use_judge))
    report_leakage = None
    if leakage:
        if progress:
            progress("leakage")
        items = leakage_questions(gt, corpus)
        if limit is not None:
            items = items[: max(limit * 3, 6)]
        report_leakage = run_leakage(engine, baselines if against_rag else None, corpus, items)
    return EvalReport(
        rows,
        questions,
        report_leakage,
        engine.llm.model if use_judge else None,
        time.perf_counter() - started,
    )
