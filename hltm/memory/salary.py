"""Salaries stated in free text (English and Russian), read into a structured value.

A salary is an amount or a range, a currency and (when stated) a period: `$18-20/hour`,
`Salary: $140,000- $175,000`, `от 290 000 ₽ до 400 000 ₽ в месяц`, `$45K–$65K annually`. The
facet value is one canonical spelling of that structure (`18-20 USD per hour`,
`290,000-400,000 RUB per month`, `from 80,000 USD per year`), so values from different texts,
languages and spellings compare and aggregate as equal. Money that is not pay (a sign-on bonus,
company revenue, a life-insurance amount) is skipped by the words around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CURRENCY_CODES = {
    "$": "USD", "usd": "USD", "us$": "USD", "долл": "USD", "dollars": "USD",
    "€": "EUR", "eur": "EUR", "евро": "EUR", "euro": "EUR", "euros": "EUR",
    "£": "GBP", "gbp": "GBP",
    "₽": "RUB", "rub": "RUB", "rur": "RUB", "руб": "RUB", "р": "RUB",
    "₸": "KZT", "kzt": "KZT", "тенге": "KZT",
    "cad": "CAD", "c$": "CAD", "aud": "AUD", "a$": "AUD", "chf": "CHF", "inr": "INR", "₹": "INR",
}  # fmt: skip
_SYMBOL = r"(?:US\$|C\$|A\$|[$€£₽₸₹])"
_CODE = (
    r"(?:USD|EUR|GBP|RUB|RUR|KZT|CAD|AUD|CHF|INR|руб(?:\.|лей|ля|ль)?|р\.|долл\w*|евро|тенге"
    r"|dollars|euros?)"
)
_NUMBER = r"\d{1,3}(?:(?:[ \u00a0\u202f]|,(?=\d{3}))\d{3})+(?:[.,]\d{1,2})?|\d+(?:[.,]\d{1,2})?"
_SCALE = r"(?:\s?(?:k|K|тыс\.?|тысяч\w*|thousand|млн|mln|million|M)(?![\w]))?"
_AMOUNT = (
    rf"(?:{_SYMBOL}\s?|(?-i:USD|EUR|GBP|CAD|AUD|CHF|RUB)\s)?(?:{_NUMBER}){_SCALE}"
    rf"(?:\s?{_SYMBOL}|\s?{_CODE}(?!\w))?"
)
# A period may follow each end ("$80,000/year - $120,000/year"); "and" joins the ends only
# after "between" ("between $35,000 and $85,000").
_MID_PERIOD = (
    r"(?:\s?/\s?(?:hour|hr|year|yr|month|mo|week|wk)|\s(?:per|an?)\s(?:hour|year|month|week))"
)
_RANGE = re.compile(
    rf"(?P<lead>(?:from|starting at|up to|upto|between|от|до)\s)?(?P<a>{_AMOUNT})"
    rf"(?:(?P<mid>{_MID_PERIOD})?\s?(?P<sep>-|–|—|to|до|and)\s?(?P<b>{_AMOUNT}))?",
    re.IGNORECASE,
)
_PERIODS = (
    ("hour", r"hour\w*|hrs?(?-i:(?![a-z]))|час\w*"),
    ("day", r"day\b|daily|день|дн\w*|смен\w*"),
    ("week", r"week\w*|wk(?-i:(?![a-z]))|недел\w*"),
    ("month", r"month\w*|mo(?-i:(?![a-z]))|месяц\w*|мес\b\.?"),
    ("year", r"year\w*|yr(?-i:(?![a-z]))|annum|annual\w*|год\w*"),
)
_PERIOD_AFTER = re.compile(
    r"^\s*(?:\+\s*)?(?:(?:per|a|an|each|/|в|за)\s?)?(?P<p>"
    + "|".join(f"(?:{body})" for _, body in _PERIODS)
    + ")",
    re.IGNORECASE,
)
_PERIOD_WORD = re.compile(
    r"(?P<p>hourly|annual(?:ly)?|yearly|monthly|weekly|daily|per hour|per year|per month)",
    re.IGNORECASE,
)
PAY_CONTEXT = re.compile(
    r"salary|compensation|\bpay\b|\bpaid\b|wage|\brate\b|\bbase\b|earn|\bctc\b|\bbudget|"
    r"\brange\b|\bgross\b|\bnet\b|зарплат\w*|заработн\w*|оклад\w*|доход\w*|з/п|\bзп\b|вилк\w*|"
    r"компенсац\w*|бюджет\w*|ставк\w*|на руки|вычета|вознагражден\w*|платим|выплат\w*",
    re.IGNORECASE,
)
# Money that is not the pay of the role: words right after or right before the amount.
# (after an optional period: "$500-$1000+ a month in tips")
_NOT_PAY_AFTER = re.compile(
    r"^\W{0,3}(?:\+\s*)?(?:(?:per|a|an|each|/)\s?(?:hour|day|week|month|year)\w*\s)?"
    r"(?:billion|b\b|bn\b|trillion|sign[- ]?on|signing|bonus|referral|in tips|life insurance|"
    r"tuition|(?:\w+ )?(?:stipend|allowance|reimbursement|discount|credit)|relocation|"
    r"in (?:client )?assets|in revenue|in sales|in funding|in gifts|in donations|млрд|бонус|"
    r"премия|стипенди|компенсаци\w+ (?:питания|проезда|фитнеса|спорта))",
    re.IGNORECASE,
)
_NOT_PAY_BEFORE = re.compile(
    r"(?:bonus|sign[- ]?on|referral|revenues?|sales of|assets|funding|raised|insurance|valued at|"
    r"stipend|allowance|reimbursement|benefit|discount|differential|gifts?|donations?|grants?|"
    r"tuition|премия|бонус|стипенди\w*|компенсаци\w+ (?:питания|проезда|фитнеса|спорта))"
    r"(?:\W{1,3}\w+){0,3}?\W{0,12}(?:of|up to|worth|over)?\W{0,3}$",
    re.IGNORECASE,
)
# No ordinary job pays this much in these currencies: "$1M to $50M range" is a deal size.
_MAX_PAY = {"USD": 1_500_000, "EUR": 1_500_000, "GBP": 1_500_000, "CAD": 2_000_000,
            "AUD": 2_000_000, "CHF": 2_000_000}  # fmt: skip


@dataclass(frozen=True)
class Salary:
    low: float | None
    high: float | None
    currency: str
    period: str  # "" when the text does not say

    @property
    def value(self) -> str:
        """The canonical facet spelling."""
        low, high = (_format(x) if x is not None else "" for x in (self.low, self.high))
        if low and high and low != high:
            amount = f"{low}-{high}"
        elif low and high:
            amount = low
        else:
            amount = f"from {low}" if low else f"up to {high}"
        return f"{amount} {self.currency}" + (f" per {self.period}" if self.period else "")


_CANONICAL = re.compile(
    r"^(?:(?P<from>from )|(?P<upto>up to ))?(?P<a>[\d,.]+)(?:-(?P<b>[\d,.]+))? (?P<cur>[A-Z]{3})"
    r"(?: per (?P<period>\w+))?$"
)


def parse_value(value: str) -> Salary | None:
    """The salary a canonical spelling (`Salary.value`) stands for."""
    match = _CANONICAL.match(value.strip())
    if not match:
        return None
    a = float(match.group("a").replace(",", ""))
    b = float(match.group("b").replace(",", "")) if match.group("b") else None
    if match.group("from"):
        low, high = a, None
    elif match.group("upto"):
        low, high = None, a
    else:
        low, high = a, b if b is not None else a
    return Salary(low, high, match.group("cur"), match.group("period") or "")


def _format(number: float) -> str:
    return f"{number:,.2f}".rstrip("0").rstrip(".") if number % 1 else f"{int(number):,}"


def _number(text: str) -> tuple[float, str | None] | None:
    """(amount, currency) of one money token such as `$45K`, `290 000 ₽`, `18.00`."""
    match = re.search(_NUMBER, text)
    if not match:
        return None
    raw = re.sub(r"[ \u00a0\u202f]", "", match.group(0))
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", raw):
        raw = raw.replace(",", "")
    raw = raw.replace(",", ".")
    try:
        amount = float(raw)
    except ValueError:
        return None
    rest = text[match.end() :].strip().casefold()
    if re.match(r"(?:k|тыс|тысяч|thousand)", rest):
        amount *= 1_000
    elif re.match(r"(?:млн|mln|million|m\b)", rest):
        amount *= 1_000_000
    return amount, _currency(text)


def _currency(text: str) -> str | None:
    for match in re.finditer(rf"{_SYMBOL}|{_CODE}", text, re.IGNORECASE):
        token = match.group(0).casefold().rstrip(".")
        for key in (token, token[:4], token[:3], token[:1]):
            if key in _CURRENCY_CODES:
                return _CURRENCY_CODES[key]
    return None


def _period(after: str, line: str) -> str:
    match = _PERIOD_AFTER.match(after)
    word = match.group("p") if match else None
    if word is None:
        stated = _PERIOD_WORD.search(line)
        word = stated.group("p") if stated else None
    if word is None:
        return ""
    for name, body in _PERIODS:
        if re.match(body, word.split()[-1], re.IGNORECASE):
            return name
    if word.casefold().startswith(("hourly",)):
        return "hour"
    return ""


def find_salaries(text: str) -> list[tuple[Salary, int]]:
    """Every pay amount or range in `text` with a currency, as (salary, offset), in text order.

    An amount counts when it carries a currency (on either end of a range) and either the line
    talks about pay or a period follows it; amounts that name revenue, bonuses or insurance do
    not count. A bare second end (`$18-34`) takes the first end's currency.
    """
    out: list[tuple[Salary, int]] = []
    for line_match in re.finditer(r"[^\n]+", text):
        line = line_match.group(0)
        matches = list(_RANGE.finditer(line))
        for index, match in enumerate(matches):
            # A period word belongs to the nearest amount: "$42,000 per year for Center, $25-27
            # for hourly assignments", "$55,000 - $65,000 … a monthly $350 stipend".
            low_bound, high_bound = 0, len(line)
            if index:  # past the previous amount and the period that follows it
                previous = matches[index - 1].end()
                own = _PERIOD_AFTER.match(line[previous:])
                low_bound = previous + (own.end() if own else 0)
            if index + 1 < len(matches):  # short of the next amount and a period word before it
                ahead = line[: matches[index + 1].start()]
                high_bound = len(re.sub(rf"(?:{_PERIOD_WORD.pattern})\W*$", "", ahead, flags=re.I))
            lead = (match.group("lead") or "").strip().casefold()
            first = _number(match.group("a"))
            joined = match.group("b") and (
                match.group("sep").casefold() != "and" or lead == "between"
            )
            second = _number(match.group("b")) if joined else None
            if first is None:
                continue
            if (
                second
                and first[0] < 1000 <= second[0]
                and not re.search(r"[\d][,.\s]\d{3}|[kKтмmM]", match.group("a"))
                and second[0] / 1000 <= first[0] * 10
                and first[0] * 1000 <= second[0]
            ):
                first = (first[0] * 1000, first[1])  # "$40-45,000": the thousands are shared
            currency = first[1] or (second[1] if second else None)
            if currency is None:
                continue
            end = match.end() if joined else match.end("a")
            after = line[end : end + 40]
            before = line[max(0, match.start() - 40) : match.start()]
            if _NOT_PAY_AFTER.match(after) or _NOT_PAY_BEFORE.search(before):
                continue
            period = _period(
                match.group("mid") or after,
                line[max(low_bound, match.start() - 60) : min(high_bound, end + 60)],
            )
            window = line[max(0, match.start() - 80) : match.end() + 20]
            # "от 80 000 до 120 000 руб.": a range with both ends and a currency is pay
            ru_range = lead == "от" and joined and match.group("sep").casefold() == "до"
            if not (period or ru_range or PAY_CONTEXT.search(window)):
                continue
            low, high = first[0], second[0] if second else None
            if high is None:
                if lead in ("up to", "upto", "до"):
                    low, high = None, low
                elif lead not in ("from", "starting at", "от"):
                    high = low
            elif high < low:
                continue  # "5-3" is not a range of pay
            top = max(x for x in (low, high) if x is not None)
            if top < 1 or top > _MAX_PAY.get(currency, float("inf")):
                continue
            out.append((Salary(low, high, currency, period), line_match.start() + match.start()))
    return out
