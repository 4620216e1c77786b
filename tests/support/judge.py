"""Small hand-made vacancy and resumes shared by the judge tests (no generator, no embeddings)."""

from __future__ import annotations

from hltm.judge.data import Requirement, Resume, Vacancy

VACANCY = Vacancy(
    "vac-1",
    1,
    "Senior Python Developer",
    "Backend services in Python.",
    (
        Requirement("q1", "5+ years of backend development", True),
        Requirement("q2", "Strong hands-on experience with Python", True),
        Requirement("q3", "Production experience with PostgreSQL", True),
        Requirement("q4", "Ready to sign an NDA", True),
    ),
)


def make_resume(i: int, years: int = 6, role: str = "Backend Engineer") -> Resume:
    text = (
        f"Person {i}\n\nExperience\nSenior {role} — Company {i:02d}\n{2025 - years}-01 – present\n"
        f"• Built Python services over PostgreSQL for team {i}.\n\nSkills: Python, PostgreSQL\n"
    )
    return Resume(f"r{i:02d}", text, f"hash-{i}-{years}", None, "en", "active", "2025-06-01T00:00")


POOL = [make_resume(i) for i in range(12)]


def calibrate_every_vacancy(instance, resources, sources_db):  # type: ignore[no-untyped-def]
    """One run of `calibrate_vacancies` over every vacancy, as `hltm refresh` and the demo run it
    (their partitions added first)."""
    import dagster as dg

    from hltm.judge.data import vacancy_ids
    from hltm_dagster.defs import calibration
    from hltm_dagster.defs.sources.assets import VACANCIES
    from hltm_dagster.instance import partition_range_tags

    ids = sorted(vacancy_ids(sources_db))
    instance.add_dynamic_partitions(VACANCIES.name, ids)
    job = dg.Definitions.merge(calibration.defs, dg.Definitions(resources=resources))
    return job.resolve_job_def("calibrate_vacancies").execute_in_process(
        instance=instance, tags=partition_range_tags(ids[0], ids[-1])
    )
