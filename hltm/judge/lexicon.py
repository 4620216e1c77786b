"""Recruiting vocabulary the offline judge reads resumes and vacancies with (English and Russian).

Nothing here knows about the sample generator: it is a general map of IT job titles, the
activities and tools typical of each role, seniority markers and the filler words requirement
lines are made of. The offline judge uses it to answer the rubric's questions the way a recruiter
would: *what role does this person actually do* (titles of the recent positions first, the work
they describe second, never the headline), *at what level*, and *which requirements are backed
by the resume's own words*.

Role families are deliberately coarse (backend, frontend, data engineer, QA, project manager…):
a recruiter asks "is this the same job?", not "is this the same job title?". Closely related
families (data scientist ↔ ML engineer, backend ↔ full-stack) get partial credit through
``RELATED``; everything else is a different job however many keywords it shares.

Extend by adding patterns; every pattern is a case-insensitive regular expression matched on
text whose ``ё`` was folded to ``е``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "FAMILIES",
    "GENERIC_REQUIREMENT_WORDS",
    "LEVELS",
    "RoleFamily",
]

LEVELS = ("junior", "middle", "senior", "lead")

# Word boundaries that keep C#, C++, .NET and Node.js whole and work for Cyrillic.
_B = r"(?<![\w#+.])"
_E = r"(?![\w#+])"


@dataclass(frozen=True)
class RoleFamily:
    """One kind of job: how its titles read, and what its people write about their work."""

    name: str
    label: str  # human-readable, used in explanations
    titles: tuple[tuple[str, float], ...]  # (pattern on a position title, weight)
    work: tuple[tuple[str, float], ...]  # (pattern on what the position describes, weight)

    def compiled_titles(self) -> tuple[tuple[re.Pattern[str], float], ...]:
        return _compile(self.titles)

    def compiled_work(self) -> tuple[tuple[re.Pattern[str], float], ...]:
        return _compile(self.work)


_CACHE: dict[tuple[tuple[str, float], ...], tuple[tuple[re.Pattern[str], float], ...]] = {}


def _compile(
    items: tuple[tuple[str, float], ...],
) -> tuple[tuple[re.Pattern[str], float], ...]:
    got = _CACHE.get(items)
    if got is None:
        got = tuple((re.compile(f"{_B}(?:{p}){_E}", re.IGNORECASE), w) for p, w in items)
        _CACHE[items] = got
    return got


# A programming language or framework written in a title ("Java Developer", "Go-разработчик")
# names the family through what that stack is mostly used for.
_DEV = r"(?:developer|engineer|programmer|разработчик\w*|программист\w*|инженер\w*)"
_BACKEND_STACK = (
    r"java|go|golang|c#|\.net|python|php|ruby|rails|scala|node\.js|nodejs|rust|elixir|erlang"
    r"|django|spring|laravel|symfony|c\+\+|perl|clojure|haskell"
)
_FRONTEND_STACK = r"react|vue|vue\.js|angular|javascript|typescript|js|svelte|ember"
_MOBILE_STACK = r"ios|android|swift|flutter|react native|objective-c|xamarin|dart"

FAMILIES: tuple[RoleFamily, ...] = (
    RoleFamily(
        "backend",
        "backend developer",
        (
            (r"back[\s-]?end|бэк[\s-]?енд\w*|бек[\s-]?енд\w*|бэкэнд\w*", 3.0),
            (r"server[\s-]side|серверн\w* част\w*|серверн\w* разработ\w*", 3.0),
            (r"software engineer \(backend\)|api developer|api engineer", 3.0),
            (rf"(?:{_BACKEND_STACK})[\s-]*{_DEV}", 2.0),
            (rf"kotlin[\s-]*{_DEV}", 1.0),  # Kotlin is both a server and an Android language
            (r"platform developer", 1.0),
        ),
        (
            (r"back[\s-]?end|бэкенд\w*|бекенд\w*|server[\s-]side", 1.0),
            (r"apis?|rest(?:ful)?|grpc|graphql api|микросервис\w*|microservices?", 0.8),
            (r"requests per second|rps|запрос\w* в секунду|высоконагруж\w*|high[\s-]load", 0.8),
            (r"monolith|монолит\w*|services? written in|сервис\w* на", 0.6),
            (
                r"postgresql|mysql|redis|rabbitmq|mongodb|orm|database schema|схем\w* (?:бд|бaз)",
                0.4,
            ),
            (r"java|go|golang|c#|\.net|php|ruby|node\.js|spring boot|django|fastapi|laravel", 0.5),
            (r"kafka", 0.3),
        ),
    ),
    RoleFamily(
        "frontend",
        "frontend developer",
        (
            (r"front[\s-]?end|фронт[\s-]?енд\w*|фронтэнд\w*|верстальщик\w*", 3.0),
            (r"ui developer|ui engineer|web developer|web engineer", 2.5),
            (r"веб[\s-]разработчик\w*|веб[\s-]программист\w*", 2.5),
            (rf"(?:{_FRONTEND_STACK})[\s-]*{_DEV}", 2.5),
        ),
        (
            (r"front[\s-]?end|фронтенд\w*|user interfaces?|веб[\s-]интерфейс\w*|интерфейс\w*", 0.8),
            (r"react|vue|vue\.js|angular|redux|next\.js|webpack|svelte|storybook", 0.7),
            (
                r"typescript|javascript|html|css|scss|spa|single[\s-]page|ssr|server[\s-]side rendering",
                0.6,
            ),
            (r"серверн\w* рендеринг\w*", 0.6),
            (r"design system|дизайн[\s-]систем\w*|accessibility|wcag|lcp|bundle|бандл\w*", 0.7),
            (r"browser|браузер\w*|ui components?|компонент\w*", 0.4),
        ),
    ),
    RoleFamily(
        "fullstack",
        "full-stack developer",
        ((r"full[\s-]?stack|фул+[\s-]?стек\w*|фулстэк\w*", 3.0),),
        ((r"full[\s-]?stack|фул+[\s-]?стек\w*", 0.8),),
    ),
    RoleFamily(
        "mobile",
        "mobile developer",
        (
            (r"mobile|мобильн\w*|app developer|разработчик\w* (?:мобильных )?приложени\w*", 3.0),
            (rf"(?:{_MOBILE_STACK})[\s-]*{_DEV}", 2.5),
            (rf"kotlin[\s-]*{_DEV}", 1.0),
        ),
        (
            (r"mobile|мобильн\w*|ios|android|app store|google play|crash[\s-]free", 0.9),
            (r"swift|swiftui|jetpack compose|flutter|dart|react native|objective-c|xcode", 0.8),
            (
                r"push(?:[\s-]notifications?)?|пуш[\s-]уведомлени\w*|firebase|installs|установ\w*",
                0.6,
            ),
            (r"kotlin", 0.3),
        ),
    ),
    RoleFamily(
        "data_engineer",
        "data engineer",
        (
            (
                r"data engineer|big data engineer|data platform engineer|dwh (?:engineer|developer)",
                3.0,
            ),
            (r"etl (?:developer|engineer)|pipeline engineer|software engineer \(data\)", 3.0),
            (
                r"инженер\w* данных|разработчик\w* etl|etl[\s-]разработчик\w*|инженер\w* дата[\s-]платформ\w*",
                3.0,
            ),
            (r"(?:spark|hadoop|dwh)[\s-]*" + _DEV, 2.5),
        ),
        (
            (r"etl|elt|pipelines?|пайплайн\w*|data lake|lakehouse|dwh|хранилищ\w* данных", 0.9),
            (
                r"spark|apache spark|airflow|dbt|flink|hadoop|hive|debezium|iceberg|delta lake|trino",
                0.8,
            ),
            (r"snowflake|bigquery|greenplum|vertica|redshift", 0.6),
            (r"batch|streaming|стриминг\w*|ingestion|приём\w* событий|прием\w* событий", 0.5),
            (r"data quality|качеств\w* данных|lineage", 0.6),
            (r"kafka|clickhouse", 0.3),
        ),
    ),
    RoleFamily(
        "data_scientist",
        "data scientist",
        (
            (
                r"data scientist|machine learning scientist|applied scientist|research scientist",
                3.0,
            ),
            (r"quantitative researcher|quant researcher|ds[\s-]специалист\w*", 2.5),
            (r"researcher|исследовател\w*", 1.5),
            (r"специалист\w* по анализу данных|ml[\s-]исследовател\w*|исследовател\w* данных", 3.0),
        ),
        (
            (r"models?|модел\w*|machine learning|машинн\w* обучени\w*|ml", 0.6),
            (r"scikit[\s-]learn|sklearn|catboost|xgboost|lightgbm|pytorch|tensorflow|pandas", 0.5),
            (r"statistic\w*|статистик\w*|regression|регресси\w*|forecast\w*|прогноз\w*", 0.7),
            (r"time series|временн\w* ряд\w*|churn|отток\w*|scoring|скоринг\w*|uplift", 0.7),
            (r"features?|признак\w*|experiments?|эксперимент\w*|hypothes\w*|гипотез\w*", 0.4),
            (r"nlp|computer vision|компьютерн\w* зрени\w*|recommendation\w*|рекомендац\w*", 0.5),
            (r"survival analysis|bayesian|байесовск\w*|causal inference|econometric\w*", 0.7),
            (r"roc[\s-]auc|auc|gini|precision|recall|f1", 0.6),
        ),
    ),
    RoleFamily(
        "ml_engineer",
        "ML engineer",
        (
            (
                r"ml engineer|machine learning engineer|mlops(?: engineer)?|deep learning engineer",
                3.0,
            ),
            (
                r"ml[\s-]инженер\w*|инженер\w* (?:по )?машинно\w* обучени\w*|computer vision engineer",
                3.0,
            ),
            (r"nlp engineer|research engineer|ai engineer", 2.0),
        ),
        (
            (r"mlops|mlflow|kubeflow|sagemaker|vertex ai|feature store", 0.8),
            (
                r"model serving|inference|инференс\w*|triton|onnx|tensorrt|vllm|ray serve|torchserve",
                0.8,
            ),
            (r"training pipelines?|пайплайн\w* обучения|gpu|cuda|deploy\w* models?", 0.7),
            (
                r"выкатк\w* моделей|вывод\w* моделей|модел\w* в прод\w*|models? (?:in|to) production",
                0.8,
            ),
            (r"pytorch|tensorflow|models?|модел\w*", 0.4),
        ),
    ),
    RoleFamily(
        "data_analyst",
        "data / product analyst",
        (
            (r"data analyst|product analyst|bi analyst|bi developer|business intelligence", 3.0),
            (r"marketing analyst|reporting analyst|web analyst|analytics engineer", 2.5),
            (
                r"аналитик\w* данных|продуктов\w* аналитик\w*|bi[\s-]аналитик\w*|маркетингов\w* аналитик\w*",
                3.0,
            ),
            (r"analyst|аналитик\w*", 1.2),
        ),
        (
            (r"dashboards?|дашборд\w*|reports?|reporting|отчет\w*|отчёт\w*", 0.8),
            (r"tableau|power bi|looker|metabase|superset|excel|amplitude|google analytics", 0.7),
            (
                r"metric trees?|дерев\w* метрик|funnel\w*|воронк\w*|conversion|конверси\w*|cohort\w*|когорт\w*",
                0.7,
            ),
            (r"a/b|ab[\s-]test\w*|sql", 0.4),
        ),
    ),
    RoleFamily(
        "business_analyst",
        "business / systems analyst",
        (
            (
                r"business analyst|systems? analyst|бизнес[\s-]аналитик\w*|системн\w* аналитик\w*",
                3.0,
            ),
        ),
        (
            (
                r"requirements? (?:gathering|elicitation)|сбор\w* требовани\w*|bpmn|uml|user stor\w*",
                0.8,
            ),
            (r"техническ\w* задани\w*|specifications?|спецификаци\w*|use cases?", 0.5),
        ),
    ),
    RoleFamily(
        "devops",
        "DevOps / SRE engineer",
        (
            (r"devops|dev ops|sre|site reliability|девопс\w*", 3.0),
            (r"platform engineer|infrastructure engineer|cloud engineer|release engineer", 2.5),
            (r"build engineer|systems? administrator|sysadmin|системн\w* администратор\w*", 2.0),
            (
                r"инженер\w* (?:по )?инфраструктур\w*|администратор\w* linux|linux administrator",
                2.5,
            ),
        ),
        (
            (r"kubernetes|k8s|terraform|ansible|helm|argocd|argo cd|pulumi|puppet|chef", 0.8),
            (
                r"ci/cd|gitlab ci|jenkins|github actions|teamcity|пайплайн\w* доставки|delivery pipelines?",
                0.7,
            ),
            (
                r"prometheus|grafana|alerting|алертинг\w*|slo|sla|on[\s-]call|дежурств\w*|incidents?",
                0.6,
            ),
            (r"infrastructure|инфраструктур\w*|clusters?|кластер\w*|hosts|хост\w*|nodes", 0.6),
            (r"linux|docker|aws|gcp|azure|cloud|облак\w*", 0.3),
        ),
    ),
    RoleFamily(
        "qa",
        "QA / test engineer",
        (
            (r"qa|quality assurance|test engineer|test automation engineer|automation qa|aqa", 3.0),
            (r"quality engineer|инженер\w* по качеств\w*", 2.5),
            (r"sdet|software (?:development )?engineer in test|tester|тестировщик\w*", 3.0),
            (
                r"инженер\w* по тестировани\w*|qa[\s-]инженер\w*|автотестировщик\w*|тест[\s-]инженер\w*",
                3.0,
            ),
            (r"test lead|qa lead|test manager", 2.5),
        ),
        (
            (
                r"tests?|testing|тест\w*|автотест\w*|regression|регресс\w*|test cases?|тест[\s-]кейс\w*",
                0.8,
            ),
            (
                r"selenium|playwright|cypress|appium|jmeter|testrail|postman|allure|pytest|junit",
                0.7,
            ),
            (r"bugs?|баг\w*|defects?|дефект\w*|release quality|качеств\w* релиз\w*|qa", 0.6),
            (r"load[\s-]test\w*|нагрузочн\w*", 0.5),
        ),
    ),
    RoleFamily(
        "product_manager",
        "product manager",
        (
            (
                r"product manager|product owner|product lead|head of product|product director|cpo",
                3.0,
            ),
            (r"owner,? product|продакт[\s-]менеджер\w*|продакт\w*|менеджер\w* продукт\w*", 3.0),
            (r"владел\w* продукт\w*|руководител\w* продукт\w*", 3.0),
        ),
        (
            (r"roadmap|роадмап\w*|роудмап\w*|discovery|дискавери|backlog|бэклог\w*", 0.8),
            (r"north star|product[\s-]market fit|jtbd|jobs to be done", 0.7),
            (r"unit economics|юнит[\s-]экономик\w*|retention|activation|активаци\w*|ltv|arpu", 0.7),
            (r"okrs?|customer interviews|custdev|кастдев\w*|product discovery", 0.7),
            (r"launch\w*|запуст\w*|hypothes\w*|гипотез\w*|feature|фич\w*|a/b", 0.3),
        ),
    ),
    RoleFamily(
        "project_manager",
        "project / delivery manager",
        (
            (r"project manager|delivery manager|delivery lead|program(?:me)? manager", 3.0),
            (r"project coordinator|programme coordinator|program coordinator|pmo", 2.5),
            (r"руководител\w* проект\w*|менеджер\w* (?:it[\s-])?проект\w*|проджект\w*", 3.0),
            (r"scrum master|скрам[\s-]мастер\w*|координатор\w* проект\w*", 2.0),
            (r"coordinator|координатор\w*", 0.8),
        ),
        (
            (
                r"budgets?|бюджет\w*|deadlines?|срок\w*|risks?|риск\w*|steering|управляющ\w* комитет\w*",
                0.8,
            ),
            (r"delivery|поставк\w*|status reports?|статус\w*|stakeholders?|стейкхолдер\w*", 0.6),
            (r"scrum|kanban|waterfall|pmp|prince2|pmbok|ms project|safe|jira", 0.5),
            (r"planning|планировани\w*|retrospectives?|ретроспектив\w*|projects?|проект\w*", 0.4),
        ),
    ),
    RoleFamily(
        "architect",
        "solution / software architect",
        (
            (r"solutions? architect|software architect|enterprise architect|system architect", 3.0),
            (r"technical architect|cloud architect|data architect|it architect|architect", 3.0),
            (r"архитектор\w*", 3.0),
        ),
        (
            (
                r"architecture|архитектур\w*|architectural|target architecture|решени\w* (?:для|на)",
                0.8,
            ),
            (r"adrs?|decision records?|togaf|archimate|c4 model|architecture review\w*", 0.9),
            (r"integrations?|интеграци\w*|presales?|пресейл\w*|solution design", 0.6),
        ),
    ),
    RoleFamily(
        "designer",
        "UX/UI designer",
        ((r"ux|ui/ux|ux/ui|product designer|ui designer|web designer|дизайнер\w*", 3.0),),
        (
            (r"figma|sketch|prototyp\w*|прототип\w*|user research|usability|юзабилити", 0.8),
            (r"wireframes?|mockups?|макет\w*", 0.6),
        ),
    ),
    RoleFamily(
        "security",
        "security engineer",
        (
            (r"security engineer|appsec|devsecops|pentester|penetration tester|soc analyst", 3.0),
            (
                r"специалист\w* по (?:информационной )?безопасност\w*|инженер\w* (?:по )?(?:информационной )?безопасност\w*",
                3.0,
            ),
        ),
        ((r"vulnerabilit\w*|уязвимост\w*|pentest\w*|siem|owasp|threat model\w*|soc", 0.8),),
    ),
    RoleFamily(
        "dba",
        "database administrator",
        ((r"dba|database administrator|администратор\w* баз\w* данных|database engineer", 3.0),),
        ((r"replication|репликац\w*|backups?|бэкап\w*|query tuning|оптимизаци\w* запрос\w*", 0.6),),
    ),
    RoleFamily(
        "engineering_manager",
        "engineering manager",
        (
            (
                r"engineering manager|head of engineering|head of development|vp of engineering|cto",
                3.0,
            ),
            (r"руководител\w* (?:отдела )?разработк\w*|технически\w* директор\w*", 3.0),
        ),
        (
            (
                r"hiring|найм\w*|performance reviews?|1:1|one-on-ones?|team of \d+|команд\w* из \d+",
                0.5,
            ),
        ),
    ),
    RoleFamily(
        "embedded",
        "embedded engineer",
        ((r"embedded|firmware|встраиваем\w*|микроконтроллер\w*|электроник\w*", 3.0),),
        ((r"rtos|stm32|arm cortex|fpga|microcontrollers?|микроконтроллер\w*|can bus", 0.8),),
    ),
    RoleFamily(
        "gamedev",
        "game developer",
        (
            (
                r"game developer|game programmer|gameplay (?:engineer|programmer)|unity developer",
                3.0,
            ),
            (r"unreal (?:engine )?developer|разработчик\w* игр|геймдев\w*", 3.0),
        ),
        ((r"unity|unreal engine|gameplay|шейдер\w*|shaders?", 0.8),),
    ),
    RoleFamily(
        "onec",
        "1C developer",
        ((r"1[сc][\s-]*(?:developer|programmer|разработчик\w*|программист\w*)", 3.0),),
        ((r"1[сc]|бсп|скд|управляемые формы", 0.8),),
    ),
    RoleFamily(
        "support",
        "support engineer",
        (
            (r"support engineer|technical support|helpdesk|service desk|техподдержк\w*", 3.0),
            (
                r"инженер\w* (?:технической )?поддержки|специалист\w* (?:технической )?поддержки",
                3.0,
            ),
        ),
        ((r"tickets?|тикет\w*|заявк\w*|sla", 0.5),),
    ),
)

FAMILY_BY_NAME = {f.name: f for f in FAMILIES}

# Seniority written in a title. Prefix markers ("Senior Java Developer", "Ведущий аналитик") are
# strong; "… Lead" at the end of a title ("Delivery Lead", "Tech Lead") is a weaker hint.
LEVEL_MARKERS: tuple[tuple[str, str], ...] = (
    (r"intern|trainee|стажер\w*|стажёр\w*", "junior"),
    (r"junior|jr\.?|младш\w*|джун\w*|начинающ\w*", "junior"),
    (r"middle|mid[\s-]level|mid|intermediate|мидл\w*", "middle"),
    (r"senior|sr\.?|старш\w*|сеньор\w*|синьор\w*", "senior"),
    (r"lead|principal|staff|chief|head of|ведущ\w*|главн\w*|тимлид\w*|техлид\w*|лид", "lead"),
)
LEVEL_MARKERS_RE = tuple(
    (re.compile(f"{_B}(?:{p}){_E}", re.IGNORECASE), level) for p, level in LEVEL_MARKERS
)


# Filler in requirement lines: what is left after removing these is what must be evidenced.
# Russian entries are stems (a word matches when it starts with one).
def _words(block: str) -> tuple[str, ...]:
    return tuple(block.split())


GENERIC_REQUIREMENT_WORDS: frozenset[str] = frozenset(
    _words(
        """
    experience experienced strong strongly hands hands-on production commercial commercially solid
    skill skills confident confidently use using usage used knowledge know familiarity familiar
    nice have plus is a an the with in of at least years year yrs proven good great understanding
    understand ability able working work worked required requirement requirements must preferred
    advantage advantageous background level higher or and deep expert expertise proficiency
    proficient practical excellent similar relevant related real world tools tool technologies
    technology stack environment environments plus bonus desirable desired would be will ideally
    minimum min least as not developer engineer professional professionally track record
    production-grade day-to-day other areas area role roles field
    """
    )
)
GENERIC_REQUIREMENT_STEMS_RU: tuple[str, ...] = _words(
    """
    опыт работ уверенн владени коммерческ продакшен продакшн обязательн будет плюс преимуществ
    знакомств знани навык умени понимани хорош отличн глубок практическ не менее ниже выше лет
    года год от до использовани использова успешн реальн проект желательн приветству уровн
    минимум сильн твёрд тверд
    """
)

# CEFR levels for language requirements ("English B2+", "английский не ниже B1").
CEFR = ("a1", "a2", "b1", "b2", "c1", "c2")
LANGUAGE_NAMES: dict[str, tuple[str, ...]] = {
    "english": ("english", "английск"),
    "german": ("german", "немецк"),
    "french": ("french", "французск"),
    "spanish": ("spanish", "испанск"),
    "russian": ("russian", "русск"),
    "chinese": ("chinese", "китайск"),
}
NATIVE_WORDS = ("native", "родной", "bilingual", "fluent", "свободн")
