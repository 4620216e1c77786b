"""The source data model: what users ingest, one table per file.

Every table has a stable string id. Ingest adds `content_hash` (sha1 of the row's own columns) and
`ingested_at`; `updated_at` is taken from the file when present, else set when the hash changes.
Those two columns are what change detection (the `source_changes` sensor) reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAYERS = ("active", "archive")
LANGUAGES = ("en", "ru")
PROJECT_STATUSES = ("open", "paused", "closed")
DOCUMENT_KINDS = ("job_description", "intake_notes", "recruiter_notes", "candidate_feedback")
ACTION_KINDS = ("viewed", "saved", "messaged", "rejected", "advanced")


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # DuckDB type
    required: bool = True
    choices: tuple[str, ...] = ()
    non_empty_text: bool = False


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


def _ts(name: str, required: bool = False) -> Column:
    return Column(name, "TIMESTAMP", required=required)


TABLES: tuple[Table, ...] = (
    Table(
        "contracts",
        "contract_id",
        (Column("contract_id", "VARCHAR"), Column("name", "VARCHAR"), _ts("updated_at")),
        description="A customer organisation's account: the root of an ownership tree.",
    ),
    Table(
        "seats",
        "seat_id",
        (
            Column("seat_id", "VARCHAR"),
            Column("contract_id", "VARCHAR"),
            Column("recruiter_name", "VARCHAR"),
            _ts("updated_at"),
        ),
        (ForeignKey("contract_id", "contracts"),),
        "One recruiter's licence, inside exactly one contract.",
    ),
    Table(
        "projects",
        "project_id",
        (
            Column("project_id", "VARCHAR"),
            Column("seat_id", "VARCHAR"),
            Column("title", "VARCHAR", non_empty_text=True),
            Column("status", "VARCHAR", choices=PROJECT_STATUSES),
            _ts("created_at"),
            _ts("updated_at"),
        ),
        (ForeignKey("seat_id", "seats"),),
        "A hiring project (the leaf memory node), inside exactly one seat.",
    ),
    Table(
        "project_documents",
        "document_id",
        (
            Column("document_id", "VARCHAR"),
            Column("project_id", "VARCHAR"),
            Column("kind", "VARCHAR", choices=DOCUMENT_KINDS),
            Column("text", "VARCHAR", non_empty_text=True),
            _ts("created_at"),
            _ts("updated_at"),
        ),
        (ForeignKey("project_id", "projects"),),
        "Free text under a project: job description, intake notes, recruiter notes, feedback.",
    ),
    Table(
        "resumes",
        "resume_id",
        (
            Column("resume_id", "VARCHAR"),
            Column("headline", "VARCHAR", required=False),
            Column("text", "VARCHAR", non_empty_text=True),
            Column("language", "VARCHAR", choices=LANGUAGES),
            Column("layer", "VARCHAR", choices=LAYERS),
            _ts("updated_at"),
        ),
        description="Candidate resumes. The archive layer never enters normal candidate pools.",
    ),
    Table(
        "recruiter_actions",
        "action_id",
        (
            Column("action_id", "VARCHAR"),
            Column("project_id", "VARCHAR"),
            Column("resume_id", "VARCHAR"),
            Column("action", "VARCHAR", choices=ACTION_KINDS),
            Column("reason", "VARCHAR", required=False),
            _ts("created_at"),
        ),
        (ForeignKey("project_id", "projects"), ForeignKey("resume_id", "resumes")),
        "What a recruiter did with a candidate in a project; `reason` explains a rejection.",
    ),
    Table(
        "vacancies",
        "vacancy_id",
        (
            Column("vacancy_id", "VARCHAR"),
            Column("version", "INTEGER"),
            Column("project_id", "VARCHAR"),
            Column("title", "VARCHAR", non_empty_text=True),
            Column("text", "VARCHAR", non_empty_text=True),
            _ts("updated_at"),
        ),
        (ForeignKey("project_id", "projects"),),
        "An open position of a project; `version` grows whenever its text changes.",
    ),
    Table(
        "vacancy_requirements",
        "requirement_id",
        (
            Column("requirement_id", "VARCHAR"),
            Column("vacancy_id", "VARCHAR"),
            Column("text", "VARCHAR", non_empty_text=True),
            Column("mandatory", "BOOLEAN"),
        ),
        (ForeignKey("vacancy_id", "vacancies"),),
        "The requirements of a vacancy, each flagged mandatory or not.",
    ),
)

TABLES_BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}

# Parents before children: the order ingest loads and validates in.
LOAD_ORDER: tuple[str, ...] = tuple(t.name for t in TABLES)
