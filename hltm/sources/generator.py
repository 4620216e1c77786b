"""The deterministic sample world: contracts → seats → projects with documents, resumes, recruiter
actions, vacancies with requirements, and the ground truth that grades everything built on them.

Plain Python, no Dagster. Every random choice comes from `random.Random` streams seeded by strings
derived from the seed and a stable entity id, so the same seed and sizes always give byte-identical
files, and an entity's content doesn't shift when unrelated sizes change. Timestamps are the fixed
base date 2026-01-05 minus deterministic offsets (never `now()`).

What the world contains, on purpose:

* Ownership with habits: a contract has organisation-wide tendencies (industry, region, default
  work mode and employment type, core role families); its seats lean towards those and have stable
  preferences of their own; projects follow their seat with noise (~80% per attribute). Some
  projects under different owners have near-identical titles (for access-leakage tests).
* Free-text project documents (4 kinds) stating each fact in several phrasings, some in Russian
  for Russia-based contracts; no machine markers.
* Resumes in English and Russian with a summary, the last positions with dates and concrete
  bullets, skills and education; an archive layer (~15%) that normal pools never see.
* Traps: keyword twins (wrong role, same keywords), headline/role mismatches in both directions,
  formal requirements ("ready to sign an NDA") in vacancies, some flagged mandatory.
* For every vacancy: true fits (some in the archive, some written with rare exact terms and little
  shared wording), borderlines, traps and many misses; labels come from `label_pair`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from hltm.sources.schema import TABLES

BASE_DATE = datetime(2026, 1, 5)
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class WorldSize:
    contracts: int = 3
    seats_per_contract: int = 4
    projects_per_seat: int = 5
    resumes: int = 400  # ~85% active layer, ~15% archive
    vacancies: int = 24  # spread over projects; each belongs to a project


SIZES: dict[str, WorldSize] = {
    "demo": WorldSize(),
    "bench": WorldSize(
        contracts=10, seats_per_contract=10, projects_per_seat=10, resumes=1500, vacancies=40
    ),
}

# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------

LEVELS = ("junior", "middle", "senior", "lead")
LEVEL_INDEX = {lvl: i for i, lvl in enumerate(LEVELS)}
LEVEL_MONTHS = {"junior": (12, 30), "middle": (36, 66), "senior": (72, 114), "lead": (120, 180)}
YEARS_REQUIRED = {"junior": 1, "middle": 3, "senior": 5, "lead": 8}
WORK_MODES = ("remote", "hybrid", "onsite")
EMPLOYMENT_TYPES = ("full-time", "contract", "part-time")
LABELS = ("fit", "borderline", "miss")
TRAPS = ("keyword_twin", "headline_mismatch")

# canonical city → (region, Russian name, English aliases used in free text)
CITIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "Moscow": ("russia", "Москва", ()),
    "Saint Petersburg": ("russia", "Санкт-Петербург", ("St. Petersburg",)),
    "Kazan": ("russia", "Казань", ()),
    "Novosibirsk": ("russia", "Новосибирск", ()),
    "Yekaterinburg": ("russia", "Екатеринбург", ()),
    "Nizhny Novgorod": ("russia", "Нижний Новгород", ()),
    "Berlin": ("europe", "Берлин", ()),
    "Munich": ("europe", "Мюнхен", ()),
    "London": ("europe", "Лондон", ()),
    "Amsterdam": ("europe", "Амстердам", ()),
    "Warsaw": ("europe", "Варшава", ()),
    "Krakow": ("europe", "Краков", ("Kraków",)),
    "Prague": ("europe", "Прага", ()),
    "Lisbon": ("europe", "Лиссабон", ()),
    "Barcelona": ("europe", "Барселона", ()),
    "Dublin": ("europe", "Дублин", ()),
    "Stockholm": ("europe", "Стокгольм", ()),
    "Remote-EU": ("europe", "удалённо (ЕС)", ("Remote (EU)",)),
    "San Francisco Bay Area": ("north_america", "Сан-Франциско", ("SF Bay Area", "the Bay Area")),
    "New York": ("north_america", "Нью-Йорк", ("NYC", "New York City")),
    "Seattle": ("north_america", "Сиэтл", ()),
    "Austin": ("north_america", "Остин", ()),
    "Toronto": ("north_america", "Торонто", ()),
    "Remote-US": ("north_america", "удалённо (США)", ("Remote (US)",)),
    "Belgrade": ("cis", "Белград", ()),
    "Tbilisi": ("cis", "Тбилиси", ()),
    "Yerevan": ("cis", "Ереван", ()),
    "Almaty": ("cis", "Алматы", ()),
    "Dubai": ("cis", "Дубай", ()),
    "Limassol": ("cis", "Лимасол", ()),
}
CITY_NAMES = tuple(CITIES)
REGIONS = ("russia", "europe", "north_america", "cis")
REGION_CITIES = {r: tuple(c for c, v in CITIES.items() if v[0] == r) for r in REGIONS}
PHYSICAL_CITIES = tuple(c for c in CITY_NAMES if not c.startswith("Remote"))

INDUSTRIES: dict[str, tuple[str, str]] = {
    "fintech": ("fintech", "финтех"),
    "e-commerce": ("e-commerce", "электронная коммерция"),
    "healthcare": ("digital health", "цифровая медицина"),
    "gaming": ("game development", "геймдев"),
    "logistics": ("logistics", "логистика"),
    "telecom": ("telecom", "телеком"),
    "edtech": ("online education", "онлайн-образование"),
    "cybersecurity": ("cybersecurity", "информационная безопасность"),
    "media": ("media and streaming", "медиа и стриминг"),
    "travel": ("travel tech", "тревел-tech"),
}
INDUSTRY_KEYS = tuple(INDUSTRIES)

CONTRACT_NAMES = {
    "russia": (
        "Volga Digital",
        "Neva Fintech",
        "Ural Logistics Group",
        "Sibirix",
        "Kama Systems",
        "Baltica Retail Tech",
        "Oka Telecom",
        "Severstal Soft",
    ),
    "europe": (
        "Northwind Payments",
        "Helix Health",
        "Kestrel Commerce",
        "Bluefin Logistics",
        "Orbital Games",
        "Lumen Learning",
        "Aster Security",
        "Vireo Media",
        "Fjord Travel",
    ),
    "north_america": (
        "Cascade Capital",
        "Redwood Health",
        "Summit Commerce",
        "Pioneer Freight",
        "Atlas Streaming",
        "Beacon Cyber",
        "Maple Learning",
    ),
    "cis": ("Caspian Tech", "Ararat Labs", "Steppe Payments", "Kura Software"),
}

TEAMS = (
    ("Payments", "Платежи"),
    ("Checkout", "Чекаут"),
    ("Search", "Поиск"),
    ("Risk", "Риски"),
    ("Platform", "Платформа"),
    ("Growth", "Рост"),
    ("Data Platform", "Дата-платформа"),
    ("Core Banking", "Кор-банкинг"),
    ("Billing", "Биллинг"),
    ("Identity", "Идентификация"),
    ("Recommendations", "Рекомендации"),
    ("Logistics", "Логистика"),
    ("Mobile App", "Мобильное приложение"),
    ("Marketplace", "Маркетплейс"),
    ("Analytics", "Аналитика"),
)

# ---- people ----
EN_FIRST = (
    "James",
    "Emma",
    "Oliver",
    "Sophia",
    "Lucas",
    "Mia",
    "Noah",
    "Amelia",
    "Ethan",
    "Isla",
    "Daniel",
    "Hannah",
    "Mateo",
    "Chloe",
    "Arjun",
    "Priya",
    "Tomasz",
    "Agnieszka",
    "Jonas",
    "Lena",
    "Pierre",
    "Camille",
    "Diego",
    "Lucia",
    "Kenji",
    "Aiko",
    "Omar",
    "Leila",
    "Sven",
    "Ingrid",
    "Marco",
    "Giulia",
    "Dmitry",
    "Anna",
    "Alexei",
    "Maria",
)
EN_LAST = (
    "Smith",
    "Johnson",
    "Brown",
    "Taylor",
    "Wilson",
    "Müller",
    "Schmidt",
    "Kowalski",
    "Nowak",
    "Dubois",
    "Martin",
    "Garcia",
    "Fernández",
    "Rossi",
    "Bianchi",
    "Tanaka",
    "Sato",
    "Khan",
    "Patel",
    "Sharma",
    "Andersson",
    "Johansson",
    "Novak",
    "Horvat",
    "Petrov",
    "Ivanova",
    "O'Brien",
    "Murphy",
    "de Vries",
    "Jansen",
    "Silva",
    "Costa",
)
RU_FIRST_M = (
    "Алексей",
    "Дмитрий",
    "Иван",
    "Сергей",
    "Андрей",
    "Михаил",
    "Никита",
    "Артём",
    "Павел",
    "Егор",
    "Кирилл",
    "Максим",
    "Роман",
    "Олег",
    "Владимир",
)
RU_FIRST_F = (
    "Анна",
    "Мария",
    "Елена",
    "Ольга",
    "Татьяна",
    "Наталья",
    "Юлия",
    "Екатерина",
    "Дарья",
    "Ксения",
    "Алина",
    "Виктория",
)
RU_LAST = (
    "Иванов",
    "Смирнов",
    "Кузнецов",
    "Попов",
    "Соколов",
    "Лебедев",
    "Козлов",
    "Новиков",
    "Морозов",
    "Волков",
    "Соловьёв",
    "Васильев",
    "Зайцев",
    "Павлов",
    "Семёнов",
    "Голубев",
    "Виноградов",
    "Богданов",
    "Воробьёв",
    "Фёдоров",
    "Михайлов",
    "Беляев",
    "Тарасов",
    "Белов",
)

EMPLOYERS_EN = (
    "Northstar Bank",
    "Quantix",
    "Brightcart",
    "Parcelly",
    "MedLoop",
    "Pixelforge Games",
    "Telora",
    "Learnwise",
    "Shieldly",
    "StreamHive",
    "Tripster",
    "Finlytics",
    "Cargonaut",
    "HealthBridge",
    "Shopwave",
    "Nimbus Cloud",
    "Datavane",
    "Openledger",
    "Ridewell",
    "Kitefin",
    "Greengrid Energy",
    "Mosaic Insurance",
    "Trellis HR",
    "Voyantis",
)
EMPLOYERS_RU = (
    "ООО «СеверСофт»",
    "Альфа-Логистик",
    "ТехноПрайм",
    "ФинТехЛаб",
    "Ромашка Маркет",
    "Медиаплатформа «Волна»",
    "Телесистемы",
    "СкайТрэвел",
    "ИнфоЗащита",
    "Учи.Онлайн",
    "Банк «Прогресс»",
    "Маркетплейс «Полка»",
    "ГеоДоставка",
    "Цифровые решения",
    "Ритейл Групп",
    "Облачные системы",
)
UNIVERSITIES_EN = (
    ("BSc in Computer Science", "Technical University of Munich"),
    ("MSc in Software Engineering", "University of Warsaw"),
    ("BSc in Mathematics", "University of Amsterdam"),
    ("MSc in Computer Science", "ETH Zurich"),
    ("BEng in Electronics", "Imperial College London"),
    ("BSc in Information Systems", "University of Texas at Austin"),
    ("MSc in Data Science", "KTH Royal Institute of Technology"),
    ("BSc in Computer Engineering", "Czech Technical University in Prague"),
    ("MSc in Applied Mathematics", "Lomonosov Moscow State University"),
    ("BA in Economics", "University College Dublin"),
)
UNIVERSITIES_RU = (
    ("МГТУ им. Н. Э. Баумана", "информатика и вычислительная техника"),
    ("МФТИ", "прикладная математика и физика"),
    ("НИУ ВШЭ", "программная инженерия"),
    ("Университет ИТМО", "информационные системы"),
    ("СПбГУ", "математическое обеспечение"),
    ("Казанский федеральный университет", "прикладная информатика"),
    ("НГУ", "математика и компьютерные науки"),
    ("УрФУ", "бизнес-информатика"),
    ("МИФИ", "информационная безопасность"),
)

# ---- skills: canonical name → kind (templates ask for kinds) ----
SKILL_KIND: dict[str, str] = {}
for _kind, _names in {
    "lang": "Go Java C#/.NET Python C++ Kotlin Node.js PHP Scala TypeScript JavaScript Swift R "
    "Dart",
    "sql": "SQL",
    "store": "PostgreSQL MySQL Redis MongoDB ClickHouse Elasticsearch Oracle Snowflake BigQuery",
    "queue": "Kafka RabbitMQ",
    "orch": "Kubernetes",
    "container": "Docker",
    "cloud": "AWS GCP Azure",
    "iac": "Terraform Ansible Helm",
    "ci": "GitLab_CI ArgoCD",
    "mon": "Prometheus Grafana",
    "os": "Linux",
    "rpc": "gRPC GraphQL",
    "flow": "Airflow Kubeflow",
    "mltool": "MLflow",
    "web": "React Vue.js Angular Next.js Redux Webpack",
    "bfw": "Spring_Boot Django FastAPI",
    "mfw": "SwiftUI Jetpack_Compose Flutter React_Native",
    "platform": "iOS Android",
    "baas": "Firebase",
    "mlfw": "PyTorch TensorFlow scikit-learn CatBoost Pandas",
    "bigdata": "Apache_Spark Flink dbt",
    "bi": "Tableau Power_BI Looker Excel Amplitude",
    "uitest": "Selenium Playwright Cypress",
    "unittest": "pytest JUnit Jest",
    "apitest": "Postman",
    "loadtest": "JMeter",
    "tcm": "TestRail",
    "doc": "Storybook",
    "pmtool": "Jira Confluence Figma MS_Project",
    "abtest": "A/B_testing",
    "stats": "Statistics Time_series",
    "mlarea": "NLP Computer_vision",
    "agile": "Scrum Kanban",
    "cert": "PMP",
    "arch": "TOGAF ArchiMate",
    "biz": "Unit_economics Product_discovery",
}.items():
    for _name in _names.split():
        SKILL_KIND[_name.replace("_", " ")] = _kind
KIND_GROUPS = {
    "infra": {"queue", "orch", "container", "cloud", "iac", "ci", "mon", "os", "rpc", "flow"},
    "store": {"store"},
    "any": set(SKILL_KIND.values()),
}
ALL_SKILLS = tuple(SKILL_KIND)

FORMAL_REQUIREMENTS = {
    "en": (
        "Ready to sign an NDA",
        "Ready for an interview",
        "Ready to sign an NDA before the interview",
    ),
    "ru": ("Готов подписать NDA", "Готовность пройти собеседование", "Готовность подписать NDA"),
}


def _f(**kw: Any) -> dict[str, Any]:
    return kw


# Role families. `bullets_*` use {kind} slots filled from the resume's own skills (so a resume never
# mentions a skill it doesn't list) and number slots filled per bullet.
FAMILIES: dict[str, dict[str, Any]] = {
    "backend_engineer": _f(
        en=(
            "Backend Engineer",
            "Backend Developer",
            "{stack} Developer",
            "Software Engineer (Backend)",
        ),
        ru=(
            "Backend-разработчик",
            "Бэкенд-разработчик",
            "{stack}-разработчик",
            "Программист серверной части",
        ),
        alt=("Software Engineer", "Platform Developer", "Engineer II", "Программист"),
        name_en="backend engineer",
        name_ru="backend-разработчик",
        primary=("Go", "Java", "C#/.NET", "Python", "C++", "Kotlin", "Node.js", "PHP"),
        must=("PostgreSQL", "Kafka", "Redis", "Kubernetes", "ClickHouse", "gRPC"),
        pool=("MySQL", "MongoDB", "RabbitMQ", "Docker", "Elasticsearch", "Linux", "Prometheus"),
        rare=("FIX protocol", "ISO 20022", "Tarantool", "Temporal.io", "Protobuf", "CQRS"),
        role_en="backend development",
        role_ru="backend-разработки",
        focus_en="high-load backend services and APIs",
        focus_ru="разработка высоконагруженных backend-сервисов и API",
        activity_en="code reviews and backend API design",
        activity_ru="код-ревью и проектировании backend API",
        resp_en=(
            "Design and build services that handle thousands of requests per second",
            "Own the data model and the performance of our main database",
            "Break the legacy monolith into well-defined services",
            "Take part in on-call and postmortems",
        ),
        resp_ru=(
            "Проектировать и разрабатывать сервисы под высокую нагрузку",
            "Отвечать за модель данных и производительность основной БД",
            "Выносить функциональность из легаси-монолита в отдельные сервисы",
            "Участвовать в дежурствах и разборе инцидентов",
        ),
        bullets_en=(
            "Designed and built a payment-routing service in {lang} handling {rps} requests per "
            "second at p99 under {ms} ms.",
            "Moved order processing from synchronous calls to {queue}, cutting checkout latency "
            "by {pct}%.",
            "Owned the {store} schema for a {vol} dataset; introduced partitioning and read "
            "replicas.",
            "Split a monolith into {svc} services written in {lang}; set up contract tests and "
            "canary releases.",
            "Mentored {n} engineers and ran code reviews for the team.",
            "Reduced infrastructure cost by {pct}% by rewriting hot paths in {lang} and caching "
            "in {store}.",
            "Built public APIs over {rpc} used by {users} monthly active users.",
            "Packaged services with {container} and ran them on {orch} with autoscaling.",
        ),
        bullets_ru=(
            "Спроектировал и разработал сервис маршрутизации платежей на {lang}: {rps} запросов в "
            "секунду, p99 меньше {ms} мс.",
            "Перевёл обработку заказов на {queue}, время оформления заказа сократилось на {pct}%.",
            "Отвечал за схему {store} объёмом {vol}, внедрил партиционирование и реплики на "
            "чтение.",
            "Распилил монолит на {svc} сервисов на {lang}, настроил контрактные тесты и "
            "канареечные релизы.",
            "Менторил {n} разработчиков, проводил код-ревью в команде.",
            "Снизил затраты на инфраструктуру на {pct}%: переписал горячие участки на {lang}, "
            "добавил кэш в {store}.",
            "Разработал публичное API на {rpc} для {users} активных пользователей в месяц.",
            "Упаковал сервисы в {container} и запустил их в {orch} с автомасштабированием.",
        ),
        twin="qa_engineer",
        levels=LEVELS,
    ),
    "frontend_engineer": _f(
        en=("Frontend Engineer", "Frontend Developer", "{stack} Developer", "UI Engineer"),
        ru=(
            "Frontend-разработчик",
            "Фронтенд-разработчик",
            "{stack}-разработчик",
            "Веб-разработчик",
        ),
        alt=("Web Engineer", "UI Developer", "Engineer II", "Веб-программист"),
        name_en="frontend engineer",
        name_ru="frontend-разработчик",
        primary=("React", "Vue.js", "Angular"),
        must=("TypeScript", "Next.js", "GraphQL", "Redux", "Jest"),
        pool=("JavaScript", "Webpack", "Storybook", "Cypress", "Figma"),
        rare=("WebRTC", "WebGL", "Module Federation", "Three.js", "Web Workers"),
        role_en="frontend development",
        role_ru="frontend-разработки",
        focus_en="fast, accessible web interfaces",
        focus_ru="разработка быстрых и доступных веб-интерфейсов",
        activity_en="UI architecture discussions and design reviews",
        activity_ru="обсуждениях архитектуры интерфейсов и дизайн-ревью",
        resp_en=(
            "Build customer-facing web interfaces used by millions of people",
            "Grow our design system together with designers",
            "Care about performance, accessibility and test coverage",
            "Work closely with backend engineers on API contracts",
        ),
        resp_ru=(
            "Разрабатывать клиентские веб-интерфейсы для миллионов пользователей",
            "Развивать дизайн-систему вместе с дизайнерами",
            "Следить за производительностью, доступностью и покрытием тестами",
            "Согласовывать контракты API с backend-командой",
        ),
        bullets_en=(
            "Rebuilt the customer dashboard in {web} and {lang}, improving Largest Contentful "
            "Paint by {pct}%.",
            "Created a design system of {svc} components documented in {doc}, adopted by {n} "
            "product teams.",
            "Migrated a legacy single-page app to {web}; bundle size went down by {pct}%.",
            "Implemented server-side rendering for pages with {users} visits a month using {web}.",
            "Covered critical user flows with {uitest} tests, raising coverage to {pct}%.",
            "Worked with designers on WCAG 2.1 AA accessibility for checkout and onboarding.",
            "Connected the storefront to {rpc} and cut the number of requests per page by {pct}%.",
            "Wrote unit tests with {unittest} for shared UI packages used by {n} teams.",
        ),
        bullets_ru=(
            "Переписал личный кабинет на {web} и {lang}, LCP улучшился на {pct}%.",
            "Создал дизайн-систему из {svc} компонентов с документацией в {doc}, её используют "
            "{n} команд.",
            "Перевёл легаси-SPA на {web}, размер бандла уменьшился на {pct}%.",
            "Внедрил серверный рендеринг на {web} для страниц с {users} визитов в месяц.",
            "Покрыл ключевые пользовательские сценарии тестами на {uitest}, покрытие выросло до "
            "{pct}%.",
            "Вместе с дизайнерами довёл оформление заказа до уровня доступности WCAG 2.1 AA.",
            "Подключил витрину к {rpc} и сократил число запросов на страницу на {pct}%.",
            "Писал юнит-тесты на {unittest} для общих UI-пакетов, которыми пользуются {n} команд.",
        ),
        twin="mobile_developer",
        levels=LEVELS,
    ),
    "data_engineer": _f(
        en=("Data Engineer", "Big Data Engineer", "ETL Developer", "Data Platform Engineer"),
        ru=("Data Engineer", "Инженер данных", "Разработчик ETL", "Инженер дата-платформы"),
        alt=("Pipeline Engineer", "Software Engineer (Data)", "Инженер-программист"),
        name_en="data engineer",
        name_ru="инженер данных",
        primary=("Python", "Scala", "SQL"),
        must=("Apache Spark", "Airflow", "Kafka", "ClickHouse", "dbt", "PostgreSQL"),
        pool=("Snowflake", "BigQuery", "Flink", "Docker", "Kubernetes", "SQL"),
        rare=("Debezium", "Apache Iceberg", "Trino", "Greenplum", "Vertica", "Delta Lake"),
        role_en="data engineering",
        role_ru="работы инженером данных",
        focus_en="reliable batch and streaming data pipelines",
        focus_ru="надёжные batch- и стриминговые пайплайны данных",
        activity_en="data platform design and pipeline reviews",
        activity_ru="проектировании дата-платформы и ревью пайплайнов",
        resp_en=(
            "Build and operate batch and streaming pipelines",
            "Model the analytics warehouse together with analysts",
            "Own data quality checks and lineage",
            "Move legacy ETL jobs to the new orchestration platform",
        ),
        resp_ru=(
            "Разрабатывать и сопровождать batch- и стриминговые пайплайны",
            "Проектировать аналитическое хранилище вместе с аналитиками",
            "Отвечать за качество данных и lineage",
            "Переносить легаси-ETL на новую платформу оркестрации",
        ),
        bullets_en=(
            "Built batch pipelines in {bigdata} orchestrated by {flow}, processing {vol} a day.",
            "Designed the event ingestion layer on {queue} with exactly-once delivery into "
            "{store}.",
            "Modelled the analytics warehouse in {store}; cut report latency from hours to {n} "
            "minutes.",
            "Wrote data quality checks that catch {pct}% of schema drifts before they reach "
            "dashboards.",
            "Migrated {svc} legacy ETL jobs from cron scripts to {flow}.",
            "Maintained {lang} libraries for data ingestion used by {n} teams.",
            "Ran the {bigdata} jobs on {orch}, which halved compute cost.",
        ),
        bullets_ru=(
            "Построил batch-пайплайны на {bigdata} с оркестрацией в {flow}, объём — {vol} в день.",
            "Спроектировал слой приёма событий на {queue} с доставкой exactly-once в {store}.",
            "Смоделировал аналитическое хранилище в {store}, отчёты строятся за {n} минут вместо "
            "часов.",
            "Написал проверки качества данных, которые ловят {pct}% изменений схем до дашбордов.",
            "Перенёс {svc} легаси-ETL-задач с cron-скриптов в {flow}.",
            "Сопровождал библиотеки загрузки данных на {lang}, ими пользуются {n} команд.",
            "Перенёс задачи {bigdata} в {orch}, затраты на вычисления снизились вдвое.",
        ),
        twin="backend_engineer",
        levels=LEVELS,
    ),
    "data_scientist": _f(
        en=("Data Scientist", "Machine Learning Scientist", "Applied Scientist"),
        ru=("Data Scientist", "Специалист по анализу данных", "ML-исследователь"),
        alt=("Quantitative Researcher", "Research Engineer", "Исследователь"),
        name_en="data scientist",
        name_ru="data scientist",
        primary=("Python", "R"),
        must=("scikit-learn", "PyTorch", "CatBoost", "Statistics", "SQL", "A/B testing"),
        pool=("Pandas", "Time series", "NLP", "Apache Spark", "SQL"),
        rare=(
            "uplift modeling",
            "CausalML",
            "Prophet",
            "survival analysis",
            "Bayesian optimisation",
        ),
        role_en="data science (building and shipping models)",
        role_ru="работы data scientist (построение и внедрение моделей)",
        focus_en="predictive models that move business metrics",
        focus_ru="предсказательные модели, которые двигают бизнес-метрики",
        activity_en="model evaluation and experiment design",
        activity_ru="оценке моделей и дизайне экспериментов",
        resp_en=(
            "Build models for pricing, churn and demand forecasting",
            "Design and analyse online experiments",
            "Bring models to production together with ML engineers",
            "Explain results to product and business stakeholders",
        ),
        resp_ru=(
            "Строить модели ценообразования, оттока и прогноза спроса",
            "Проектировать и анализировать онлайн-эксперименты",
            "Выводить модели в прод вместе с ML-инженерами",
            "Объяснять результаты продукту и бизнесу",
        ),
        bullets_en=(
            "Built a churn model with {mlfw} in {lang}; retention campaigns based on it saved "
            "{money} a year.",
            "Ran {n} online experiments with {abtest}; shortened them by {pct}% with sequential "
            "testing.",
            "Developed demand forecasting ({stats}) for {svc} warehouses, reducing stock-outs by "
            "{pct}%.",
            "Trained ranking models in {mlfw} on {vol} of click logs.",
            "Wrote {lang} feature pipelines and handed models over to production with ML "
            "engineers.",
            "Built a {mlarea} model that routes {pct}% of support tickets automatically.",
            "Queried {vol} of events with {sql} to build training sets.",
        ),
        bullets_ru=(
            "Построил модель оттока на {mlfw} ({lang}); удерживающие кампании на её основе "
            "сэкономили {money} в год.",
            "Провёл {n} онлайн-экспериментов через {abtest}, ускорил их на {pct}% за счёт "
            "последовательного тестирования.",
            "Разработал прогноз спроса ({stats}) для {svc} складов, дефицит товара снизился на "
            "{pct}%.",
            "Обучал ранжирующие модели на {mlfw} по {vol} логов кликов.",
            "Писал пайплайны признаков на {lang} и выводил модели в прод вместе с ML-инженерами.",
            "Сделал модель {mlarea}, которая автоматически маршрутизирует {pct}% обращений в "
            "поддержку.",
            "Собирал обучающие выборки запросами {sql} по {vol} событий.",
        ),
        twin="data_analyst",
        levels=LEVELS,
    ),
    "data_analyst": _f(
        en=("Data Analyst", "Product Analyst", "BI Analyst"),
        ru=("Аналитик данных", "Продуктовый аналитик", "BI-аналитик"),
        alt=("Analyst", "Reporting Specialist", "Аналитик"),
        name_en="data analyst",
        name_ru="аналитик данных",
        primary=("SQL",),
        must=("Python", "Tableau", "Power BI", "A/B testing", "R", "ClickHouse"),
        pool=("Excel", "Looker", "Statistics", "Pandas", "Amplitude"),
        rare=("CUPED", "Superset", "Metabase", "cohort retention curves", "DAX"),
        role_en="product or data analytics",
        role_ru="работы аналитиком данных",
        focus_en="product metrics, dashboards and experiment analysis",
        focus_ru="продуктовые метрики, дашборды и анализ экспериментов",
        activity_en="metric design and experiment reviews",
        activity_ru="проектировании метрик и разборе экспериментов",
        resp_en=(
            "Own the product metrics and dashboards",
            "Analyse experiments and explain their results",
            "Answer ad-hoc questions from product managers quickly",
            "Keep the metric definitions consistent across teams",
        ),
        resp_ru=(
            "Отвечать за продуктовые метрики и дашборды",
            "Анализировать эксперименты и объяснять результаты",
            "Быстро отвечать на ad-hoc-вопросы продактов",
            "Поддерживать единые определения метрик между командами",
        ),
        bullets_en=(
            "Built {bi} dashboards for {n} business units covering revenue, retention and funnels.",
            "Wrote {sql} over {vol} of event data in {store}.",
            "Analysed {n} product experiments with {abtest} and presented recommendations to "
            "product managers.",
            "Automated weekly reporting in {lang}, saving about {n} hours per week.",
            "Defined the metric tree for the marketplace and aligned it with finance.",
            "Investigated a {pct}% conversion drop and traced it to a payment-provider outage.",
            "Maintained {stats} checks for KPI anomalies.",
        ),
        bullets_ru=(
            "Построил дашборды в {bi} для {n} бизнес-направлений: выручка, удержание, воронки.",
            "Писал запросы {sql} по {vol} событий в {store}.",
            "Проанализировал {n} продуктовых экспериментов ({abtest}) и дал рекомендации "
            "продактам.",
            "Автоматизировал еженедельную отчётность на {lang}, экономия — около {n} часов в "
            "неделю.",
            "Построил дерево метрик маркетплейса и согласовал его с финансами.",
            "Расследовал падение конверсии на {pct}% и нашёл причину — сбой платёжного провайдера.",
            "Поддерживал проверки аномалий KPI ({stats}).",
        ),
        twin="data_engineer",
        levels=LEVELS,
    ),
    "ml_engineer": _f(
        en=("Machine Learning Engineer", "ML Engineer", "MLOps Engineer"),
        ru=("ML-инженер", "Инженер машинного обучения", "MLOps-инженер"),
        alt=("AI Engineer", "Software Engineer (ML)", "Инженер-программист"),
        name_en="ML engineer",
        name_ru="ML-инженер",
        primary=("Python", "C++"),
        must=("PyTorch", "Kubernetes", "MLflow", "TensorFlow", "Docker", "Airflow"),
        pool=("Kubeflow", "NLP", "Computer vision", "Go", "Docker"),
        rare=("Triton Inference Server", "vLLM", "TensorRT", "ONNX Runtime", "Ray Serve"),
        role_en="ML engineering (models in production)",
        role_ru="работы ML-инженером (модели в продакшене)",
        focus_en="serving and operating models in production",
        focus_ru="вывод моделей в продакшен и их эксплуатация",
        activity_en="model serving design and MLOps reviews",
        activity_ru="проектировании инференса и ревью MLOps",
        resp_en=(
            "Serve models with strict latency budgets",
            "Build training and retraining pipelines",
            "Monitor model quality and drift",
            "Help data scientists ship their work",
        ),
        resp_ru=(
            "Выводить модели в прод с жёсткими требованиями к задержке",
            "Строить пайплайны обучения и переобучения",
            "Мониторить качество моделей и дрейф данных",
            "Помогать data scientist доводить модели до прода",
        ),
        bullets_en=(
            "Served {mlfw} models behind a low-latency API ({ms} ms p99) on {orch}.",
            "Built the training pipeline with {flow} and {mltool}; retraining went from weekly to "
            "daily.",
            "Optimised inference in {lang}, cutting GPU cost by {pct}%.",
            "Took a {mlarea} model to production for {users} users.",
            "Set up model monitoring and drift alerts for {svc} models.",
            "Turned research notebooks into reproducible {lang} packages built with {container}.",
        ),
        bullets_ru=(
            "Вывел модели на {mlfw} в API с низкой задержкой ({ms} мс p99) в {orch}.",
            "Построил пайплайн обучения на {flow} и {mltool}, переобучение стало ежедневным.",
            "Оптимизировал инференс на {lang}, затраты на GPU снизились на {pct}%.",
            "Вывел модель {mlarea} в прод для {users} пользователей.",
            "Настроил мониторинг и алерты на дрейф для {svc} моделей.",
            "Превратил исследовательские ноутбуки в воспроизводимые пакеты на {lang} в "
            "{container}.",
        ),
        twin="data_scientist",
        levels=LEVELS,
    ),
    "devops_engineer": _f(
        en=("DevOps Engineer", "Site Reliability Engineer", "Platform Engineer", "Cloud Engineer"),
        ru=("DevOps-инженер", "SRE-инженер", "Инженер платформы", "Системный инженер DevOps"),
        alt=("Infrastructure Engineer", "Systems Engineer", "Системный инженер"),
        name_en="DevOps engineer",
        name_ru="DevOps-инженер",
        primary=("Kubernetes", "Linux"),
        must=("Terraform", "AWS", "Ansible", "GCP", "Helm", "Prometheus"),
        pool=("Azure", "Grafana", "GitLab CI", "ArgoCD", "Docker", "Python", "Go"),
        rare=("eBPF", "Cilium", "Istio", "HashiCorp Vault", "Crossplane", "Karpenter"),
        role_en="DevOps / SRE work",
        role_ru="работы DevOps/SRE",
        focus_en="reliable cloud infrastructure and delivery pipelines",
        focus_ru="надёжная облачная инфраструктура и пайплайны доставки",
        activity_en="platform design and incident reviews",
        activity_ru="проектировании платформы и разборе инцидентов",
        resp_en=(
            "Run our Kubernetes platform and cloud accounts",
            "Keep infrastructure in code and deployments boring",
            "Own monitoring, alerting and SLOs",
            "Help product teams ship safely and often",
        ),
        resp_ru=(
            "Поддерживать платформу на Kubernetes и облачные аккаунты",
            "Описывать инфраструктуру кодом и делать деплой скучным",
            "Отвечать за мониторинг, алертинг и SLO",
            "Помогать продуктовым командам выпускать релизы часто и безопасно",
        ),
        bullets_en=(
            "Ran {n} {orch} clusters with {nodes} nodes on {cloud}; upgrades without downtime.",
            "Rewrote the infrastructure in {iac}: {svc} modules, plan and apply in CI.",
            "Built delivery pipelines on {ci}; deploy time went from 40 to {n} minutes.",
            "Introduced SLOs and alerting with {mon}; on-call pages dropped by {pct}%.",
            "Cut the {cloud} bill by {money} a year with rightsizing and spot instances.",
            "Automated configuration for {nodes} {os} hosts with {iac}.",
            "Wrote internal release tooling in {lang}.",
        ),
        bullets_ru=(
            "Поддерживал {n} кластеров {orch} на {nodes} нод в {cloud}, обновления без простоя.",
            "Переписал инфраструктуру на {iac}: {svc} модулей, plan/apply в CI.",
            "Построил пайплайны доставки на {ci}, деплой сократился с 40 до {n} минут.",
            "Внедрил SLO и алертинг на {mon}, число ночных вызовов упало на {pct}%.",
            "Сократил счёт за {cloud} на {money} в год за счёт rightsizing и spot-инстансов.",
            "Автоматизировал настройку {nodes} хостов {os} через {iac}.",
            "Написал внутренние инструменты релизов на {lang}.",
        ),
        twin="backend_engineer",
        levels=LEVELS,
    ),
    "qa_engineer": _f(
        en=(
            "QA Engineer",
            "QA Automation Engineer",
            "Software Development Engineer in Test",
            "Test Engineer",
        ),
        ru=("QA-инженер", "Инженер по автоматизации тестирования", "Тестировщик", "QA Automation"),
        alt=("Quality Engineer", "Engineer II", "Инженер по качеству"),
        name_en="QA engineer",
        name_ru="QA-инженер",
        primary=("Python", "Java"),
        must=("Selenium", "Playwright", "pytest", "JMeter", "Postman", "JUnit"),
        pool=("SQL", "TestRail", "Docker", "GitLab CI", "Cypress"),
        rare=("Allure TestOps", "k6", "Pact", "Appium", "mutation testing"),
        role_en="test automation",
        role_ru="автоматизации тестирования",
        focus_en="test automation and release quality",
        focus_ru="автоматизация тестирования и качество релизов",
        activity_en="test strategy and release readiness reviews",
        activity_ru="выработке тестовой стратегии и приёмке релизов",
        resp_en=(
            "Automate UI and API tests",
            "Own the regression suite and release quality",
            "Run load tests before big launches",
            "Work with developers on testability",
        ),
        resp_ru=(
            "Автоматизировать UI- и API-тесты",
            "Отвечать за регресс и качество релизов",
            "Проводить нагрузочное тестирование перед крупными запусками",
            "Вместе с разработчиками улучшать тестируемость",
        ),
        bullets_en=(
            "Built a UI test framework on {uitest} in {lang}; {tests} regression scenarios run on "
            "every merge.",
            "Automated API testing with {apitest}; manual regression shrank from 3 days to {n} "
            "hours.",
            "Load-tested the checkout with {loadtest} up to {rps} requests per second.",
            "Ran the test suites in {ci} with reports for the whole team.",
            "Wrote test plans and checklists in {tcm} for {svc} features.",
            "Checked data consistency with {sql} queries against {store}.",
            "Wrote integration tests with {unittest} for {svc} services.",
        ),
        bullets_ru=(
            "Построил фреймворк UI-тестов на {uitest} ({lang}), {tests} регрессионных сценариев "
            "на каждый merge.",
            "Автоматизировал API-тесты в {apitest}, ручной регресс сократился с 3 дней до {n} "
            "часов.",
            "Провёл нагрузочное тестирование оформления заказа в {loadtest} до {rps} запросов в "
            "секунду.",
            "Настроил прогон тестов в {ci} с отчётами для всей команды.",
            "Вёл тест-планы и чек-листы в {tcm} для {svc} фич.",
            "Проверял консистентность данных запросами {sql} к {store}.",
            "Писал интеграционные тесты на {unittest} для {svc} сервисов.",
        ),
        twin="backend_engineer",
        levels=LEVELS,
    ),
    "product_manager": _f(
        en=("Product Manager", "Product Owner", "Technical Product Manager"),
        ru=("Продакт-менеджер", "Менеджер продукта", "Product Owner"),
        alt=("Product Lead", "Owner, Product", "Руководитель направления"),
        name_en="product manager",
        name_ru="продакт-менеджер",
        primary=(),
        must=("A/B testing", "SQL", "Product discovery", "Unit economics", "Amplitude"),
        pool=("Jira", "Figma", "Tableau", "Confluence", "Excel"),
        rare=(
            "RICE",
            "Jobs-to-be-Done",
            "North Star metric",
            "Kano model",
            "Opportunity Solution Tree",
        ),
        role_en="product management",
        role_ru="работы продакт-менеджером",
        focus_en="discovery, roadmap and measurable product outcomes",
        focus_ru="discovery, роадмап и измеримые продуктовые результаты",
        activity_en="product discovery and roadmap planning",
        activity_ru="product discovery и планировании роадмапа",
        resp_en=(
            "Own the roadmap and the outcomes of a product area",
            "Run discovery with users and turn it into clear priorities",
            "Measure everything you ship",
            "Align engineering, design and business",
        ),
        resp_ru=(
            "Отвечать за роадмап и результаты продуктового направления",
            "Проводить исследования с пользователями и превращать их в приоритеты",
            "Измерять всё, что выпускаете",
            "Синхронизировать разработку, дизайн и бизнес",
        ),
        bullets_en=(
            "Led discovery for a new onboarding flow using {biz}; activation grew by {pct}%.",
            "Owned the roadmap of the product with {n} engineers and a designer.",
            "Ran {n} experiments with {abtest}; {pct}% of them shipped.",
            "Tracked funnels in {bi} and wrote {sql} to answer ad-hoc questions.",
            "Built the business case with {biz}; the feature paid back in {n} months.",
            "Coordinated releases in {pmtool} with sales and support.",
        ),
        bullets_ru=(
            "Провёл {biz} для нового онбординга, активация выросла на {pct}%.",
            "Вёл роадмап продукта с командой из {n} разработчиков и дизайнера.",
            "Запустил {n} экспериментов ({abtest}), {pct}% из них раскатили на всех.",
            "Следил за воронками в {bi}, писал {sql} для ad-hoc-вопросов.",
            "Посчитал бизнес-кейс ({biz}), фича окупилась за {n} месяцев.",
            "Координировал релизы в {pmtool} с продажами и поддержкой.",
        ),
        twin="project_manager",
        levels=("middle", "senior", "lead"),
    ),
    "solution_architect": _f(
        en=(
            "Solution Architect",
            "Solutions Architect",
            "Software Architect",
            "Enterprise Solution Architect",
        ),
        ru=("Архитектор решений", "Solution Architect", "Архитектор ПО", "Системный архитектор"),
        alt=("Technical Architect", "Technical Design Authority", "Архитектор"),
        name_en="solution architect",
        name_ru="архитектор решений",
        primary=("AWS", "Azure", "GCP"),
        must=("Kubernetes", "C#/.NET", "Java", "Kafka", "TOGAF", "PostgreSQL"),
        pool=("ArchiMate", "Terraform", "gRPC", "Oracle", "Docker"),
        rare=("ATAM", "C4 model", "arc42", "TOGAF ADM", "Event Storming"),
        role_en="solution architecture (as an architect, not a developer)",
        role_ru="работы архитектором решений (не разработчиком)",
        focus_en="target architectures, integration design and technical decisions",
        focus_ru="целевая архитектура, интеграции и технические решения",
        activity_en="architecture reviews and system design sessions",
        activity_ru="архитектурных ревью и сессиях по системному дизайну",
        resp_en=(
            "Own the target architecture of a product line",
            "Design integrations between new services and legacy systems",
            "Run architecture reviews and keep decision records",
            "Present solutions to clients and estimate them",
        ),
        resp_ru=(
            "Отвечать за целевую архитектуру продуктовой линейки",
            "Проектировать интеграции новых сервисов с легаси-системами",
            "Проводить архитектурные ревью и вести реестр решений",
            "Презентовать и оценивать решения для заказчиков",
        ),
        bullets_en=(
            "Designed the target architecture for a core banking migration to {cloud}: {svc} "
            "services integrated over {queue}.",
            "Ran architecture reviews for {n} teams and maintained the architecture decision "
            "records.",
            "Defined integration patterns between {lang} services and legacy {store} systems.",
            "Produced solution designs in {arch} for the enterprise architecture board.",
            "Led the platform choice between {orch} and managed services; time-to-market improved "
            "by {pct}%.",
            "Estimated and presented solutions to clients in pre-sales; {n} deals closed.",
        ),
        bullets_ru=(
            "Спроектировал целевую архитектуру миграции кор-банкинга в {cloud}: {svc} сервисов, "
            "интеграция через {queue}.",
            "Проводил архитектурные ревью для {n} команд, вёл реестр архитектурных решений.",
            "Определил паттерны интеграции сервисов на {lang} с легаси-системами на {store}.",
            "Готовил архитектурные решения в нотации {arch} для архитектурного комитета.",
            "Обосновал выбор платформы ({orch} или managed-сервисы), time-to-market сократился на "
            "{pct}%.",
            "Оценивал и презентовал решения заказчикам на пресейле, закрыто {n} сделок.",
        ),
        twin="backend_engineer",
        levels=("senior", "lead"),
    ),
    "mobile_developer": _f(
        en=("Mobile Developer", "{stack} Developer", "Mobile Engineer"),
        ru=("Мобильный разработчик", "{stack}-разработчик", "Разработчик мобильных приложений"),
        alt=("App Developer", "Engineer II", "Программист"),
        name_en="mobile developer",
        name_ru="мобильный разработчик",
        primary=("Kotlin", "Swift", "Dart"),
        must=("Firebase", "GraphQL"),
        pool=("GitLab CI", "Figma"),
        rare=("Kotlin Multiplatform", "Core ML", "ARKit", "Bluetooth LE", "App Clips"),
        role_en="mobile development",
        role_ru="мобильной разработки",
        focus_en="mobile apps with large audiences",
        focus_ru="мобильные приложения с большой аудиторией",
        activity_en="mobile architecture and release planning",
        activity_ru="обсуждении мобильной архитектуры и планировании релизов",
        resp_en=(
            "Build features of our mobile app end to end",
            "Keep the app fast and the crash rate low",
            "Work with designers on new flows",
            "Help run a two-week release train",
        ),
        resp_ru=(
            "Разрабатывать фичи мобильного приложения от начала до конца",
            "Следить за скоростью приложения и количеством падений",
            "Вместе с дизайнерами делать новые сценарии",
            "Участвовать в двухнедельном релизном цикле",
        ),
        bullets_en=(
            "Shipped the {platform} app in {lang} with {mfw}; {users} installs, crash-free rate "
            "99.{n}%.",
            "Rewrote the checkout screens in {mfw}, cutting time-to-purchase by {pct}%.",
            "Set up push notifications and analytics with {baas}.",
            "Reduced app start time by {pct}% through lazy loading and image caching.",
            "Maintained a shared module in {lang} used by {n} feature teams.",
            "Automated release builds in {ci}.",
        ),
        bullets_ru=(
            "Выпустил приложение для {platform} на {lang} и {mfw}: {users} установок, crash-free "
            "99.{n}%.",
            "Переписал экраны оформления заказа на {mfw}, время до покупки сократилось на {pct}%.",
            "Настроил пуш-уведомления и аналитику через {baas}.",
            "Ускорил запуск приложения на {pct}% за счёт ленивой загрузки и кэширования "
            "изображений.",
            "Поддерживал общий модуль на {lang}, им пользуются {n} фичевых команд.",
            "Автоматизировал релизные сборки в {ci}.",
        ),
        twin="frontend_engineer",
        levels=LEVELS,
    ),
    "project_manager": _f(
        en=("Project Manager", "Delivery Manager", "IT Project Manager"),
        ru=("Руководитель проектов", "Проджект-менеджер", "Менеджер IT-проектов"),
        alt=("Delivery Lead", "Programme Coordinator", "Координатор"),
        name_en="project manager",
        name_ru="руководитель проектов",
        primary=(),
        must=("Scrum", "Jira", "PMP", "Kanban", "MS Project"),
        pool=("Confluence", "Excel", "Unit economics"),
        rare=("PRINCE2", "SAFe", "earned value management", "PMBOK 7"),
        role_en="IT project management",
        role_ru="управления IT-проектами",
        focus_en="delivering IT projects on time and within budget",
        focus_ru="доставка IT-проектов в срок и в бюджет",
        activity_en="delivery planning and stakeholder updates",
        activity_ru="планировании поставок и отчётности для стейкхолдеров",
        resp_en=(
            "Plan and deliver projects with several teams",
            "Manage risks, budget and stakeholders",
            "Keep the status transparent",
            "Improve the delivery process",
        ),
        resp_ru=(
            "Планировать и вести проекты с несколькими командами",
            "Управлять рисками, бюджетом и стейкхолдерами",
            "Поддерживать прозрачный статус",
            "Улучшать процесс поставки",
        ),
        bullets_en=(
            "Managed delivery of {n} projects with budgets up to {money} using {agile}.",
            "Ran planning and retrospectives for {team} people; tracked work in {pmtool}.",
            "Kept risk registers and weekly status reports for the steering committee.",
            "Delivered the migration programme {pct}% under budget.",
            "Introduced {agile} across {n} teams; lead time dropped by {pct}%.",
        ),
        bullets_ru=(
            "Вёл {n} проектов с бюджетом до {money} по {agile}.",
            "Проводил планирования и ретроспективы для {team} человек, задачи — в {pmtool}.",
            "Вёл реестр рисков и еженедельные статусы для управляющего комитета.",
            "Завершил программу миграции с экономией бюджета {pct}%.",
            "Внедрил {agile} в {n} командах, lead time снизился на {pct}%.",
        ),
        twin="product_manager",
        levels=("middle", "senior", "lead"),
    ),
}
FAMILY_NAMES = tuple(FAMILIES)
# Families the sample projects are most about; the first few are guaranteed a place.
FAMILY_PRIORITY = (
    "solution_architect",
    "data_scientist",
    "backend_engineer",
    "devops_engineer",
    "frontend_engineer",
    "data_engineer",
    "qa_engineer",
    "mobile_developer",
    "ml_engineer",
    "data_analyst",
    "product_manager",
    "project_manager",
)
COMPANIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("backend_engineer", "Java"): ("Spring Boot",),
    ("backend_engineer", "Kotlin"): ("Spring Boot",),
    ("backend_engineer", "Python"): ("Django", "FastAPI"),
    ("backend_engineer", "Node.js"): ("TypeScript",),
    ("frontend_engineer", "React"): ("Redux", "Next.js"),
    ("frontend_engineer", "Angular"): ("TypeScript",),
    ("mobile_developer", "Kotlin"): ("Android", "Jetpack Compose"),
    ("mobile_developer", "Swift"): ("iOS", "SwiftUI"),
    ("mobile_developer", "Dart"): ("Flutter",),
    ("data_scientist", "Python"): ("Pandas",),
    ("qa_engineer", "Python"): ("pytest",),
    ("qa_engineer", "Java"): ("JUnit",),
}
STACK_DISPLAY = {"C#/.NET": ".NET", "Vue.js": "Vue"}

INTERVIEW_STEPS: dict[str, tuple[str, str]] = {
    "screen": ("recruiter screen", "скрининг с рекрутером"),
    "takehome": ("take-home assignment", "тестовое задание"),
    "tech": ("technical interview", "техническое интервью"),
    "coding": ("live coding session", "лайв-кодинг"),
    "design": ("system design interview", "интервью по системному дизайну"),
    "case": ("case study presentation", "разбор кейса"),
    "hm": ("hiring manager interview", "встреча с нанимающим менеджером"),
    "team": ("team fit conversation", "знакомство с командой"),
    "cto": ("final interview with the CTO", "финальное интервью с CTO"),
    "security": ("security check", "проверка службы безопасности"),
}
STEP_ORDER = tuple(INTERVIEW_STEPS)

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random("|".join(["hltm-world", str(seed), *map(str, parts)]))


def _ts(minutes_before: int) -> str:
    return (BASE_DATE - timedelta(minutes=max(0, int(minutes_before)))).isoformat(
        timespec="seconds"
    )


def _days(rng: random.Random, lo: float, hi: float) -> int:
    """A random offset in minutes between lo and hi days."""
    return int(rng.uniform(lo, hi) * 1440)


def _month_index(minutes_before: int) -> int:
    d = BASE_DATE - timedelta(minutes=minutes_before)
    return d.year * 12 + d.month - 1


def _fmt_month(idx: int) -> str:
    return f"{idx // 12:04d}-{idx % 12 + 1:02d}"


def _ru_years(n: int) -> str:
    if n % 10 == 1 and n % 100 != 11:
        word = "год"
    elif n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14):
        word = "года"
    else:
        word = "лет"
    return f"{n} {word}"


def _ru_years_gen(n: int) -> str:
    return f"{n} года" if n % 10 == 1 and n % 100 != 11 else f"{n} лет"


def _ru_from_years(n: int) -> str:
    return f"от {n} года" if n == 1 else f"от {n} лет"


def _join(items: list[str], lang: str, word: str | None = None) -> str:
    word = word or ("or" if lang == "en" else "или")
    if not items:
        return ""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


def _city(name: str, lang: str, rng: random.Random | None = None) -> str:
    region, ru, aliases = CITIES[name]
    if lang == "ru":
        return ru
    if rng is not None and aliases and rng.random() < 0.35:
        return rng.choice(aliases)
    return name


def _region_of(city: str) -> str:
    return CITIES[city][0]


def _family_title(
    fam: str,
    level: str,
    lang: str,
    rng: random.Random,
    stack: str | None = None,
    base: str | None = None,
) -> str:
    f = FAMILIES[fam]
    if base is None:
        options = [t for t in f[lang] if "{stack}" not in t or stack]
        base = rng.choice(options)
    base = base.replace("{stack}", STACK_DISPLAY.get(stack or "", stack or ""))
    if level == "junior":
        prefix = "Junior "
    elif level == "middle":
        prefix = rng.choice(("", "", "Middle "))
    elif level == "senior":
        prefix = "Senior "
    else:
        prefix = (
            rng.choice(("Lead ", "Lead ", "Principal "))
            if lang == "en"
            else rng.choice(("Ведущий ", "Lead "))
        )
    return prefix + base


def _title_base(fam: str, lang: str, rng: random.Random, stack: str | None) -> str:
    options = [t for t in FAMILIES[fam][lang] if "{stack}" not in t or stack]
    return rng.choice(options)


def _stack_of(fam: str, skills: list[str]) -> str | None:
    for s in skills:
        if s in FAMILIES[fam]["primary"] and SKILL_KIND.get(s) in ("lang", "web"):
            return "Flutter" if s == "Dart" and "Flutter" in skills else s
    return None


def _pick_skills(
    rng: random.Random,
    fam: str,
    n: int,
    required: list[str] | tuple[str, ...] = (),
    exclude: list[str] | tuple[str, ...] = (),
    prefer_must: bool = True,
) -> list[str]:
    f = FAMILIES[fam]
    ex = set(exclude)
    out = [s for s in dict.fromkeys(required) if s not in ex]
    if f["primary"] and not any(s in f["primary"] for s in out):
        cands = [s for s in f["primary"] if s not in ex]
        if cands:
            out.append(rng.choice(cands))
    for s in list(out):
        for c in COMPANIONS.get((fam, s), ()):
            if c not in ex and c not in out and rng.random() < 0.8:
                out.append(c)
    must = [s for s in f["must"] if s not in out and s not in ex]
    pool = [s for s in dict.fromkeys(f["pool"]) if s not in out and s not in ex and s not in must]
    rng.shuffle(must)
    rng.shuffle(pool)
    rest = must + pool if prefer_must else pool + must
    if not prefer_must:
        rng.shuffle(rest)
    while len(out) < n and rest:
        out.append(rest.pop(0))
    return out


def _fill(
    template: str, skills: list[str], rng: random.Random, lang: str, used: set[str]
) -> str | None:
    """Fill a bullet template from the resume's own skills; None if a slot can't be filled."""
    values: dict[str, str] = {}
    taken: set[str] = set()
    for slot in dict.fromkeys(re.findall(r"{(\w+)}", template)):
        if slot in _NUMBERS:
            values[slot] = _NUMBERS[slot](rng, lang)
            continue
        kinds = KIND_GROUPS.get(slot, {slot})
        cands = [s for s in skills if SKILL_KIND.get(s) in kinds and s not in taken]
        if not cands:
            return None
        fresh = [s for s in cands if s not in used]
        pick = (fresh or cands)[0] if rng.random() < 0.7 else rng.choice(cands)
        taken.add(pick)
        values[slot] = pick
    used.update(taken)
    return template.format(**values)


def _num(options_en: tuple[str, ...], options_ru: tuple[str, ...] | None = None):  # type: ignore[no-untyped-def]
    return lambda rng, lang: rng.choice(options_ru if (lang == "ru" and options_ru) else options_en)


_NUMBERS = {
    "rps": _num(
        ("2k", "8k", "25k", "60k", "150k"), ("2 тыс.", "8 тыс.", "25 тыс.", "60 тыс.", "150 тыс.")
    ),
    "ms": _num(("5", "12", "40", "80", "150")),
    "pct": lambda rng, lang: str(rng.randint(12, 68)),
    "vol": _num(("300 GB", "2 TB", "18 TB", "120 TB"), ("300 ГБ", "2 ТБ", "18 ТБ", "120 ТБ")),
    "svc": lambda rng, lang: str(rng.randint(8, 60)),
    "n": lambda rng, lang: str(rng.randint(3, 9)),
    "team": lambda rng, lang: str(rng.randint(6, 25)),
    "nodes": lambda rng, lang: str(rng.choice((40, 120, 300, 800))),
    "tests": lambda rng, lang: str(rng.choice((400, 900, 1500, 2600))),
    "users": _num(("1.5M", "3M", "12M", "40M"), ("1,5 млн", "3 млн", "12 млн", "40 млн")),
    "money": _num(
        ("$1.2M", "$300k", "€800k", "€2M"), ("120 млн ₽", "30 млн ₽", "800 тыс. €", "2 млн $")
    ),
}


def _level_shift(fam: str, level: str, delta: int) -> str | None:
    allowed = FAMILIES[fam]["levels"]
    i = LEVEL_INDEX[level] + delta
    if 0 <= i < len(LEVELS) and LEVELS[i] in allowed:
        return LEVELS[i]
    return None


def _clamp_level(fam: str, level: str) -> str:
    allowed = FAMILIES[fam]["levels"]
    if level in allowed:
        return level
    return allowed[0] if LEVEL_INDEX[level] < LEVEL_INDEX[allowed[0]] else allowed[-1]


# ---------------------------------------------------------------------------------------------
# The label function: a pure function of ground truth
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Ownership tree: contracts → seats → projects
# ---------------------------------------------------------------------------------------------


def _person(rng: random.Random, lang: str) -> str:
    if lang == "ru":
        if rng.random() < 0.5:
            return f"{rng.choice(RU_FIRST_M)} {rng.choice(RU_LAST)}"
        last = rng.choice(RU_LAST)
        return f"{rng.choice(RU_FIRST_F)} {last}а"
    return f"{rng.choice(EN_FIRST)} {rng.choice(EN_LAST)}"


def _weighted(rng: random.Random, options: tuple[str, ...], weights: tuple[float, ...]) -> str:
    return rng.choices(options, weights=weights, k=1)[0]


def _build_contracts(seed: int, size: WorldSize) -> list[dict[str, Any]]:
    n = size.contracts
    rng = _rng(seed, "contracts")
    regions = ["europe", "russia", "north_america", "europe", "cis", "russia", "north_america"]
    rng.shuffle(regions)
    regions = [regions[i % len(regions)] for i in range(n)]
    if n >= 2 and "russia" not in regions:
        regions[1] = "russia"
    if n >= 2 and all(r == "russia" for r in regions):
        regions[0] = "europe"
    order = list(FAMILY_PRIORITY[:2])
    rest = list(FAMILY_PRIORITY[2:])
    rng.shuffle(rest)
    order += rest
    industries = list(INDUSTRY_KEYS)
    rng.shuffle(industries)
    used_names: set[str] = set()
    contracts = []
    for i in range(n):
        cid = f"c{i + 1:02d}"
        crng = _rng(seed, "contract", cid)
        region = regions[i]
        core = order[i::n][:4] if n <= len(order) else [order[i % len(order)]]
        while len(core) < 3:
            extra = crng.choice(FAMILY_NAMES)
            if extra not in core:
                core.append(extra)
        names = [x for x in CONTRACT_NAMES[region] if x not in used_names]
        name = crng.choice(names) if names else f"{crng.choice(CONTRACT_NAMES[region])} {i + 1}"
        used_names.add(name)
        offices = crng.sample(
            [c for c in REGION_CITIES[region] if not c.startswith("Remote")],
            k=min(3, len([c for c in REGION_CITIES[region] if not c.startswith("Remote")])),
        )[: crng.randint(1, 3)]
        contracts.append(
            {
                "contract_id": cid,
                "name": name,
                "industry": industries[i % len(industries)],
                "region": region,
                "hq_city": offices[0],
                "office_cities": offices,
                "default_work_mode": _weighted(crng, WORK_MODES, (0.35, 0.45, 0.2)),
                "default_employment_type": _weighted(crng, EMPLOYMENT_TYPES, (0.75, 0.2, 0.05)),
                "core_families": core,
                "language": "ru" if region == "russia" else "en",
                "updated_minutes_before": _days(crng, 30, 400),
            }
        )
    return contracts


def _other(rng: random.Random, options: tuple[str, ...], current: str) -> str:
    return rng.choice([o for o in options if o != current])


def _build_seats(seed: int, size: WorldSize, contracts: list[dict]) -> list[dict[str, Any]]:
    seats = []
    for c in contracts:
        for j in range(size.seats_per_contract):
            sid = f"{c['contract_id']}-s{j + 1:02d}"
            rng = _rng(seed, "seat", sid)
            core = c["core_families"]
            fam = core[j % len(core)] if rng.random() < 0.8 else rng.choice(FAMILY_NAMES)
            level = _clamp_level(fam, _weighted(rng, LEVELS, (0.1, 0.35, 0.4, 0.15)))
            mode = (
                c["default_work_mode"]
                if rng.random() < 0.7
                else _other(rng, WORK_MODES, c["default_work_mode"])
            )
            emp = (
                c["default_employment_type"]
                if rng.random() < 0.75
                else _other(rng, EMPLOYMENT_TYPES, c["default_employment_type"])
            )
            k = _weighted(rng, ("1", "2", "3"), (0.4, 0.4, 0.2))
            cities: list[str] = []
            region_physical = [x for x in REGION_CITIES[c["region"]] if not x.startswith("Remote")]
            while len(cities) < int(k):
                r = rng.random()
                if r < 0.55:
                    city = rng.choice(c["office_cities"])
                elif r < 0.8:
                    city = rng.choice(region_physical)
                else:
                    city = rng.choice(PHYSICAL_CITIES)
                if city not in cities:
                    cities.append(city)
            if (
                mode == "remote"
                and c["region"] in ("europe", "north_america")
                and rng.random() < 0.5
            ):
                remote = "Remote-EU" if c["region"] == "europe" else "Remote-US"
                cities = [*cities[:2], remote]
            lang = "ru" if c["language"] == "ru" and rng.random() < 0.8 else "en"
            seats.append(
                {
                    "seat_id": sid,
                    "contract_id": c["contract_id"],
                    "recruiter_name": _person(rng, lang),
                    "locations": cities,
                    "work_mode": mode,
                    "employment_type": emp,
                    "title_family": fam,
                    "seniority": level,
                    "updated_minutes_before": _days(rng, 5, 300),
                }
            )
    return seats


def _salary(rng: random.Random, region: str, level: str, employment: str) -> dict[str, Any]:
    i = LEVEL_INDEX[level]
    if employment in ("contract", "part-time"):
        table = {
            "russia": ("RUB", "hour", (1200, 2000, 3000, 4200), 100),
            "europe": ("EUR", "day", (250, 400, 600, 800), 50),
            "north_america": ("USD", "hour", (50, 75, 100, 140), 5),
            "cis": ("USD", "hour", (15, 25, 40, 55), 5),
        }
    else:
        table = {
            "russia": ("RUB", "month", (120_000, 250_000, 380_000, 520_000), 10_000),
            "europe": ("EUR", "year", (45_000, 65_000, 85_000, 110_000), 5_000),
            "north_america": ("USD", "year", (100_000, 140_000, 180_000, 230_000), 5_000),
            "cis": ("USD", "month", (1_800, 3_500, 5_000, 7_000), 250),
        }
    currency, period, mids, step = table[region]
    mid = mids[i] * rng.uniform(0.9, 1.1)
    lo = int(round(mid * 0.85 / step) * step)
    hi = int(round(mid * 1.15 / step) * step)
    return {"min": lo, "max": max(hi, lo + step), "currency": currency, "period": period}


def _interview_steps(rng: random.Random, fam: str) -> list[str]:
    pool = ["tech", "hm", "team", "cto", "takehome", "coding", "security"]
    if fam in ("solution_architect", "backend_engineer", "ml_engineer", "data_engineer"):
        pool.append("design")
    if fam in ("product_manager", "project_manager", "data_analyst"):
        pool = ["case", "hm", "team", "cto", "takehome", "security"]
    picked = rng.sample(pool, k=rng.randint(2, 3))
    steps = ["screen", *picked]
    return sorted(steps, key=STEP_ORDER.index)


def _project_title(
    rng: random.Random, fam: str, level: str, lang: str, stack: str | None, team: tuple[str, str]
) -> str:
    title = _family_title(fam, level, lang, rng, stack)
    r = rng.random()
    if r < 0.25:
        title += f" ({team[0] if lang == 'en' else team[1]})"
    elif r < 0.4 and stack and stack not in title and STACK_DISPLAY.get(stack, stack) not in title:
        title += f" ({stack})"
    return title


def _project_attrs(seed: int, pid: str, seat: dict, contract: dict) -> dict[str, Any]:
    rng = _rng(seed, "project", pid)
    fam = (
        seat["title_family"]
        if rng.random() < 0.8
        else rng.choice(contract["core_families"] + list(FAMILY_NAMES))
    )
    level = (
        seat["seniority"]
        if rng.random() < 0.8
        else (_level_shift(fam, seat["seniority"], rng.choice((-1, 1))) or seat["seniority"])
    )
    level = _clamp_level(fam, level)
    if rng.random() < 0.8:
        locs = rng.sample(seat["locations"], k=rng.randint(1, len(seat["locations"])))
        locs = sorted(locs, key=seat["locations"].index)
    elif rng.random() < 0.5:
        locs = [
            rng.choice([c for c in REGION_CITIES[contract["region"]] if not c.startswith("Remote")])
        ]
    else:
        locs = [rng.choice(PHYSICAL_CITIES)]
    mode = seat["work_mode"] if rng.random() < 0.8 else _other(rng, WORK_MODES, seat["work_mode"])
    if any(c.startswith("Remote") for c in locs):
        mode = "remote"
    emp = (
        seat["employment_type"]
        if rng.random() < 0.8
        else _other(rng, EMPLOYMENT_TYPES, seat["employment_type"])
    )
    skills = _pick_skills(rng, fam, rng.randint(4, 6))
    team = rng.choice(TEAMS)
    # projects of Russia-based contracts mostly work in Russian
    lang = "ru" if contract["language"] == "ru" and rng.random() < 0.6 else "en"
    stack = _stack_of(fam, skills)
    title = _project_title(rng, fam, level, lang if rng.random() < 0.5 else "en", stack, team)
    return {
        "project_id": pid,
        "seat_id": seat["seat_id"],
        "contract_id": contract["contract_id"],
        "title": title,
        "role_family": fam,
        "seniority": level,
        "locations": locs,
        "work_mode": mode,
        "employment_type": emp,
        "key_skills": skills,
        "team": team[0],
        "team_ru": team[1],
        "industry": contract["industry"],
        "salary": _salary(rng, _region_of(locs[0]), level, emp),
        "interview_steps": _interview_steps(rng, fam),
        "language": lang,
        "headcount": _weighted(rng, ("1", "2", "3"), (0.7, 0.2, 0.1)),
        "hiring_manager": _person(rng, lang),
        "contract_months": rng.choice((3, 6, 9, 12)),
        "part_time_hours": rng.choice((16, 20, 24)),
        "office_days": rng.choice((2, 3)),
    }


def _similar_title_groups(seed: int, projects: list[dict], contracts: list[dict]) -> list[dict]:
    """Give a few projects under different owners near-identical titles (leakage tests)."""
    rng = _rng(seed, "similar-titles")
    n_groups = max(1, min(8, len(projects) // 15))
    by_contract: dict[str, list[dict]] = {}
    for p in projects:
        by_contract.setdefault(p["contract_id"], []).append(p)
    taken: set[str] = set()
    groups = []
    fams = [f for f in FAMILY_PRIORITY[:6]]
    for g in range(n_groups):
        fam = fams[g % len(fams)]
        level = _clamp_level(fam, "senior")
        team = rng.choice(TEAMS)
        base = rng.choice([t for t in FAMILIES[fam]["en"] if "{stack}" not in t])
        stem = f"{'Senior' if level == 'senior' else 'Lead'} {base}"
        variants = [
            f"{stem} ({team[0]})",
            f"{stem}, {team[0]}",
            f"{stem} – {team[0]}",
            f"{stem} ({team[0]} team)",
        ]
        if len(by_contract) >= 2:
            owners = rng.sample(sorted(by_contract), k=min(3, len(by_contract)))
            pools = [by_contract[c] for c in owners]
        else:
            seats: dict[str, list[dict]] = {}
            for p in projects:
                seats.setdefault(p["seat_id"], []).append(p)
            if len(seats) < 2:
                break
            owners = rng.sample(sorted(seats), k=min(3, len(seats)))
            pools = [seats[s] for s in owners]
        members = []
        for pool in pools:
            free = [p for p in pool if p["project_id"] not in taken]
            if not free:
                continue
            same = [p for p in free if p["role_family"] == fam]
            p = rng.choice(same or free)
            taken.add(p["project_id"])
            prng = _rng(seed, "similar-title-member", p["project_id"])
            if p["role_family"] != fam or p["seniority"] != level:
                p["role_family"] = fam
                p["seniority"] = level
                p["key_skills"] = _pick_skills(prng, fam, prng.randint(4, 6))
                p["interview_steps"] = _interview_steps(prng, fam)
                p["salary"] = _salary(
                    prng, _region_of(p["locations"][0]), level, p["employment_type"]
                )
            p["title"] = variants[len(members) % len(variants)]
            p["team"], p["team_ru"] = team
            members.append(p["project_id"])
        if len(members) >= 2:
            groups.append({"title": f"{stem} ({team[0]})", "role_family": fam, "projects": members})
    return groups


def _project_timing(rng: random.Random, status: str) -> tuple[int, int]:
    """(created, updated) as minutes before the base date."""
    lo, hi = {"open": (4, 150), "paused": (30, 320), "closed": (60, 900)}[status]
    created = _days(rng, lo, hi)
    if status == "open":
        updated = rng.randint(0, min(created - 60, 3 * 1440))
    else:
        updated = created - rng.randint(1440, min(created - 60, 140 * 1440))
    return created, updated


# ---------------------------------------------------------------------------------------------
# Vacancies and their requirements
# ---------------------------------------------------------------------------------------------


def _choose_vacancy_projects(seed: int, n: int, projects: list[dict]) -> list[dict]:
    rng = _rng(seed, "vacancy-projects")
    contracts = sorted({p["contract_id"] for p in projects})
    by_contract = {c: [p for p in projects if p["contract_id"] == c] for c in contracts}
    fam_count: dict[str, int] = {}
    chosen: list[dict] = []
    chosen_ids: set[str] = set()
    tiebreak = {p["project_id"]: rng.random() for p in projects}
    for i in range(n):
        cid = contracts[i % len(contracts)]
        cands = [p for p in by_contract[cid] if p["project_id"] not in chosen_ids]
        if not cands:
            cands = [p for p in projects if p["project_id"] not in chosen_ids] or list(projects)

        early = i < 6  # the first picks go to the priority families (architect, DS, ...)
        p = min(
            cands,
            key=lambda p: (
                fam_count.get(p["role_family"], 0),
                FAMILY_PRIORITY.index(p["role_family"]) if early else 0,
                tiebreak[p["project_id"]],
            ),
        )
        chosen.append(p)
        chosen_ids.add(p["project_id"])
        fam_count[p["role_family"]] = fam_count.get(p["role_family"], 0) + 1
    return chosen


def _req_role_years(rng: random.Random, lang: str, fam: str, years: int) -> str:
    f = FAMILIES[fam]
    if lang == "ru":
        return rng.choice(
            (
                f"Опыт {f['role_ru']} {_ru_from_years(years)}",
                f"Не менее {_ru_years(years)} коммерческого опыта {f['role_ru']}",
                f"Коммерческий опыт {f['role_ru']} — {_ru_from_years(years)}",
            )
        ).replace("Не менее 1 год ", "Не менее 1 года ")
    return rng.choice(
        (
            f"{years}+ years of commercial experience in {f['role_en']}",
            f"At least {years} years of hands-on {f['role_en']}",
            f"Proven experience in {f['role_en']} ({years}+ years)",
        )
    )


def _req_skill(rng: random.Random, lang: str, skill: str, avoid: set[int]) -> str:
    """One phrasing per skill, never the same phrasing twice in one vacancy."""
    if lang == "ru":
        options = (
            f"Уверенное владение {skill}",
            f"Коммерческий опыт с {skill}",
            f"Опыт работы с {skill} в продакшене",
            f"{skill} — обязательно",
        )
    else:
        options = (
            f"Strong hands-on experience with {skill}",
            f"Production experience with {skill}",
            f"{skill}: confident, commercial use",
            f"Solid {skill} skills",
        )
    fresh = [i for i in range(len(options)) if i not in avoid] or list(range(len(options)))
    i = rng.choice(fresh)
    avoid.add(i)
    return options[i]


def _req_nice(rng: random.Random, lang: str, term: str) -> str:
    if lang == "ru":
        return rng.choice(
            (f"{term} — будет плюсом", f"Опыт с {term} — преимущество", f"Знакомство с {term}")
        )
    return rng.choice(
        (
            f"Experience with {term} is a plus",
            f"Hands-on {term} would be an advantage",
            f"Familiarity with {term}",
        )
    )


def _build_vacancy(seed: int, vid: str, project: dict, repeat: int) -> dict:
    rng = _rng(seed, "vacancy", vid)
    fam = project["role_family"]
    level = project["seniority"]
    skills = list(project["key_skills"])
    if repeat:
        level = _level_shift(fam, level, rng.choice((-1, 1))) or level
        skills = _pick_skills(rng, fam, 5, required=skills[:1])
    lang = project["language"]
    k = 2 if rng.random() < 0.55 else 3
    musts = skills[:k]
    f = FAMILIES[fam]
    nice_pool = [s for s in (*skills[k:], *f["must"], *f["pool"]) if s not in musts]
    nice = list(dict.fromkeys(nice_pool))[:2]
    rare = rng.sample(f["rare"], k=1 if rng.random() < 0.6 else 2)
    years = YEARS_REQUIRED[level]
    items: list[tuple[str, str, bool]] = [("role", _req_role_years(rng, lang, fam, years), True)]
    avoid: set[int] = set()
    items += [("skill", _req_skill(rng, lang, s, avoid), True) for s in musts]
    items.append(("rare", _req_nice(rng, lang, rare[0]), False))
    if nice and rng.random() < 0.7:
        items.append(("nice", _req_nice(rng, lang, nice[0]), False))
    if rng.random() < 0.5:
        text = "English at B2 level or higher" if lang == "en" else "Английский не ниже B1"
        items.append(("language", text, rng.random() < 0.3))
    while len(items) < 5:
        extra = (
            nice[len([i for i in items if i[0] == "nice"])]
            if len([i for i in items if i[0] == "nice"]) < len(nice)
            else None
        )
        if extra:
            items.append(("nice", _req_nice(rng, lang, extra), False))
        else:
            items.append(("rare", _req_nice(rng, lang, rare[-1]), False))
    title = project["title"]
    if repeat and level != project["seniority"]:
        title = _family_title(fam, level, "en", rng, _stack_of(fam, skills))
    vac = {
        "vacancy_id": vid,
        "project_id": project["project_id"],
        "title": title,
        "language": lang,
        "role_family": fam,
        "level": level,
        "years_required": years,
        "must_have_skills": musts,
        "nice_to_have_skills": nice,
        "rare_terms": rare,
        "locations": project["locations"],
        "work_mode": project["work_mode"],
        "employment_type": project["employment_type"],
        "_items": items,
        "_formal": rng.random() < 0.5,
        "_formal_mandatory": rng.random() < 0.5,
    }
    return vac


def _finish_requirements(seed: int, vac: dict) -> list[dict]:
    rng = _rng(seed, "requirements", vac["vacancy_id"])
    items = list(vac.pop("_items"))
    formal = vac.pop("_formal")
    mandatory = vac.pop("_formal_mandatory")
    lang = vac["language"]
    if formal:
        texts = FORMAL_REQUIREMENTS[lang]
        nda = rng.choice([t for t in texts if "NDA" in t])
        interview = next(t for t in texts if "NDA" not in t)
        picks = rng.sample([nda, interview], k=rng.randint(1, 2))
        for t in picks:
            items.insert(rng.randint(1, len(items)), ("formal", t, mandatory))
    while len(items) > 8:
        drop = next((i for i, it in enumerate(items) if it[0] in ("language", "nice")), None)
        if drop is None:
            drop = max(i for i, it in enumerate(items) if it[0] == "rare")
        items.pop(drop)
    rows = []
    kinds = {}
    for i, (kind, text, mand) in enumerate(items, start=1):
        rid = f"{vac['vacancy_id']}-q{i}"
        rows.append(
            {
                "requirement_id": rid,
                "vacancy_id": vac["vacancy_id"],
                "text": text,
                "mandatory": bool(mand),
            }
        )
        kinds[rid] = kind
    vac["requirement_kinds"] = kinds
    vac["formal_requirement_ids"] = [r for r, k in kinds.items() if k == "formal"]
    return rows


# ---------------------------------------------------------------------------------------------
# Resumes: planning against the vacancies, then rendering
# ---------------------------------------------------------------------------------------------

# Per vacancy, in priority order (small worlds take a prefix, so every kind comes early).
SLOT_PLAN = (
    "fit",
    "borderline_level",
    "keyword_twin",
    "headline_miss",
    "archive_fit",
    "rare_fit",
    "headline_fit",
    "borderline_skill",
    "fit",
    "keyword_twin",
    "fit",
    "borderline_level",
    "fit",
    "borderline_skill",
)
BACKGROUND_FAMILY_WEIGHTS = {
    "backend_engineer": 3.0,
    "frontend_engineer": 2.0,
    "data_engineer": 1.5,
    "data_scientist": 1.5,
    "data_analyst": 1.5,
    "ml_engineer": 1.0,
    "devops_engineer": 1.5,
    "qa_engineer": 1.5,
    "product_manager": 1.0,
    "solution_architect": 1.0,
    "mobile_developer": 1.5,
    "project_manager": 1.0,
}


def _spec(rng: random.Random, fam: str, level: str, skills: list[str], **extra: Any) -> dict:
    spec = {
        "role_family": fam,
        "level": level,
        "months": rng.randint(*LEVEL_MONTHS[level]),
        "skills": skills,
        "language": "ru" if rng.random() < 0.3 else "en",
        "layer": "active",
        "trap": None,
        "headline_family": None,
        "style": "standard",
        "rare_terms": [],
        "twin_of": None,
        "targets": [],
        "slot": "background",
    }
    spec.update(extra)
    return spec


def _slot_spec(rng: random.Random, slot: str, v: dict) -> dict | None:
    fam, level, musts = v["role_family"], v["level"], v["must_have_skills"]
    twin = FAMILIES[fam]["twin"]
    n = rng.randint(5, 8)
    if slot in ("fit", "archive_fit", "rare_fit", "headline_fit"):
        spec = _spec(rng, fam, level, _pick_skills(rng, fam, n, required=musts))
        if slot == "archive_fit":
            spec["layer"] = "archive"
        elif slot == "rare_fit":
            spec["style"] = "terse"
            spec["rare_terms"] = list(v["rare_terms"])
        elif slot == "headline_fit":
            spec["trap"] = "headline_mismatch"
            spec["headline_family"] = twin
        return spec
    if slot == "borderline_level":
        order = (-1, 1) if rng.random() < 0.6 else (1, -1)
        other = _level_shift(fam, level, order[0]) or _level_shift(fam, level, order[1])
        if other is None:
            return None
        return _spec(rng, fam, other, _pick_skills(rng, fam, n, required=musts))
    if slot == "borderline_skill":
        drop = rng.choice(musts)
        kept = [s for s in musts if s != drop]
        return _spec(rng, fam, level, _pick_skills(rng, fam, n, required=kept, exclude=[drop]))
    if slot == "keyword_twin":
        tl = _clamp_level(twin, level)
        required = [*musts, *v["nice_to_have_skills"]]
        skills = _pick_skills(rng, twin, len(required) + rng.randint(2, 4), required=required)
        return _spec(rng, twin, tl, skills, trap="keyword_twin", twin_of=fam)
    if slot == "headline_miss":
        tl = _clamp_level(twin, level)
        skills = _pick_skills(rng, twin, n, required=musts)
        return _spec(
            rng, twin, tl, skills, trap="headline_mismatch", headline_family=fam, twin_of=fam
        )
    raise ValueError(slot)


def _plan_resumes(seed: int, size: WorldSize, vacancies: list[dict]) -> list[dict]:
    rng = _rng(seed, "resume-plan")
    total = size.resumes
    per_vacancy = min(len(SLOT_PLAN), int(0.85 * total / max(1, len(vacancies))))
    specs: list[dict] = []
    for v in vacancies:
        seen = {"fit": 0, "borderline": 0}
        for slot in SLOT_PLAN[:per_vacancy]:
            if len(specs) >= total:
                break
            group = "fit" if slot == "fit" else "borderline" if slot.startswith("border") else None
            if group:
                seen[group] += 1
                have = sum(
                    1
                    for s in specs
                    if s["layer"] == "active"
                    and s["trap"] is None
                    and s["style"] == "standard"
                    and label_pair(v, s) == group
                )
                if have >= seen[group]:
                    continue
            spec = _slot_spec(rng, slot, v)
            if spec is None:
                continue
            spec["targets"] = [v["vacancy_id"]]
            spec["slot"] = slot
            specs.append(spec)
    fams = tuple(BACKGROUND_FAMILY_WEIGHTS)
    weights = tuple(BACKGROUND_FAMILY_WEIGHTS.values())
    while len(specs) < total:
        fam = _weighted(rng, fams, weights)
        level = _clamp_level(fam, _weighted(rng, LEVELS, (0.15, 0.35, 0.35, 0.15)))
        skills = _pick_skills(rng, fam, rng.randint(4, 7), prefer_must=False)
        specs.append(_spec(rng, fam, level, skills))
    # the archive layer: ~15%, the planted archive fits first, then background resumes
    want = round(0.15 * total) - sum(1 for s in specs if s["layer"] == "archive")
    if want > 0:
        flexible = [s for s in specs if s["slot"] == "background"]
        if len(flexible) < want:
            flexible += [s for s in specs if s["slot"].startswith("borderline")]
        for s in rng.sample(flexible, k=min(want, len(flexible))):
            s["layer"] = "archive"
    rng.shuffle(specs)
    return specs


_CYRILLIC = re.compile(r"[А-Яа-яЁё]")


def _alt_titles(fam: str, lang: str) -> list[str]:
    alts = list(FAMILIES[fam]["alt"])
    return [a for a in alts if bool(_CYRILLIC.search(a)) == (lang == "ru")] or alts


def _positions(rng: random.Random, spec: dict, ref_idx: int) -> tuple[list[dict], tuple | None]:
    months = spec["months"]
    gap = 0 if rng.random() < 0.85 else rng.randint(1, 4)
    end = ref_idx - gap
    n = 3 if months >= 36 else 2 if months >= 12 else 1
    listed = months if n < 3 else min(months, rng.randint(54, 100))
    weights = [rng.uniform(0.7, 1.3) for _ in range(n)]
    parts = [max(5, int(listed * w / sum(weights))) for w in weights]
    parts[-1] = max(4, listed - sum(parts[:-1]))
    if 0 < months - sum(parts) < 12:  # too short for an "earlier" line: extend the oldest job
        parts[-1] += months - sum(parts)
    listed = sum(parts)
    fam, level = spec["role_family"], spec["level"]
    origin = {
        "solution_architect": "backend_engineer",
        "product_manager": "data_analyst",
        "project_manager": "qa_engineer",
    }.get(fam, fam)
    levels = [level]
    for i in range(1, n):
        prev = levels[-1]
        down = rng.random() < (0.5 if i == 1 else 0.6)
        levels.append(LEVELS[max(0, LEVEL_INDEX[prev] - 1)] if down else prev)
    positions = []
    cursor = end
    for i, part in enumerate(parts):
        pos_fam, pos_level = fam, levels[i]
        if pos_level not in FAMILIES[fam]["levels"]:
            pos_fam = origin if i >= 2 else fam
            pos_level = _clamp_level(pos_fam, pos_level)
            if pos_fam == fam:
                pos_level = _clamp_level(fam, pos_level)
        if i == 2 and spec["trap"] == "headline_mismatch" and spec["slot"] == "headline_fit":
            pos_fam = spec["headline_family"]
            pos_level = _clamp_level(pos_fam, levels[i])
        positions.append(
            {
                "family": pos_fam,
                "level": pos_level,
                "start": cursor - part,
                "end": cursor,
                "current": i == 0 and gap == 0,
            }
        )
        cursor -= part
    earlier = (end - months, cursor) if listed < months else None
    spec["months"] = max(months, listed)
    return positions, earlier


def _bullets(
    rng: random.Random,
    fam: str,
    lang: str,
    skills: list[str],
    k: int,
    used_templates: set[str],
    used_skills: set[str],
) -> list[str]:
    templates = list(FAMILIES[fam][f"bullets_{lang}"])
    rng.shuffle(templates)
    out: list[str] = []
    for reuse in (False, True):
        for t in templates:
            if len(out) >= k or (reuse and len(out) >= 2):
                break
            if t in used_templates and not reuse:
                continue
            filled = _fill(t, skills, rng, lang, used_skills)
            if filled and filled not in out:
                out.append(filled)
                used_templates.add(t)
    return out


_TERSE_METRICS = {
    "en": (
        "p99 {ms} ms",
        "{rps} rps",
        "{vol}/day",
        "SLA 99.95%",
        "{svc} services",
        "-{pct}% cost",
        "{users} users",
        "{n} teams",
    ),
    "ru": (
        "p99 {ms} мс",
        "{rps} rps",
        "{vol}/сутки",
        "SLA 99,95%",
        "{svc} сервисов",
        "-{pct}% затрат",
        "{users} пользователей",
        "{n} команд",
    ),
}


def _terse_lines(
    rng: random.Random, lang: str, skills: list[str], rare: list[str], k: int, used: set[str]
) -> list[str]:
    lines = []
    for i in range(k):
        metric = _fill(rng.choice(_TERSE_METRICS[lang]), [], rng, lang, set())
        fresh = [s for s in skills if s not in used]
        if len(fresh) < 2:
            fresh = fresh + rng.sample(
                [s for s in skills if s not in fresh],
                k=min(2 - len(fresh), len(skills) - len(fresh)),
            )
        picks = fresh[:2]
        used.update(picks)
        tech = " + ".join(picks)
        if rare and i == 0:
            lines.append(f"{rare[0]}; {tech}; {metric}")
            rare = rare[1:] or rare
        else:
            lines.append(f"{tech}; {metric}")
    return lines


def _summary(rng: random.Random, spec: dict, title: str, lang: str, industry: str) -> str:
    f = FAMILIES[spec["role_family"]]
    years = max(1, round(spec["months"] / 12))
    top = [s for s in spec["skills"][:4]]
    s1, s2, s3 = (top + top + top)[:3] if top else ("", "", "")
    ind_en, ind_ru = INDUSTRIES[industry]
    if lang == "ru":
        text = rng.choice(
            (
                f"{title} с опытом {_ru_years(years)}. Основной стек: {s1}, {s2}, {s3}. "
                f"Специализация — {f['focus_ru']}.",
                f"Более {_ru_years_gen(years)} в IT, "
                f"последние годы — {ind_ru}. Сильные стороны: {s1} и {s2}.",
                f"Занимаюсь направлением «{f['focus_ru']}» уже {_ru_years(years)}. "
                f"Работаю с {s1}, {s2}, {s3}.",
            )
        )
        if spec["twin_of"]:
            text += f" Регулярно участвую в {FAMILIES[spec['twin_of']]['activity_ru']}."
        return text
    text = rng.choice(
        (
            f"{title} with {years} years of experience in {ind_en}. I mostly work with {s1}, {s2} "
            f"and {s3}, focusing on {f['focus_en']}.",
            f"I have been working as a {f['name_en']} for {years} years, most recently in "
            f"{ind_en}. "
            f"Strong in {s1} and {s2}.",
            f"{years}+ years building {f['focus_en']}. Comfortable with {s1}, {s2} and {s3}.",
            f"Hands-on {f['name_en']}: {f['focus_en']}; day-to-day tools are {s1} and {s2}. "
            f"Background in {ind_en}.",
        )
    )
    if spec["twin_of"]:
        text += f" Regularly involved in {FAMILIES[spec['twin_of']]['activity_en']}."
    return text


def _render_resume(seed: int, rid: str, spec: dict) -> dict[str, Any]:
    rng = _rng(seed, "resume", rid)
    lang = spec["language"]
    ref_minutes = _days(rng, 1, 400) if spec["layer"] == "active" else _days(rng, 1100, 2600)
    ref_idx = _month_index(ref_minutes)
    positions, earlier = _positions(rng, spec, ref_idx)
    fam, level = spec["role_family"], spec["level"]
    name = _person(rng, lang if rng.random() < 0.85 else ("en" if lang == "ru" else "ru"))
    if lang == "en" and _CYRILLIC.search(name):
        name = _person(rng, "en")
    if lang == "ru":
        city = rng.choice(REGION_CITIES["russia"] if rng.random() < 0.8 else REGION_CITIES["cis"])
    else:
        city = rng.choice(PHYSICAL_CITIES)
    industry = rng.choice(INDUSTRY_KEYS)
    stack = _stack_of(fam, spec["skills"])
    terse = spec["style"] == "terse"
    bases: dict[str, str] = {}
    employers = list(EMPLOYERS_RU if lang == "ru" else EMPLOYERS_EN)
    rng.shuffle(employers)
    for i, pos in enumerate(positions):
        pf = pos["family"]
        if terse:
            pos["title"] = rng.choice(_alt_titles(pf, lang))
        else:
            if pf not in bases:
                bases[pf] = _title_base(pf, lang, rng, _stack_of(pf, spec["skills"]))
            pos["title"] = _family_title(
                pf, pos["level"], lang, rng, _stack_of(pf, spec["skills"]), bases[pf]
            )
        pos["company"] = employers[i % len(employers)]
    # headline: the newest title, unless this resume's headline is a trap
    if spec["headline_family"]:
        hf = spec["headline_family"]
        headline = _family_title(
            hf, _clamp_level(hf, level), lang, rng, _stack_of(hf, spec["skills"])
        )
    elif terse:
        headline = rng.choice([*_alt_titles(fam, lang), None])
    elif rng.random() < 0.06:
        headline = None
    else:
        headline = positions[0]["title"]
        if rng.random() < 0.35 and len(spec["skills"]) >= 2:
            headline += f" | {spec['skills'][0]}, {spec['skills'][1]}"
    used_templates: set[str] = set()
    used_skills: set[str] = set()
    present = "по настоящее время" if lang == "ru" else "present"
    lines: list[str] = [name]
    if headline:
        lines.append(headline)
    if lang == "ru":
        lines.append(
            rng.choice(
                (
                    f"Город: {_city(city, 'ru')}",
                    f"{_city(city, 'ru')}, готов к переезду",
                    f"{_city(city, 'ru')} · рассматриваю удалённую работу",
                )
            )
        )
    else:
        lines.append(
            rng.choice(
                (
                    f"Location: {city}",
                    f"Based in {city}, open to relocation",
                    f"{city} · open to remote work",
                )
            )
        )
    lines.append("")
    if not terse:
        lines.append(
            rng.choice(("Summary", "Profile", "About me"))
            if lang == "en"
            else rng.choice(("О себе", "Кратко обо мне"))
        )
        lines.append(_summary(rng, spec, positions[0]["title"], lang, industry))
        lines.append("")
        lines.append(
            rng.choice(("Experience", "Work experience", "Professional experience"))
            if lang == "en"
            else "Опыт работы"
        )
    for i, pos in enumerate(positions):
        end = present if pos["current"] else _fmt_month(pos["end"] - 1)
        dates = f"{_fmt_month(pos['start'])} – {end}"
        if terse:
            lines.append(f"{dates} · {pos['company']} · {pos['title']}")
            rare = spec["rare_terms"][i % len(spec["rare_terms"]) :] if i < 2 else []
            lines.extend(
                _terse_lines(rng, lang, spec["skills"], rare, rng.randint(2, 3), used_skills)
            )
        else:
            lines.append(f"{pos['title']} — {pos['company']}")
            lines.append(dates)
            k = rng.randint(3, 4) if i == 0 else 2 if i == 2 else rng.randint(2, 3)
            bullets = _bullets(
                rng, pos["family"], lang, spec["skills"], k, used_templates, used_skills
            )
            if i == 0 and spec["twin_of"]:
                act = FAMILIES[spec["twin_of"]]
                bullets.insert(
                    1,
                    (
                        f"Regularly took part in {act['activity_en']} and wrote parts of the "
                        "technical specifications."
                        if lang == "en"
                        else f"Регулярно участвовал в {act['activity_ru']}, "
                        "писал части технических спецификаций."
                    ),
                )
            lines.extend(f"• {b}" for b in bullets)
        lines.append("")
    if earlier:
        ef = positions[-1]["family"]
        el = LEVELS[max(0, LEVEL_INDEX[positions[-1]["level"]] - 1)]
        et = _family_title(ef, _clamp_level(ef, el), lang, rng, stack)
        if lang == "ru":
            lines.append(
                f"Ранее: {et}, {employers[-1]}, {earlier[0] // 12}–{(earlier[1] - 1) // 12}"
            )
        else:
            lines.append(
                f"Earlier: {et} at {employers[-1]}, {earlier[0] // 12}–{(earlier[1] - 1) // 12}"
            )
        lines.append("")
    shown = list(spec["skills"]) + (list(spec["rare_terms"]) if terse else [])
    rng.shuffle(shown)
    if terse:
        lines.append(("Stack: " if lang == "en" else "Стек: ") + ", ".join(shown))
    else:
        header = (
            rng.choice(("Skills", "Key skills", "Tech stack"))
            if lang == "en"
            else rng.choice(("Навыки", "Ключевые навыки", "Стек"))
        )
        lines.append(f"{header}: {', '.join(shown)}")
    start_year = (positions[-1]["start"] if not earlier else earlier[0]) // 12
    grad = start_year - rng.randint(0, 1)
    if lang == "ru":
        uni, field = rng.choice(UNIVERSITIES_RU)
        lines.append(("Образование: " if not terse else "") + f"{uni}, {field}, {grad}")
        if not terse:
            lines.append(f"Языки: русский — родной, английский — {rng.choice(('B1', 'B2', 'C1'))}")
    else:
        degree, uni = rng.choice(UNIVERSITIES_EN)
        if terse:
            lines.append(f"{degree.split(' in ')[0]}, {uni}, {grad}")
        else:
            lines.append("Education")
            lines.append(f"{degree}, {uni}, {grad}")
            lines.append(f"Languages: English ({rng.choice(('B2', 'C1', 'C2', 'native'))})")
    text = "\n".join(lines).strip() + "\n"
    truth = {
        "name": name,
        "role_family": fam,
        "level": level,
        "years": round(spec["months"] / 12, 1),
        "language": lang,
        "layer": spec["layer"],
        "trap": spec["trap"],
        "skills": list(spec["skills"]),
        "headline_family": spec["headline_family"],
        "recent_titles": [p["title"] for p in positions[:2]],
        "style": spec["style"],
        "rare_terms": list(spec["rare_terms"]),
        "city": city,
        "targets": list(spec["targets"]),
        "planted_as": spec["slot"],
    }
    row = {
        "resume_id": rid,
        "headline": headline,
        "text": text,
        "language": lang,
        "layer": spec["layer"],
        "updated_at": _ts(ref_minutes),
    }
    return {"row": row, "truth": truth}


# ---------------------------------------------------------------------------------------------
# Free-text facts: several phrasings per fact and language, no machine markers
# ---------------------------------------------------------------------------------------------

LEVEL_RU_NOUN = {"junior": "джун", "middle": "мидл", "senior": "сеньор", "lead": "лид"}


def _s_intro(rng: random.Random, lang: str, p: dict, company: str) -> str:
    title, team = p["title"], (p["team"] if lang == "en" else p["team_ru"])
    if p["team"] in title or p["team_ru"] in title:
        if lang == "ru":
            return rng.choice(
                (
                    f"Вакансия: {title}, компания {company}.",
                    f"{company} открывает позицию {title}.",
                    f"Ищем человека на позицию {title} в {company}.",
                )
            )
        return rng.choice(
            (
                f"{company} is hiring a {title}.",
                f"We are looking for a {title}.",
                f"Join {company} as a {title}.",
            )
        )
    if lang == "ru":
        return rng.choice(
            (
                f"Вакансия: {title} в команду «{team}» компании {company}.",
                f"Открыта позиция {title} (команда «{team}»).",
                f"Мы в {company} расширяем команду «{team}» и ищем человека на позицию {title}.",
            )
        )
    return rng.choice(
        (
            f"{company} is hiring a {title} for its {team} team.",
            f"We are looking for a {title} to join the {team} team at {company}.",
            f"Join {company} as a {title} in the {team} team.",
        )
    )


def _s_industry(rng: random.Random, lang: str, industry: str, company: str) -> str:
    en, ru = INDUSTRIES[industry]
    if lang == "ru":
        return rng.choice(
            (f"Наша отрасль — {ru}.", f"{company} работает в сфере «{ru}».", f"Домен: {ru}.")
        )
    return rng.choice(
        (f"{company} builds products in {en}.", f"We work in {en}.", f"Our domain is {en}.")
    )


def _s_seniority(rng: random.Random, lang: str, level: str, fam: str) -> str:
    f = FAMILIES[fam]
    if lang == "ru":
        return rng.choice(
            (
                f"Уровень позиции — {level}.",
                f"Ищем специалиста уровня {level.capitalize()}.",
                f"Нужен {LEVEL_RU_NOUN[level]}: {f['name_ru']} уровня {level}.",
            )
        )
    return rng.choice(
        (
            f"This is a {level}-level position.",
            f"We need a {level} {f['name_en']}.",
            f"The level we are targeting is {level}.",
            f"Seniority: {level.capitalize()}.",
        )
    )


def _s_years(rng: random.Random, lang: str, level: str, fam: str) -> str:
    y = YEARS_REQUIRED[level]
    f = FAMILIES[fam]
    if lang == "ru":
        return rng.choice(
            (
                f"Опыт {f['role_ru']} — {_ru_from_years(y)}.",
                f"Нужен опыт {f['role_ru']} {_ru_from_years(y)}.",
                f"Ждём {_ru_from_years(y)} опыта {f['role_ru']}.",
            )
        )
    return rng.choice(
        (
            f"At least {y} years of {f['role_en']}.",
            f"{y}+ years of hands-on {f['role_en']}.",
            f"You have {y} or more years of {f['role_en']} behind you.",
        )
    )


def _s_location(rng: random.Random, lang: str, cities: list[str]) -> str:
    names = [_city(c, lang, rng) for c in cities]
    if lang == "ru":
        joined = _join(names, "ru")
        return rng.choice(
            (
                f"Локация: {joined}.",
                f"Город — {joined}.",
                f"Рассматриваем кандидатов из локаций: {', '.join(names)}.",
            )
        )
    joined = _join(names, "en")
    return rng.choice(
        (
            f"The role is based in {joined}.",
            f"Location: {joined}.",
            f"We hire in {joined}.",
            f"Candidates should be located in {joined}.",
        )
    )


def _s_work_mode(rng: random.Random, lang: str, mode: str, office_days: int) -> str:
    d = office_days
    options = {
        ("en", "remote"): (
            "The position is fully remote.",
            "Remote-first: no office attendance required.",
            "You can work from home; the whole team is distributed.",
            "Work format: remote.",
        ),
        ("en", "hybrid"): (
            f"Hybrid setup: {d} days a week in the office.",
            f"We work in a hybrid mode and meet in the office {d} days a week.",
            "The team is hybrid, with office days on Tuesdays and Thursdays.",
        ),
        ("en", "onsite"): (
            "This is an on-site role in our office.",
            "Office-based, five days a week.",
            "Remote work is not an option here; the team sits together in the office.",
        ),
        ("ru", "remote"): (
            "Формат работы — полностью удалённый.",
            "Работа удалённая, в офис приезжать не нужно.",
            "Удалёнка, команда распределённая.",
        ),
        ("ru", "hybrid"): (
            f"Гибридный формат: {d} дня в неделю в офисе.",
            "Гибрид — часть недели в офисе, часть дома.",
            f"Работаем в гибридном режиме, в офисе бываем {d} дня в неделю.",
        ),
        ("ru", "onsite"): (
            "Работа в офисе, удалённый формат не рассматривается.",
            "Только офис, пять дней в неделю.",
            "Формат — офис, команда сидит вместе.",
        ),
    }
    return rng.choice(options[(lang, mode)])


def _s_employment(rng: random.Random, lang: str, emp: str, months: int, hours: int) -> str:
    options = {
        ("en", "full-time"): (
            "Full-time, permanent employment.",
            "This is a full-time position.",
            "We hire on a permanent full-time contract.",
        ),
        ("en", "contract"): (
            f"This is a contract role (B2B) for {months} months with a possible extension.",
            f"Engagement: contractor, {months}-month contract.",
            f"We are looking for a contractor, initially for {months} months.",
        ),
        ("en", "part-time"): (
            f"Part-time, about {hours} hours a week.",
            f"This is a part-time role ({hours} h/week).",
            f"Half-time engagement is fine: around {hours} hours per week.",
        ),
        ("ru", "full-time"): (
            "Полная занятость, оформление в штат.",
            "Занятость — полная.",
            "Работа на полный день, трудовой договор.",
        ),
        ("ru", "contract"): (
            f"Проектная работа по договору на {months} мес. с возможностью продления.",
            f"Оформление по договору ГПХ или как ИП, проект на {months} мес.",
            f"Контракт на {months} месяцев.",
        ),
        ("ru", "part-time"): (
            f"Частичная занятость, около {hours} часов в неделю.",
            f"Неполный день: {hours} ч в неделю.",
            f"Парт-тайм, примерно {hours} часов в неделю.",
        ),
    }
    return rng.choice(options[(lang, emp)])


def _money(amount: int, currency: str, lang: str) -> str:
    if lang == "ru":
        text = f"{amount:,}".replace(",", " ")
        return f"{text} {'₽' if currency == 'RUB' else '€' if currency == 'EUR' else '$'}"
    sym = {"EUR": "€", "USD": "$", "RUB": "₽"}[currency]
    text = f"{amount:,}"
    return f"{text} {sym}" if currency == "RUB" else f"{sym}{text}"


def _s_salary(rng: random.Random, lang: str, sal: dict) -> str:
    lo, hi, cur, per = sal["min"], sal["max"], sal["currency"], sal["period"]
    a, b = _money(lo, cur, lang), _money(hi, cur, lang)
    if lang == "ru":
        period = {"month": "в месяц", "year": "в год", "day": "в день", "hour": "в час"}[per]
        return rng.choice(
            (
                f"Вилка: от {a} до {b} {period}.",
                f"Бюджет — {a}–{b} {period}.",
                f"Готовы платить до {b} {period}, нижняя граница — {a}.",
            )
        )
    period = {"month": "per month", "year": "per year", "day": "per day", "hour": "per hour"}[per]
    k = 1000 if lo >= 10_000 else 1
    short = f"{lo // k}–{hi // k}{'k' if k > 1 else ''} {cur}"
    return rng.choice(
        (
            f"Salary band: {a}–{b} {period}.",
            f"We can offer {short} {period} (gross).",
            f"The budget is up to {b} {period}, starting from {a}.",
        )
    )


def _s_skills(rng: random.Random, lang: str, musts: list[str], nice: list[str]) -> str:
    m = _join(musts, lang, "and" if lang == "en" else "и")
    n = ", ".join(nice) if nice else ""
    if lang == "ru":
        options = [
            f"Ключевые навыки: {', '.join(musts)}.",
            f"Без {musts[0]} не рассматриваем; также важно: {', '.join(musts[1:]) or musts[0]}.",
            f"Стек: {', '.join(musts + nice)}.",
        ]
        if n:
            options.append(f"Обязательно: {m}. Будет плюсом: {n}.")
        return rng.choice(options)
    options = [
        f"Key skills: {', '.join(musts)}.",
        f"You should be strong in {m}.",
        f"Our stack is {', '.join(musts + nice)}; {musts[0]} is a must.",
    ]
    if n:
        options.append(f"Must-have: {m}. Nice to have: {n}.")
    return rng.choice(options)


def _s_interview(rng: random.Random, lang: str, steps: list[str]) -> str:
    idx = 0 if lang == "en" else 1
    names = [INTERVIEW_STEPS[s][idx] for s in steps]
    if lang == "ru":
        word = "этапа" if len(names) in (2, 3, 4) else "этапов"
        return rng.choice(
            (
                f"Этапы собеседования: {' → '.join(names)}.",
                f"Процесс найма: {', '.join(names)}.",
                f"У нас {len(names)} {word}: {', '.join(names)}.",
            )
        )
    return rng.choice(
        (
            f"The interview process: {' → '.join(names)}.",
            f"Interview steps: {', then '.join(names[:-1])}, and finally {names[-1]}.",
            f"We run {len(names)} stages: {', '.join(names)}.",
            f"Expect {_join(names, 'en', 'and')}, usually within two weeks.",
        )
    )


def _reason_text(rng: random.Random, lang: str, code: str, p: dict) -> str:
    kind, _, arg = code.partition(":")
    want_en = FAMILIES[p["role_family"]]["name_en"]
    want_ru = FAMILIES[p["role_family"]]["name_ru"]
    if kind == "role":
        got_en, got_ru = FAMILIES[arg]["name_en"], FAMILIES[arg]["name_ru"]
        if lang == "ru":
            return rng.choice(
                (
                    f"Не тот профиль: по факту {got_ru}, а нужен {want_ru}",
                    f"Последние места работы — {got_ru}, не {want_ru}",
                    f"Заголовок резюме не совпадает с опытом: это {got_ru}",
                )
            )
        return rng.choice(
            (
                f"Wrong role: the experience is as a {got_en}, not a {want_en}",
                f"Recent positions are {got_en} work, we need a {want_en}",
                f"Keyword match only; actually a {got_en}",
            )
        )
    texts = {
        "level:low": (
            (
                "Too junior for the scope",
                "Not enough experience for this level",
                "Level is below what the team needs",
            ),
            (
                "Уровень ниже нужного",
                "Недостаточно опыта для этого уровня",
                "Слабоват для задач команды",
            ),
        ),
        "level:high": (
            (
                "Overqualified for the role",
                "Too senior; would be bored quickly",
                "Expects a lead role we don't have",
            ),
            (
                "Слишком высокий уровень для задачи",
                "Переквалифицирован",
                "Хочет лидскую роль, которой нет",
            ),
        ),
        "salary": (
            (
                "Salary expectations above the band",
                "Asked well above our budget",
                "Compensation mismatch",
            ),
            ("Зарплатные ожидания выше вилки", "Просит больше бюджета", "Не сошлись по деньгам"),
        ),
        "relocation": (
            (
                "Not willing to relocate",
                "Relocation is not an option for the candidate",
                "Wants to stay in the current city",
            ),
            ("Не готов к переезду", "Переезд не рассматривает", "Хочет остаться в своём городе"),
        ),
        "notice": (
            ("Three-month notice period", "Cannot start before the spring", "Long notice period"),
            (
                "Уведомление за три месяца",
                "Может выйти только весной",
                "Долгий выход с текущего места",
            ),
        ),
        "counter_offer": (
            ("Accepted a counter-offer", "Stayed with the current employer", "Took another offer"),
            ("Принял контроффер", "Остался у текущего работодателя", "Принял другой оффер"),
        ),
        "work_mode": (
            (
                "Wants a different work format",
                "Only interested in fully remote roles",
                "Does not want to come to the office",
            ),
            (
                "Не подходит формат работы",
                "Рассматривает только удалёнку",
                "Не готов ходить в офис",
            ),
        ),
    }
    if kind == "skill":
        if lang == "ru":
            return rng.choice(
                (
                    f"Нет практического опыта с {arg}",
                    f"{arg} знает только по курсам",
                    f"Не хватает {arg} в продакшене",
                )
            )
        return rng.choice(
            (
                f"No hands-on {arg}",
                f"{arg} only from courses, not production",
                f"Missing production experience with {arg}",
            )
        )
    en, ru = texts[code]
    return rng.choice(ru if lang == "ru" else en)


def _miss_reason(v: dict, r: dict, rng: random.Random) -> str:
    if r["role_family"] != v["role_family"]:
        return f"role:{r['role_family']}"
    gap = LEVEL_INDEX[r["level"]] - LEVEL_INDEX[v["level"]]
    missing = [s for s in v["must_have_skills"] if s not in r["skills"]]
    if missing and (gap == 0 or rng.random() < 0.5):
        return f"skill:{missing[0]}"
    if gap < 0:
        return "level:low"
    if gap > 0:
        return "level:high"
    return rng.choice(("salary", "relocation", "notice"))


# ---------------------------------------------------------------------------------------------
# Recruiter actions and project documents
# ---------------------------------------------------------------------------------------------


def _project_actions(
    seed: int,
    p: dict,
    pseudo: dict,
    labelled: list[tuple[str, str]] | None,
    resumes: dict[str, dict],
    by_family: dict[str, list[str]],
    all_active: list[str],
) -> list[dict]:
    rng = _rng(seed, "actions", p["project_id"])
    layers_ok = ("active", "archive") if p["status"] == "closed" else ("active",)
    if labelled:
        picks = rng.sample(labelled, k=min(len(labelled), rng.randint(6, 10)))
        cands = [(rid, lab) for rid, lab in picks]
    else:
        same = [r for r in by_family.get(p["role_family"], []) if resumes[r]["layer"] in layers_ok]
        chosen = rng.sample(same, k=min(len(same), rng.randint(2, 4)))
        chosen += rng.sample(all_active, k=min(len(all_active), rng.randint(1, 2)))
        chosen = list(dict.fromkeys(chosen))
        cands = [(rid, label_pair(pseudo, resumes[rid])) for rid in chosen]
    created, updated = p["created_minutes_before"], p["updated_minutes_before"]
    window = max(60, created - updated)
    events = []
    for rid, lab in cands:
        r = resumes[rid]
        t0 = created - int(window * rng.uniform(0.02, 0.6))
        seq: list[tuple[str, str | None]] = [("viewed", None)]
        if lab == "fit":
            if rng.random() < 0.85:
                seq.append(("messaged", None))
                if rng.random() < 0.8:
                    seq.append(("advanced", None))
                else:
                    seq.append(
                        (
                            "rejected",
                            rng.choice(
                                ("salary", "notice", "counter_offer", "relocation", "work_mode")
                            ),
                        )
                    )
            else:
                seq.append(("saved", None))
        elif lab == "borderline":
            seq.append(("saved", None))
            if rng.random() < 0.55:
                seq.append(("rejected", _miss_reason(pseudo, r, rng)))
            elif rng.random() < 0.5:
                seq.append(("messaged", None))
        elif rng.random() < 0.85:
            seq.append(("rejected", _miss_reason(pseudo, r, rng)))
        t = t0
        for action, code in seq:
            lang = p["language"] if rng.random() < 0.85 else "en"
            events.append(
                {
                    "project_id": p["project_id"],
                    "resume_id": rid,
                    "action": action,
                    "reason": _reason_text(rng, lang, code, p) if code else None,
                    "_code": code,
                    "_minutes": max(updated, t),
                    "_label": lab,
                }
            )
            t -= int(window * rng.uniform(0.02, 0.15))
    events.sort(key=lambda e: (-e["_minutes"], e["resume_id"], ACTION_ORDER.index(e["action"])))
    return events


ACTION_ORDER = ("viewed", "saved", "messaged", "advanced", "rejected")


def _fmt_date(minutes_before: int, lang: str) -> str:
    d = BASE_DATE - timedelta(minutes=minutes_before)
    if lang == "ru":
        return d.strftime("%d.%m.%Y")
    return d.strftime("%d %b %Y").lstrip("0")


def _doc_job_description(rng: random.Random, lang: str, p: dict, company: str) -> str:
    f = FAMILIES[p["role_family"]]
    musts = p["key_skills"][:3]
    nice = p["key_skills"][3:5]
    intro = [_s_intro(rng, lang, p, company), _s_industry(rng, lang, p["industry"], company)]
    resp = list(f["resp_ru" if lang == "ru" else "resp_en"])
    rng.shuffle(resp)
    req = [
        _s_seniority(rng, lang, p["seniority"], p["role_family"]),
        _s_years(rng, lang, p["seniority"], p["role_family"]),
        _s_skills(rng, lang, musts, nice),
    ]
    cond = [
        _s_location(rng, lang, p["locations"]),
        _s_work_mode(rng, lang, p["work_mode"], p["office_days"]),
        _s_employment(rng, lang, p["employment_type"], p["contract_months"], p["part_time_hours"]),
        _s_salary(rng, lang, p["salary"]),
    ]
    rng.shuffle(cond)
    if lang == "ru":
        parts = [
            " ".join(intro),
            "Задачи:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "Что важно: " + " ".join(req),
            "Условия: " + " ".join(cond),
            _s_interview(rng, lang, p["interview_steps"]),
        ]
    else:
        parts = [
            " ".join(intro),
            "What you will do:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "What we expect: " + " ".join(req),
            " ".join(cond),
            _s_interview(rng, lang, p["interview_steps"]),
        ]
    return "\n\n".join(parts) + "\n"


def _doc_intake(rng: random.Random, lang: str, p: dict, minutes: int) -> str:
    mgr = p["hiring_manager"]
    date = _fmt_date(minutes, lang)
    hc = int(p["headcount"])
    if lang == "ru":
        head = rng.choice(
            (
                f"Интейк с нанимающим менеджером ({mgr}), {date}.",
                f"Встреча с нанимающим менеджером по вакансии ({mgr}), {date}.",
                f"Заметки по интейку, {date}, нанимающий менеджер — {mgr}.",
            )
        )
        why = rng.choice(("команда растёт", "замена ушедшего сотрудника", "запуск нового продукта"))
        facts = [
            f"Почему открыта позиция: {why}.",
            f"Нужно нанять: {hc} чел." if hc > 1 else "Нанимаем одного человека.",
            _s_seniority(rng, lang, p["seniority"], p["role_family"]),
            _s_skills(rng, lang, p["key_skills"][:2], p["key_skills"][2:4]),
        ]
        deal = rng.choice(
            (
                "частая смена работы (меньше года на месте)",
                "нет опыта в продакшене",
                "только аутсорс в последние годы",
            )
        )
        tail = f"Стоп-факторы: {deal}."
    else:
        head = rng.choice(
            (
                f"Intake call with {mgr} (hiring manager), {date}.",
                f"Notes from the intake meeting with {mgr} on {date}.",
                f"Hiring manager intake, {date}. Attendees: {mgr}, recruiter.",
            )
        )
        why = rng.choice(
            (
                "the team is growing",
                "backfill for someone who left",
                "a new product line is starting",
            )
        )
        facts = [
            f"Why the role is open: {why}.",
            f"Headcount: {hc}."
            if rng.random() < 0.5
            else (f"We need {hc} people." if hc > 1 else "One hire."),
            _s_seniority(rng, lang, p["seniority"], p["role_family"]),
            _s_skills(rng, lang, p["key_skills"][:2], p["key_skills"][2:4]),
        ]
        deal = rng.choice(
            (
                "job hopping (less than a year per company)",
                "no production experience",
                "only agency/outsourcing work recently",
            )
        )
        tail = f"Deal-breakers: {deal}."
    facts += [
        _s_location(rng, lang, p["locations"]),
        _s_work_mode(rng, lang, p["work_mode"], p["office_days"]),
        _s_employment(rng, lang, p["employment_type"], p["contract_months"], p["part_time_hours"]),
    ]
    if rng.random() < 0.8:
        facts.append(_s_salary(rng, lang, p["salary"]))
    if rng.random() < 0.7:
        facts.append(_s_interview(rng, lang, p["interview_steps"]))
    rng.shuffle(facts)
    return head + "\n" + "\n".join(f"- {x}" for x in facts) + "\n" + tail + "\n"


def _doc_recruiter_notes(
    rng: random.Random, lang: str, p: dict, actions: list[dict], minutes: int
) -> str:
    viewed = sum(1 for a in actions if a["action"] == "viewed")
    messaged = sum(1 for a in actions if a["action"] == "messaged")
    advanced = sum(1 for a in actions if a["action"] == "advanced")
    extra = rng.randint(10, 60)
    codes = [a["_code"] for a in actions if a["_code"]]
    top = sorted(set(codes), key=lambda c: (-codes.count(c), c))[:3]
    reasons = [_reason_text(rng, lang, c, p).lower() for c in top]
    date = _fmt_date(minutes, lang)
    city = _city(p["locations"][0], lang)
    if lang == "ru":
        lines = [
            rng.choice(
                (
                    f"Статус поиска на {date}.",
                    f"Заметки рекрутера, {date}.",
                    f"Апдейт по сорсингу ({date}).",
                )
            )
        ]
        lines.append(
            f"Просмотрено {viewed + extra} профилей, написали {messaged + extra // 4}, "
            f"на интервью — {advanced}."
        )
        if reasons:
            lines.append("Чаще всего отказываем по причинам: " + "; ".join(reasons) + ".")
        lines.append(
            rng.choice(
                (
                    f"Кандидаты не из локации {city} — только с релокацией.",
                    f"Приоритет — кандидаты, которые уже живут в локации «{city}».",
                    _s_location(rng, lang, p["locations"]),
                )
            )
        )
        lines.append(_s_work_mode(rng, lang, p["work_mode"], p["office_days"]))
        if rng.random() < 0.5:
            lines.append(_s_salary(rng, lang, p["salary"]))
        lines.append(
            rng.choice(
                (
                    f"Менеджер хочет людей из отрасли: {INDUSTRIES[p['industry']][1]}.",
                    "Ищем через LinkedIn, hh.ru и рекомендации.",
                    "Хорошо отвечают кандидаты из продуктовых компаний.",
                )
            )
        )
    else:
        lines = [
            rng.choice(
                (
                    f"Sourcing update, {date}.",
                    f"Recruiter notes as of {date}.",
                    f"Pipeline status ({date}).",
                )
            )
        ]
        lines.append(
            f"Reviewed {viewed + extra} profiles, messaged {messaged + extra // 4}, "
            f"{advanced} moved to interviews."
        )
        if reasons:
            lines.append("Most common rejection reasons so far: " + "; ".join(reasons) + ".")
        lines.append(
            rng.choice(
                (
                    f"Candidates outside {city} only if they relocate.",
                    f"Priority goes to people already in {city}.",
                    _s_location(rng, lang, p["locations"]),
                )
            )
        )
        lines.append(_s_work_mode(rng, lang, p["work_mode"], p["office_days"]))
        if rng.random() < 0.5:
            lines.append(_s_salary(rng, lang, p["salary"]))
        lines.append(
            rng.choice(
                (
                    f"The hiring manager prefers people with a {INDUSTRIES[p['industry']][0]} "
                    "background.",
                    "Sourcing on LinkedIn, referrals and our own database.",
                    "Product-company candidates respond best.",
                )
            )
        )
    return "\n".join(lines) + "\n"


def _doc_feedback(
    rng: random.Random, lang: str, p: dict, actions: list[dict], names: dict[str, str], minutes: int
) -> str:
    decided = {}
    for a in actions:
        if a["action"] in ("advanced", "rejected"):
            decided[a["resume_id"]] = a
    items = sorted(decided.values(), key=lambda a: a["resume_id"])[:4]
    steps = p["interview_steps"]
    idx = 0 if lang == "en" else 1
    date = _fmt_date(minutes, lang)
    lines = [
        rng.choice(
            (
                f"Interview feedback, {date}.",
                f"Candidate feedback summary ({date}).",
                f"Feedback from the panel, {date}.",
            )
        )
        if lang == "en"
        else rng.choice(
            (
                f"Обратная связь по кандидатам, {date}.",
                f"Фидбек с интервью ({date}).",
                f"Итоги собеседований на {date}.",
            )
        )
    ]
    for a in items:
        name = names[a["resume_id"]]
        step = INTERVIEW_STEPS[rng.choice(steps[1:] or steps)][idx]
        if a["action"] == "advanced":
            lines.append(
                f"{name}: moved on to the {step}; strong match."
                if lang == "en"
                else f"{name}: проходит дальше, следующий этап — {step}."
            )
        else:
            reason = _reason_text(rng, lang, a["_code"], p)
            lines.append(
                f"{name}: rejected after the {step}. {reason}."
                if lang == "en"
                else f"{name}: отказ после этапа «{step}». {reason}."
            )
    if len(lines) == 1:
        lines.append(
            "No decisions yet; first interviews are scheduled."
            if lang == "en"
            else "Решений пока нет, первые интервью назначены."
        )
    lines.append(_s_interview(rng, lang, steps))
    return "\n".join(lines) + "\n"


def _vacancy_text(rng: random.Random, v: dict, reqs: list[dict], p: dict, company: str) -> str:
    lang = v["language"]
    f = FAMILIES[v["role_family"]]
    resp = list(f["resp_ru" if lang == "ru" else "resp_en"])
    rng.shuffle(resp)
    must = [r["text"] for r in reqs if r["mandatory"]]
    nice = [r["text"] for r in reqs if not r["mandatory"]]
    cond = [
        _s_location(rng, lang, v["locations"]),
        _s_work_mode(rng, lang, v["work_mode"], p["office_days"]),
        _s_employment(rng, lang, v["employment_type"], p["contract_months"], p["part_time_hours"]),
        _s_salary(rng, lang, p["salary"]),
    ]
    pv = dict(p, title=v["title"])
    if lang == "ru":
        parts = [
            v["title"],
            _s_intro(rng, lang, pv, company) + " " + _s_industry(rng, lang, p["industry"], company),
            "Чем предстоит заниматься:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "Требования:\n" + "\n".join(f"- {r}" for r in must),
        ]
        if nice:
            parts.append("Будет плюсом:\n" + "\n".join(f"- {r}" for r in nice))
        parts.append("Условия: " + " ".join(cond))
    else:
        parts = [
            v["title"],
            _s_intro(rng, lang, pv, company) + " " + _s_industry(rng, lang, p["industry"], company),
            "What you will do:\n" + "\n".join(f"- {r}" for r in resp[:3]),
            "Requirements:\n" + "\n".join(f"- {r}" for r in must),
        ]
        if nice:
            parts.append("Nice to have:\n" + "\n".join(f"- {r}" for r in nice))
        parts.append("Conditions: " + " ".join(cond))
    parts.append(_s_interview(rng, lang, p["interview_steps"]))
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------
# The world
# ---------------------------------------------------------------------------------------------

OTHER_DOC_KINDS = ("intake_notes", "recruiter_notes", "candidate_feedback")
DOC_SUFFIX = {
    "job_description": "jd",
    "intake_notes": "intake",
    "recruiter_notes": "notes",
    "candidate_feedback": "feedback",
}
LABELS_PER_VACANCY = 25
MAX_LABELLED = {"fit": 12, "borderline": 8}


def _public(d: dict) -> dict:
    return {
        k: v for k, v in d.items() if not k.startswith("_") and not k.endswith("minutes_before")
    }


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


def generate_world(out_dir: Path | str, seed: int = 7, size: WorldSize | str = WorldSize()) -> dict:
    """Write one `<table>.jsonl` per source table plus `ground_truth.json` into `out_dir`.

    Returns the number of rows written per table. Same seed and size → byte-identical files.
    """
    if isinstance(size, str):
        size = SIZES[size]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    contracts = _build_contracts(seed, size)
    contract_by_id = {c["contract_id"]: c for c in contracts}
    seats = _build_seats(seed, size, contracts)
    projects: list[dict] = []
    for seat in seats:
        for k in range(size.projects_per_seat):
            pid = f"{seat['seat_id']}-p{k + 1:03d}"
            projects.append(_project_attrs(seed, pid, seat, contract_by_id[seat["contract_id"]]))
    project_by_id = {p["project_id"]: p for p in projects}
    groups = _similar_title_groups(seed, projects, contracts)

    # vacancies: chosen projects, with both languages represented
    vac_projects = _choose_vacancy_projects(seed, size.vacancies, projects) if projects else []
    langs = {p["language"] for p in vac_projects}
    if "ru" not in langs:
        ru_side = [p for p in vac_projects if contract_by_id[p["contract_id"]]["language"] == "ru"]
        if ru_side:
            ru_side[0]["language"] = "ru"
    if "en" not in {p["language"] for p in vac_projects} and vac_projects:
        vac_projects[-1]["language"] = "en"
    vacancies: list[dict] = []
    repeats: dict[str, int] = {}
    for i, p in enumerate(vac_projects):
        vid = f"v{i + 1:03d}"
        rep = repeats.get(p["project_id"], 0)
        repeats[p["project_id"]] = rep + 1
        vacancies.append(_build_vacancy(seed, vid, p, rep))
    for lang in ("en", "ru"):
        first = next((v for v in vacancies if v["language"] == lang), None)
        if first:
            first["_formal"] = True
    first_formal = next((v for v in vacancies if v["_formal"]), None)
    if first_formal:
        first_formal["_formal_mandatory"] = True
    requirements: list[dict] = []
    for v in vacancies:
        requirements += _finish_requirements(seed, v)

    # status and timing; projects with a vacancy are open
    vacancy_projects = {v["project_id"] for v in vacancies}
    for p in projects:
        prng = _rng(seed, "project-status", p["project_id"])
        status = _weighted(prng, ("open", "paused", "closed"), (0.3, 0.15, 0.55))
        if p["project_id"] in vacancy_projects:
            status = "open"
        p["status"] = status
        p["created_minutes_before"], p["updated_minutes_before"] = _project_timing(prng, status)

    # resumes
    specs = _plan_resumes(seed, size, vacancies)
    width = max(4, len(str(len(specs))))
    resume_rows: list[dict] = []
    resume_truth: dict[str, dict] = {}
    for i, spec in enumerate(specs):
        rid = f"r{i + 1:0{width}d}"
        rendered = _render_resume(seed, rid, spec)
        resume_rows.append(rendered["row"])
        resume_truth[rid] = rendered["truth"]
    active = [rid for rid, t in resume_truth.items() if t["layer"] == "active"]
    by_family: dict[str, list[str]] = {}
    for rid, t in resume_truth.items():
        by_family.setdefault(t["role_family"], []).append(rid)

    # labels (golden pairs come from the active layer: what a normal pool can contain)
    labels: list[dict] = []
    for v in vacancies:
        labels += _select_labels(seed, v, active, resume_truth)
    labelled: dict[str, list[tuple[str, str]]] = {}
    vac_by_project: dict[str, list[dict]] = {}
    for v in vacancies:
        vac_by_project.setdefault(v["project_id"], []).append(v)
    for lab in labels:
        pid = next(v["project_id"] for v in vacancies if v["vacancy_id"] == lab["vacancy_id"])
        labelled.setdefault(pid, []).append((lab["resume_id"], lab["label"]))

    # recruiter actions
    actions: list[dict] = []
    actions_by_project: dict[str, list[dict]] = {}
    for p in projects:
        vs = vac_by_project.get(p["project_id"])
        pseudo = (
            vs[0]
            if vs
            else {
                "role_family": p["role_family"],
                "level": p["seniority"],
                "must_have_skills": p["key_skills"][:2],
            }
        )
        pairs = list(dict.fromkeys(labelled.get(p["project_id"], []))) or None
        evs = _project_actions(seed, p, pseudo, pairs, resume_truth, by_family, active)
        actions_by_project[p["project_id"]] = evs
        actions += evs
    a_width = max(5, len(str(len(actions))))
    for i, a in enumerate(actions):
        a["action_id"] = f"a{i + 1:0{a_width}d}"

    # documents
    names = {rid: t["name"] for rid, t in resume_truth.items()}
    documents: list[dict] = []
    doc_truth: dict[str, dict] = {}
    for p in projects:
        rng = _rng(seed, "documents", p["project_id"])
        c = contract_by_id[p["contract_id"]]
        kinds = ["job_description", *rng.sample(OTHER_DOC_KINDS, k=rng.randint(1, 3))]
        kinds.sort(key=list(DOC_SUFFIX).index)
        created, updated = p["created_minutes_before"], p["updated_minutes_before"]
        window = max(60, created - updated)
        frac = {
            "intake_notes": (0.0, 0.02),
            "job_description": (0.02, 0.08),
            "recruiter_notes": (0.35, 0.7),
            "candidate_feedback": (0.7, 0.98),
        }
        p["documents"] = {}
        for kind in kinds:
            if p["language"] == "ru":
                lang = "ru" if rng.random() < 0.8 else "en"
            elif c["language"] == "ru":
                lang = "ru" if rng.random() < 0.2 else "en"
            else:
                lang = "en"
            minutes = created - int(window * rng.uniform(*frac[kind]))
            evs = actions_by_project[p["project_id"]]
            if kind == "job_description":
                text = _doc_job_description(rng, lang, p, c["name"])
            elif kind == "intake_notes":
                text = _doc_intake(rng, lang, p, minutes)
            elif kind == "recruiter_notes":
                text = _doc_recruiter_notes(rng, lang, p, evs, minutes)
            else:
                text = _doc_feedback(rng, lang, p, evs, names, minutes)
            did = f"doc-{p['project_id']}-{DOC_SUFFIX[kind]}"
            edited = minutes - (
                rng.randint(10, max(11, min(minutes, 3 * 1440))) if rng.random() < 0.3 else 0
            )
            documents.append(
                {
                    "document_id": did,
                    "project_id": p["project_id"],
                    "kind": kind,
                    "text": text,
                    "created_at": _ts(minutes),
                    "updated_at": _ts(max(0, edited)),
                }
            )
            p["documents"][did] = {"kind": kind, "language": lang}
            doc_truth[did] = p["documents"][did]
        codes = [a["_code"] for a in actions_by_project[p["project_id"]] if a["_code"]]
        p["rejection_reasons"] = sorted(set(codes), key=lambda x: (-codes.count(x), x))
        p["vacancy_ids"] = [v["vacancy_id"] for v in vac_by_project.get(p["project_id"], [])]

    vacancy_rows = []
    reqs_by_vacancy: dict[str, list[dict]] = {}
    for r in requirements:
        reqs_by_vacancy.setdefault(r["vacancy_id"], []).append(r)
    for v in vacancies:
        p = project_by_id[v["project_id"]]
        rng = _rng(seed, "vacancy-text", v["vacancy_id"])
        minutes = max(0, p["created_minutes_before"] - _days(rng, 1, 3))
        text = _vacancy_text(
            rng, v, reqs_by_vacancy[v["vacancy_id"]], p, contract_by_id[p["contract_id"]]["name"]
        )
        vacancy_rows.append(
            {
                "vacancy_id": v["vacancy_id"],
                "version": 1,
                "project_id": v["project_id"],
                "title": v["title"],
                "text": text,
                "updated_at": _ts(minutes),
            }
        )
        fits = {
            lab["resume_id"]
            for lab in labels
            if lab["vacancy_id"] == v["vacancy_id"] and lab["label"] == "fit"
        }
        v["archive_fits"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["layer"] == "archive" and label_pair(v, t) == "fit"
        )
        v["rare_term_fits"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["style"] == "terse" and rid in fits and v["vacancy_id"] in t["targets"]
        )
        v["keyword_twins"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["trap"] == "keyword_twin" and v["vacancy_id"] in t["targets"]
        )
        v["headline_traps"] = sorted(
            rid
            for rid, t in resume_truth.items()
            if t["trap"] == "headline_mismatch" and v["vacancy_id"] in t["targets"]
        )

    tables: dict[str, list[dict]] = {
        "contracts": [
            {
                "contract_id": c["contract_id"],
                "name": c["name"],
                "updated_at": _ts(c["updated_minutes_before"]),
            }
            for c in contracts
        ],
        "seats": [
            {
                "seat_id": s["seat_id"],
                "contract_id": s["contract_id"],
                "recruiter_name": s["recruiter_name"],
                "updated_at": _ts(s["updated_minutes_before"]),
            }
            for s in seats
        ],
        "projects": [
            {
                "project_id": p["project_id"],
                "seat_id": p["seat_id"],
                "title": p["title"],
                "status": p["status"],
                "created_at": _ts(p["created_minutes_before"]),
                "updated_at": _ts(p["updated_minutes_before"]),
            }
            for p in projects
        ],
        "project_documents": documents,
        "resumes": resume_rows,
        "recruiter_actions": [
            {
                "action_id": a["action_id"],
                "project_id": a["project_id"],
                "resume_id": a["resume_id"],
                "action": a["action"],
                "reason": a["reason"],
                "created_at": _ts(a["_minutes"]),
            }
            for a in actions
        ],
        "vacancies": vacancy_rows,
        "vacancy_requirements": requirements,
    }
    counts = {}
    for table in TABLES:
        rows = tables[table.name]
        cols = table.column_names
        lines = [
            json.dumps({c: row[c] for c in cols}, sort_keys=True, ensure_ascii=False)
            for row in rows
        ]
        (out / f"{table.name}.jsonl").write_text(
            "".join(line + "\n" for line in lines), encoding="utf-8", newline="\n"
        )
        counts[table.name] = len(rows)

    for p in projects:
        p["created_at"] = _ts(p["created_minutes_before"])
        p["updated_at"] = _ts(p["updated_minutes_before"])
    truth = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "size": asdict(size),
        "base_date": BASE_DATE.date().isoformat(),
        "contracts": {c["contract_id"]: _public(c) for c in contracts},
        "seats": {s["seat_id"]: _public(s) for s in seats},
        "projects": {p["project_id"]: _public(p) for p in projects},
        "resumes": resume_truth,
        "vacancies": {v["vacancy_id"]: _public(v) for v in vacancies},
        "labels": labels,
        "similar_title_groups": groups,
    }
    (out / "ground_truth.json").write_text(
        json.dumps(truth, sort_keys=True, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8",
        newline="\n",
    )
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--size", choices=sorted(SIZES), default="demo")
    args = parser.parse_args(argv)
    counts = generate_world(args.out_dir, seed=args.seed, size=SIZES[args.size])
    print(", ".join(f"{n} {t}" for t, n in counts.items()))


if __name__ == "__main__":
    main()
