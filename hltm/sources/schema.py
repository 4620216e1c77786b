"""The source data model: what users ingest, one table per file.

Every table has a stable string id. Ingest adds `content_hash` (sha1 of the row's own columns),
`ingested_at` and `change_seq` (the number of the load that last changed the row, see
`hltm.sources.ingest`); `updated_at` is taken from the file when present, else set when the hash
changes. `content_hash` and `change_seq` are what change detection (the `source_changes` sensor)
reads.

Ids are identifiers, compared byte for byte everywhere (node ids, partition keys, Chroma
collections, scope filters), so they have one canonical form (`id_problem`); ingest quarantines
any id outside it instead of letting two spellings of one id into the tree.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

LAYERS = ("active", "archive")
LANGUAGES = ("en", "ru")
PROJECT_STATUSES = ("open", "paused", "closed")
DOCUMENT_KINDS = ("job_description", "intake_notes", "recruiter_notes", "candidate_feedback")
ACTION_KINDS = ("viewed", "saved", "messaged", "rejected", "advanced")

# Size bounds, checked at ingest before anything is stored (a longer value is quarantined, never
# truncated: a cut resume or posting would be judged and quoted as if it were the whole text).
MAX_ID_CHARS = 200
MAX_SHORT_TEXT_CHARS = 2_000  # names, titles, headlines, reasons, requirement lines
MAX_DOCUMENT_CHARS = 200_000  # about 50k tokens: far above any real resume or job posting

# Printable ASCII with no space at either end, and no `RESERVED_IN_IDS`: a sufficient condition
# for the canonical form, cheap enough to test on every id column-wise (anything else goes
# through `id_problem`).
CANONICAL_ASCII_ID = r"^[!-~](?:[ -~]*[!-~])?$"
# Dagster refuses a partition key holding three periods in a row, and every project, seat,
# contract and vacancy is a partition key. Every other character a store's names refuse is
# mapped to a name it accepts (`hltm.vectors.collection_name`).
RESERVED_IN_IDS = "..."


def id_problem(value: str) -> str | None:
    """Why `value` is not a canonical id, or None when it is.

    Canonical: 1 to `MAX_ID_CHARS` characters in Unicode NFC form, every character printable
    (no control, format or invisible characters; the only space allowed is an inner ASCII
    space), no whitespace at either end, and no `RESERVED_IN_IDS`."""
    if not value:
        return "empty id"
    if len(value) > MAX_ID_CHARS:
        return f"id longer than {MAX_ID_CHARS} characters"
    if "\x00" in value:
        return "NUL character in id"
    if value != value.strip():
        return "leading or trailing whitespace in id"
    bad = next((ch for ch in value if ch != " " and not ch.isprintable()), None)
    if bad is not None:
        return f"control or invisible character U+{ord(bad):04X} in id"
    if unicodedata.normalize("NFC", value) != value:
        return "id not in Unicode NFC form"
    if RESERVED_IN_IDS in value:
        return (
            f"{RESERVED_IN_IDS!r} in id (three periods in a row: the Dagster partition keys that"
            " track each node refuse it; rename the id)"
        )
    return None


@dataclass(frozen=True)
class Column:
    """One column of a source table.

    `aliases`: other header names a user's export commonly has for it (matched after
    lower-casing and turning spaces and dashes into underscores); `default`: the value when the
    whole column is absent from a file; `detected_from`: the column whose text the value is
    detected from when the whole column is absent (`hltm.sources.language`); `is_id`: the table's
    key or a reference to another's."""

    name: str
    sql_type: str  # DuckDB type
    required: bool = True
    choices: tuple[str, ...] = ()
    non_empty_text: bool = False
    aliases: tuple[str, ...] = ()
    max_chars: int = MAX_SHORT_TEXT_CHARS
    default: str | None = None
    detected_from: str | None = None
    is_id: bool = False


@dataclass(frozen=True)
class ForeignKey:
    column: str
    table: str


@dataclass(frozen=True)
class Table:
    name: str
    key: str
    columns: tuple[Column, ...]
    foreign_keys: tuple[ForeignKey, ...] = field(default_factory=tuple)
    description: str = ""

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def _ts(name: str, *aliases: str) -> Column:
    return Column(name, "TIMESTAMP", required=False, aliases=aliases)


def _id(name: str, *aliases: str) -> Column:
    return Column(name, "VARCHAR", aliases=aliases, max_chars=MAX_ID_CHARS, is_id=True)


def _document(name: str, *aliases: str) -> Column:
    return Column(
        name, "VARCHAR", non_empty_text=True, aliases=aliases, max_chars=MAX_DOCUMENT_CHARS
    )


TABLES: tuple[Table, ...] = (
    Table(
        "contracts",
        "contract_id",
        (
            _id("contract_id", "id", "account_id", "company_id", "organization_id"),
            Column("name", "VARCHAR", aliases=("company", "company_name", "organization")),
            _ts("updated_at"),
        ),
        description="A customer organisation's account: the root of an ownership tree.",
    ),
    Table(
        "seats",
        "seat_id",
        (
            _id("seat_id", "id", "recruiter_id", "user_id"),
            _id("contract_id", "account_id", "company_id", "organization_id"),
            Column("recruiter_name", "VARCHAR", aliases=("recruiter", "name", "user_name")),
            _ts("updated_at"),
        ),
        (ForeignKey("contract_id", "contracts"),),
        "One recruiter's licence, inside exactly one contract.",
    ),
    Table(
        "projects",
        "project_id",
        (
            _id("project_id", "id"),
            _id("seat_id", "recruiter_id", "user_id"),
            Column("title", "VARCHAR", non_empty_text=True, aliases=("name", "project_name")),
            Column("status", "VARCHAR", choices=PROJECT_STATUSES, aliases=("state",)),
            _ts("created_at", "created"),
            _ts("updated_at", "updated", "modified_at"),
        ),
        (ForeignKey("seat_id", "seats"),),
        "A hiring project (the leaf memory node), inside exactly one seat.",
    ),
    Table(
        "project_documents",
        "document_id",
        (
            _id("document_id", "id", "doc_id"),
            _id("project_id"),
            Column("kind", "VARCHAR", choices=DOCUMENT_KINDS, aliases=("type", "document_type")),
            _document("text", "body", "content", "description"),
            _ts("created_at", "created"),
            _ts("updated_at", "updated", "modified_at"),
        ),
        (ForeignKey("project_id", "projects"),),
        "Free text under a project: job description, intake notes, recruiter notes, feedback.",
    ),
    Table(
        "resumes",
        "resume_id",
        (
            _id("resume_id", "id", "candidate_id", "cv_id"),
            Column("headline", "VARCHAR", required=False, aliases=("title", "position")),
            _document("text", "resume_text", "resume_str", "resume", "cv_text", "body", "content"),
            Column(
                "language",
                "VARCHAR",
                choices=LANGUAGES,
                aliases=("lang", "locale"),
                detected_from="text",
            ),
            Column("layer", "VARCHAR", choices=LAYERS, default="active"),
            _ts("updated_at", "updated", "modified_at"),
        ),
        description="Candidate resumes. The archive layer never enters normal candidate pools.",
    ),
    Table(
        "recruiter_actions",
        "action_id",
        (
            _id("action_id", "id", "event_id"),
            _id("project_id"),
            _id("resume_id", "candidate_id", "cv_id"),
            Column("action", "VARCHAR", choices=ACTION_KINDS, aliases=("type", "event")),
            Column("reason", "VARCHAR", required=False, aliases=("comment", "note")),
            _ts("created_at", "created", "timestamp"),
        ),
        (ForeignKey("project_id", "projects"), ForeignKey("resume_id", "resumes")),
        "What a recruiter did with a candidate in a project; `reason` explains a rejection.",
    ),
    Table(
        "vacancies",
        "vacancy_id",
        (
            _id("vacancy_id", "id", "job_id", "posting_id"),
            Column("version", "INTEGER", aliases=("revision",)),
            _id("project_id"),
            Column("title", "VARCHAR", non_empty_text=True, aliases=("name", "job_title")),
            _document("text", "description", "body", "content"),
            _ts("updated_at", "updated", "modified_at"),
        ),
        (ForeignKey("project_id", "projects"),),
        "An open position of a project; `version` grows whenever its text changes.",
    ),
    Table(
        "vacancy_requirements",
        "requirement_id",
        (
            _id("requirement_id", "id"),
            _id("vacancy_id", "job_id", "posting_id"),
            Column("text", "VARCHAR", non_empty_text=True, aliases=("requirement",)),
            Column("mandatory", "BOOLEAN", aliases=("required", "is_mandatory")),
        ),
        (ForeignKey("vacancy_id", "vacancies"),),
        "The requirements of a vacancy, each flagged mandatory or not.",
    ),
)

TABLES_BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}

# Parents before children: the order ingest loads and validates in.
LOAD_ORDER: tuple[str, ...] = tuple(t.name for t in TABLES)
