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
