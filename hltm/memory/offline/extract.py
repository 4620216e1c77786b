"""The offline, rule-based answers to the four memory tasks (facets, qa, summary, aggregate).

They receive exactly the payload the LLM would receive and return JSON of the same schema, so the
pipeline, the counters and the stores cannot tell them apart. They are general: facets come from
structured fields (title, status, vacancies, recruiter actions) and from text patterns in English
and Russian (a gazetteer, work-mode / employment / seniority keywords, a skills vocabulary,
salaries, years of experience, languages, explicit `Field: value` lines, and any hinted attribute
names); QA pairs and summaries are composed from those facets and from the node's own texts (a
summary quotes its most salient sentences, each with its document id; `passage_pairs`, which the
build adds for every backend, gives each fact-bearing passage a pair whose question quotes it,
since the question is what the QA retriever embeds); aggregation counts facet values across
children and keeps those with enough support.

Output is a pure function of the payload: every collection is sorted, no set is iterated in
arbitrary order, no clock or randomness is read.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from hltm.memory import lexicon as lx
from hltm.memory.models import MAX_PARENT_QA
from hltm.memory.offline.places import primary_places
from hltm.memory.passages import Payload, content, said, sources_of
from hltm.memory.salience import Salience

FIELD_ORDER = tuple(lx.FIELD_PHRASES)
FIELD_PHRASE = lx.FIELD_PHRASES
_MAX_VALUES_IN_ANSWER = 8
_MAX_FACET_QA = 6  # the rest of a project's pairs are extracts of its own texts
_DOCUMENT_LINES = 6  # up to this many documents, the summary quotes each one's best sentence
_KEY_POINTS = 10  # otherwise the node's most salient sentences
_SHORT_TERMS = 8  # salient terms the one-sentence summary names
_MIN_QA = 5


def _field_rank(field: str) -> tuple[int, str]:
    return (FIELD_ORDER.index(field), field) if field in FIELD_ORDER else (len(FIELD_ORDER), field)


def _phrase(field: str) -> str:
    return FIELD_PHRASE.get(field, field.replace("_", " "))


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# ---- project inputs ----------------------------------------------------------------------------


class _FacetBag:
    def __init__(self) -> None:
        self._values: dict[tuple[str, str], str] = {}
        self._sources: dict[tuple[str, str], set[str]] = defaultdict(set)

    def add(self, field: str, value: str, source: str) -> None:
        value = _clean(value)
        if not value or not field:
            return
        key = (field, lx.normalise_value(value))
        # Keep the first spelling seen (sources are visited in a fixed order).
        self._values.setdefault(key, value)
        self._sources[key].add(source)

    def fields(self) -> set[str]:
        return {f for f, _ in self._values}

    def items(self) -> list[dict[str, Any]]:
        out = [
            {"field": field, "value": self._values[(field, key)], "sources": sorted(srcs)}
            for (field, key), srcs in self._sources.items()
        ]
        return sorted(out, key=lambda f: (f["field"], lx.normalise_value(f["value"]), f["value"]))


def _add_canonical(bag: _FacetBag, field: str, value: str, source: str) -> None:
    """An explicit `field: value` mapped onto the vocabularies where it names known terms."""
    if field == "location":
        found = primary_places(value)
        if not found and not re.search(r"\d", value) and not lx.find_terms(lx.WORK_MODES, value):
            found = [value]  # a place no vocabulary knows, unless it is an address or a mode
        for name in found:
            bag.add("location", name, source)
    elif field == "skill":
        for part in re.split(r"[,;/|]| and | и ", value):
            if part.strip():
                bag.add("skill", lx.canonical("skill", part), source)
    elif field in ("work_mode", "employment_type", "seniority"):
        terms = lx.CANONICAL_TERMS[field]
        found = lx.find_terms(terms, lx.unglued(value), negatable=True)
        if not found and len(value.split()) > 3:
            return  # a run-on line names no known term: not a value of this field
        for name, _ in found or [(value, 0)]:
            bag.add(field, name, source)
    elif field == "salary":
        for name, _ in lx.find_salaries(f"salary: {value}") or [(value, 0)]:
            bag.add("salary", name, source)
    elif field == "years_experience":
        found = lx.find_experience(value)
        bag.add(field, found[0][0] if found else value, source)
    elif field == "language":
        for part in re.split(r"[,;/]", value):
            bag.add("language", lx.canonical("language", part), source)
    else:
        bag.add(field, value, source)


def _hinted_value(attribute: str, text: str) -> str | None:
    phrase = re.escape(attribute.replace("_", " ").strip()).replace(r"\ ", r"[\s_-]+")
    match = re.search(
        rf"(?<!\w){phrase}(?!\w)\s*(?:is|are|:|-|—|=|of)?\s*([^.;\n]{{0,80}})",
        text,
        re.IGNORECASE,
    )
    if not match:
        return None
    words = match.group(1).strip(" ,:-—").split()
    return " ".join(words[:8]).rstrip(" ,.") or "mentioned"


def job_work_mode(text: str) -> str | None:
    """The job's own arrangement, one value: the first mode the text states (a posting states
    its arrangement before its benefits, other teams and the company's offices), read as hybrid
    when that sentence names hybrid work or both remote and on-site work."""
    found = lx.find_terms(lx.WORK_MODES, text, negatable=True)
    if not found:
        return None
    name, offset = found[0]
    sentence = lx.sentence_at(text, offset, len(text))
    named = {n for n, _ in lx.find_terms(lx.WORK_MODES, sentence, negatable=True)}
    return "hybrid" if "hybrid" in named or {"remote", "onsite"} <= named else name


# A role phrase: capitalised words (with "of", "and", "&" between them), at most six.
_ROLE_PHRASE = r"[A-Z][\w'’+#./&-]*(?: (?:[A-Z][\w'’+#./&-]*|of|and|&)){0,5}"
# A job description opens with its role ("Sous Chef for a new restaurant…", "Senior Accountant,
# Chicago, hybrid.") or names it after a hiring verb ("is hiring a Senior Mobile Engineer").
_LEAD_ROLE = re.compile(rf"^\s*({_ROLE_PHRASE})(?=,| (?:for|in|at) )")
_CUED_ROLE = re.compile(
    rf"\b(?:hiring|seeking|looking for|recruiting|applications for|as) an? ({_ROLE_PHRASE})"
)


def named_role(text: str) -> str | None:
    """The role a job description names, by its opening phrase or after a hiring verb; None
    when neither names one (a place, a work mode or a skill is not a role)."""
    for pattern in (_LEAD_ROLE, _CUED_ROLE):
        match = pattern.search(text)
        if not match:
            continue
        role = re.sub(r"(?: (?:of|and|&))+$", "", match.group(1)).strip(" .")
        vocabularies = (lx.LOCATIONS, lx.WORK_MODES, lx.EMPLOYMENT_TYPES, lx.SKILLS_ALL)
        if role and not any(lx.term_named(v, role) for v in vocabularies):
            return role
    return None


def _roles(bag: _FacetBag, payload: Payload, title: str) -> None:
    """Title facets: the project's title, sourced to every document that names it (then it is
    a role the recruiter's texts use, not only the project's name), else the role each job
    description names."""
    pid = payload["project"]["project_id"]
    bag.add("title", title, pid)
    documents = payload.get("documents", [])
    naming = [d for d in documents if title.casefold() in str(d.get("text") or "").casefold()]
    for doc in naming:
        bag.add("title", title, doc["document_id"])
    if naming:
        return
    for doc in documents:
        role = (
            named_role(str(doc.get("text") or "")) if doc.get("kind") == "job_description" else None
        )
        if role:
            bag.add("title", role, doc["document_id"])


def facets(payload: Payload) -> Payload:
    project = payload["project"]
    pid = project["project_id"]
    bag = _FacetBag()
    title = _clean(str(project.get("title") or ""))
    if title:
        _roles(bag, payload, title)
    if project.get("status"):
        bag.add("status", str(project["status"]), pid)

    titles = [(pid, title)] + [
        (v["vacancy_id"], _clean(str(v.get("title") or ""))) for v in payload.get("vacancies", [])
    ]
    for source, vacancy_title in titles[1:]:
        if vacancy_title and lx.normalise_value(vacancy_title) != lx.normalise_value(title):
            bag.add("title", vacancy_title, source)
    # Seniority is read from titles first: in prose "senior" often qualifies something else.
    for source, text in titles:
        for name, _ in lx.find_terms(lx.SENIORITY, text):
            bag.add("seniority", name, source)
    from_titles = "seniority" in bag.fields()

    sources = sources_of(payload)
    speakers = lx.speaker_labels([text for _, _, text in sources])
    for source, _kind, text in sources:
        if not text:
            continue
        for place in primary_places(text):
            bag.add("location", place, source)
        # Flattened tables glue fields together ("Job Type: Full-timePay: …"); the work terms
        # are read with the glued words apart (not skills: "JavaScript" is no "Java").
        unglued = lx.unglued(text)
        mode = job_work_mode(unglued)
        if mode and "work_mode" not in bag.fields():
            bag.add("work_mode", mode, source)
        for name, _ in lx.find_terms(lx.EMPLOYMENT_TYPES, unglued, negatable=True, prospects=False):
            if name == "internship" and "seniority" in bag.fields() and not from_titles:
                continue
            bag.add("employment_type", name, source)
        if not from_titles:
            for name, _ in lx.find_terms(lx.SENIORITY, text):
                bag.add("seniority", name, source)
        for name, _ in lx.find_terms(lx.SKILLS_ALL, text, negatable=True):
            bag.add("skill", name, source)
        salaries = lx.find_salaries(text)
        for value, _ in salaries:
            bag.add("salary", value, source)
        for value, _ in lx.find_experience(text)[:1]:
            bag.add("years_experience", value, source)
        for value, _ in lx.find_languages(text):
            bag.add("language", value, source)
        for field, value, _ in lx.find_explicit(text, speakers):
            if not (field == "salary" and salaries):  # the full line was read already
                _add_canonical(bag, field, value, source)

    reasons: Counter[str] = Counter()
    reason_sources: dict[str, set[str]] = defaultdict(set)
    for action in payload.get("actions", {}).get("with_reasons", []):
        if action.get("action") == "rejected" and action.get("reason"):
            reason = _clean(action["reason"])[:80]
            reasons[reason] += 1
            reason_sources[reason].add(action["action_id"])
    for reason, _ in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:3]:
        for source in sorted(reason_sources[reason]):
            bag.add("rejection_reason", reason, source)

    have = bag.fields()
    for attribute in payload.get("hints", {}).get("attributes", []):
        field = lx.normalise_field(attribute)
        if field in have:
            continue
        for source, _kind, text in sources_of(payload):
            value = _hinted_value(attribute, text) if text else None
            if value:
                bag.add(field, value, source)
                break
    return {"facets": bag.items()}


# ---- QA ----------------------------------------------------------------------------------------

PROJECT_QUESTIONS = {
    "location": "Where is the {title} role located?",
    "work_mode": "What work mode (remote, hybrid or on-site) does the {title} role offer?",
    "employment_type": "What type of employment is offered for the {title} role?",
    "seniority": "What seniority level is the {title} role?",
    "skill": "Which skills are required for the {title} role?",
    "salary": "What salary is offered for the {title} role?",
    "years_experience": "How many years of experience does the {title} role require?",
    "language": "Which languages must candidates for the {title} role speak?",
    "rejection_reason": "Why were candidates rejected for the {title} role?",
    "status": "What is the status of the {title} project?",
}
_GENERIC_PROJECT_QUESTION = "What is the {phrase} of the {title} role?"


def _group(facet_list: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for facet in facet_list:
        grouped[facet["field"]].append(facet)
    return dict(grouped)


def _best_source(values: list[dict[str, Any]], fallback: str) -> str:
    counts: Counter[str] = Counter()
    for facet in values:
        counts.update(facet.get("sources") or [])
    if not counts:
        return fallback
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def _evidence(texts: dict[str, tuple[str, str]], source: str, value: str) -> str:
    kind, text = texts.get(source, ("source", ""))
    if not text:
        return f"From {kind} {source}."
    kind = kind.replace("_", " ")
    probes = [value] + [w for w in re.split(r"[\s,;/()]+", value) if len(w) >= 3]
    for probe in probes:
        match = re.search(re.escape(probe), text, re.IGNORECASE)
        if match:
            return f"Stated in {kind} {source}: “{lx.sentence_at(text, match.start(), 180)}”"
    return f"Stated in {kind} {source}: “{lx.first_sentence(text, 180)}”"


def informative_sentence(text: str, values: list[str], salience: Salience, limit: int = 220) -> str:
    """The sentence of `text` naming most of the node's facet values, then the most salient."""
    wanted = [v.casefold() for v in values if len(v) >= 2]
    best, best_score = "", (-1, -1.0)
    for sentence, _ in lx.sentences(text):
        if len(sentence.split()) < 4:
            continue
        folded = sentence.casefold()
        score = (sum(1 for v in wanted if v in folded), salience.of_sentence(sentence))
        if score > best_score:
            best, best_score = sentence, score
    if not best:
        best = lx.first_sentence(text, limit)
    return best if len(best) <= limit else best[: limit - 1].rstrip() + "…"


def _fill_template(template: str, slots: dict[str, str]) -> str | None:
    names = re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", template)
    if any(name not in slots for name in names):
        return None
    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: slots[m.group(1)], template)


def qa(payload: Payload) -> Payload:
    project = payload["project"]
    pid = project["project_id"]
    title = _clean(str(project.get("title") or pid))
    grouped = _group(payload.get("facets", []))
    texts = {source: (kind, text) for source, kind, text in sources_of(payload)}
    pairs: list[dict[str, str]] = []
    asked: set[str] = set()

    def add(question: str, values: list[dict[str, Any]], rationale: str | None = None) -> None:
        if question in asked or len(pairs) >= _MAX_FACET_QA:
            return
        shown = values[:_MAX_VALUES_IN_ANSWER]
        source = _best_source(shown, pid)
        first = next((v for v in shown if source in (v.get("sources") or [])), shown[0])
        asked.add(question)
        pairs.append(
            {
                "question": question,
                "answer": ", ".join(v["value"] for v in shown),
                "rationale": rationale or _evidence(texts, source, first["value"]),
                "source": source,
            }
        )

    slots = {field: values[0]["value"] for field, values in grouped.items()}
    slots["node"] = f"the {title} project"
    for template in payload.get("hints", {}).get("qa_templates", []):
        answer_values = grouped.get(lx.normalise_field(template["answer_field"]))
        question = _fill_template(template["template"], slots)
        if answer_values and question:
            add(question, answer_values)

    for field in sorted(grouped, key=_field_rank):
        if field == "title":
            continue
        template = PROJECT_QUESTIONS.get(field, _GENERIC_PROJECT_QUESTION)
        add(template.format(title=title, phrase=_phrase(field)), grouped[field])

    counts = payload.get("actions", {}).get("counts", {})
    if len(pairs) < _MIN_QA and counts:
        summary = ", ".join(f"{counts[k]} {k}" for k in sorted(counts))
        question = f"What happened to the candidates considered for the {title} role?"
        reasons = payload.get("actions", {}).get("with_reasons", [])
        pairs.append(
            {
                "question": question,
                "answer": summary,
                "rationale": "Counted from the recruiter's actions in this project.",
                "source": reasons[0]["action_id"] if reasons else pid,
            }
        )
    return {"pairs": pairs}


# ---- summaries ---------------------------------------------------------------------------------


def _values(grouped: dict[str, list[dict[str, Any]]], field: str, limit: int = 8) -> list[str]:
    return [f["value"] for f in grouped.get(field, [])[:limit]]


def _profile_parts(grouped: dict[str, list[dict[str, Any]]]) -> list[str]:
    parts = []
    for field in ("seniority", "employment_type", "work_mode", "location", "skill", "salary"):
        values = _values(grouped, field)
        if values:
            parts.append(f"{_phrase(field)}: {', '.join(values)}")
    for field in ("years_experience", "language"):
        values = _values(grouped, field)
        if values:
            parts.append(f"{_phrase(field)}: {', '.join(values)}")
    return parts


def summary(payload: Payload) -> Payload:
    project = payload["project"]
    pid = project["project_id"]
    title = _clean(str(project.get("title") or pid))
    status = project.get("status") or "unknown"
    grouped = _group(payload.get("facets", []))

    sentences = [f"Project {pid} “{title}” (status: {status})."]
    parts = _profile_parts(grouped)
    if parts:
        sentences.append("Requirements: " + "; ".join(parts) + ".")
    known = set(FIELD_ORDER)
    extra = [f for f in sorted(grouped) if f not in known]
    hinted = {lx.normalise_field(a) for a in payload.get("hints", {}).get("attributes", [])}
    extra = sorted(extra, key=lambda f: (f not in hinted, f))
    if extra:
        details = [f"{_phrase(f)}: {', '.join(_values(grouped, f, 3))}" for f in extra[:8]]
        sentences.append("Also noted: " + "; ".join(details) + ".")
    all_values = sorted({f["value"] for f in payload.get("facets", [])})
    items, salience, _kinds = content(payload)
    documents = payload.get("documents", [])
    if len(documents) <= _DOCUMENT_LINES:
        for doc in documents:
            line = informative_sentence(str(doc.get("text") or ""), all_values, salience)
            if line:
                kind = str(doc.get("kind") or "document").replace("_", " ")
                sentences.append(f"[{doc['document_id']}] {kind}: {line.rstrip('.')}.")
    else:  # many short documents (a chat's turns): the node's most salient sentences
        for unit in salience.best(items, _KEY_POINTS):
            line = said(unit)
            sentences.append(f"[{unit.source}] {line}" + ("" if line[-1] in ".!?" else "."))
    for vacancy in payload.get("vacancies", []):
        requirements = vacancy.get("requirements", [])
        mandatory = sum(1 for r in requirements if r.get("mandatory"))
        sentences.append(
            f"[{vacancy['vacancy_id']}] vacancy “{_clean(str(vacancy.get('title') or ''))}”"
            f" (version {vacancy.get('version')}) with {len(requirements)} requirement(s),"
            f" {mandatory} mandatory."
        )
    actions = payload.get("actions", {})
    counts = actions.get("counts", {})
    if counts:
        sentences.append(
            "Candidate pipeline: " + ", ".join(f"{counts[k]} {k}" for k in sorted(counts)) + "."
        )
    reasons = _values(grouped, "rejection_reason", 3)
    if reasons:
        sentences.append("Rejected for: " + "; ".join(reasons) + ".")

    short_parts = []
    for field in ("seniority", "employment_type", "work_mode"):
        values = _values(grouped, field, 2)
        if values:
            short_parts.append("/".join(values))
    locations = _values(grouped, "location", 2)
    skills = _values(grouped, "skill", 3)
    short = f"{title} ({status})"
    if short_parts:
        short += ": " + " ".join(short_parts) + " role"
    if locations:
        short += " in " + " and ".join(locations)
    if skills:
        short += ", needs " + ", ".join(skills)
    about = salience.top_terms(items, _SHORT_TERMS)
    if about:
        short += "; about " + ", ".join(about)
    return {"summary_long": " ".join(sentences), "summary_short": short + "."}


# ---- aggregation -------------------------------------------------------------------------------

AGGREGATE_QUESTIONS = {
    "title": "Which roles does {node} usually hire for?",
    "location": "Where does {node} usually hire?",
    "work_mode": "Which work mode does {node} usually offer?",
    "employment_type": "Which types of employment does {node} usually offer?",
    "seniority": "Which seniority levels does {node} usually hire?",
    "skill": "Which skills does {node} usually look for?",
    "salary": "What salaries does {node} usually offer?",
    "years_experience": "How much experience does {node} usually require?",
    "language": "Which languages does {node} usually require?",
    "rejection_reason": "Why does {node} usually reject candidates?",
}
_GENERIC_AGGREGATE_QUESTION = "What {phrase} does {node} usually have?"
_MAX_VALUES_PER_FIELD = 15


def aggregate(payload: Payload) -> Payload:
    children = sorted(payload.get("children", []), key=lambda c: c["node_id"])
    n = len(children)
    node = payload.get("label") or payload["node_id"]
    child_word = "projects" if payload.get("child_level") == "project" else "seats"
    need = int(payload.get("min_support") or 1)

    support: dict[tuple[str, str], set[str]] = defaultdict(set)
    sources: dict[tuple[str, str], set[str]] = defaultdict(set)
    spellings: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for child in children:
        for facet in child.get("facets", []):
            field = lx.normalise_field(facet["field"])
            value = lx.canonical(field, _clean(facet["value"]))
            if not value:
                continue
            key = (field, lx.normalise_value(value))
            support[key].add(child["node_id"])
            sources[key].update(facet.get("sources") or [])
            spellings[key][value] += 1

    kept_by_field: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key in sorted(support):
        ids = sorted(support[key])
        if len(ids) < need:
            continue
        spelling = sorted(spellings[key].items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        kept_by_field[key[0]].append(
            {"field": key[0], "value": spelling, "support": ids, "sources": sorted(sources[key])}
        )
    facet_out: list[dict[str, Any]] = []
    for field in sorted(kept_by_field):
        ranked = sorted(
            kept_by_field[field], key=lambda f: (-len(f["support"]), lx.normalise_value(f["value"]))
        )
        kept_by_field[field] = ranked[:_MAX_VALUES_PER_FIELD]
        facet_out.extend(kept_by_field[field])

    pairs: list[dict[str, Any]] = []
    asked: set[str] = set()

    def add(question: str, values: list[dict[str, Any]]) -> None:
        if question in asked or len(pairs) >= MAX_PARENT_QA or not values:
            return
        shown = values[:_MAX_VALUES_IN_ANSWER]
        ids = sorted({i for v in shown for i in v["support"]})
        answer = ", ".join(f"{v['value']} ({len(v['support'])} of {n} {child_word})" for v in shown)
        asked.add(question)
        pairs.append(
            {
                "question": question,
                "answer": answer,
                "rationale": f"Aggregated from the facets of {len(ids)} of {n} {child_word}: "
                + ", ".join(ids)
                + ".",
                "source": (shown[0]["sources"] or [""])[0],
                "support": ids,
            }
        )

    slots = {field: values[0]["value"] for field, values in kept_by_field.items()}
    slots["node"] = node
    for template in payload.get("hints", {}).get("qa_templates", []):
        values = kept_by_field.get(lx.normalise_field(template["answer_field"]))
        question = _fill_template(template["template"], slots)
        if values and question:
            add(question, values)
    for field in sorted(kept_by_field, key=_field_rank):
        if field == "status":
            continue
        template = AGGREGATE_QUESTIONS.get(field, _GENERIC_AGGREGATE_QUESTION)
        add(template.format(node=node, phrase=_phrase(field)), kept_by_field[field])
    if children and len(pairs) < MAX_PARENT_QA:
        all_sources = sorted(
            {s for c in children for f in c.get("facets", []) for s in f["sources"]}
        )
        pairs.append(
            {
                "question": f"Which {child_word} does {node} have?",
                "answer": f"{n} {child_word}: "
                + "; ".join(f"{c.get('label') or c['node_id']} ({c['node_id']})" for c in children),
                "rationale": f"The {child_word} under {node} in the ownership tree.",
                "source": all_sources[0] if all_sources else "",
                "support": [c["node_id"] for c in children],
            }
        )

    if not children:
        text = f"{node} has no {child_word} yet."
        return {"facets": [], "qa": [], "summary_long": text, "summary_short": text}

    common = []
    for field in sorted(kept_by_field, key=_field_rank):
        if field == "status":
            continue
        shown = kept_by_field[field][:8]
        common.append(
            f"{_phrase(field)}: "
            + ", ".join(f"{v['value']} ({len(v['support'])}/{n})" for v in shown)
        )
    sentences = [f"{node} ({payload['node_id']}) has {n} {child_word}."]
    if common:
        sentences.append(
            f"Shared by at least {need} of {n} {child_word}: " + "; ".join(common) + "."
        )
    sentences.append(
        f"{child_word.capitalize()}: "
        + " ".join(f"[{c['node_id']}] {c.get('summary_short', '').strip()}" for c in children)
    )

    short = f"{node}: {n} {child_word}"
    leads = []
    for field, lead in (("title", "mostly"), ("location", "in"), ("work_mode", "")):
        values = [v["value"] for v in kept_by_field.get(field, [])[:2]]
        if values:
            leads.append(f"{lead} {' and '.join(values)}".strip())
    skills = [v["value"] for v in kept_by_field.get("skill", [])[:3]]
    if leads:
        short += ", " + ", ".join(leads)
    if skills:
        short += "; skills " + ", ".join(skills)
    return {
        "facets": facet_out,
        "qa": pairs,
        "summary_long": " ".join(sentences),
        "summary_short": short + ".",
    }
