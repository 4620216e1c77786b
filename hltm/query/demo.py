"""The query step of `hltm demo`: one cited question asked by one seat, as a printable summary."""

from __future__ import annotations

from hltm.query.engine import QueryEngine, QueryResult
from hltm.query.scope import MEMORY_TABLE, Identity
from hltm.settings import Settings
from hltm.warehouse import connect, table_exists

DEMO_QUESTION = "Where do I usually hire, and in which work mode?"


def first_seat(settings: Settings) -> str | None:
    """The first seat (by id) that has a memory node."""
    with connect(settings.derived_db) as con:
        if not table_exists(con, MEMORY_TABLE):
            return None
        row = con.execute(
            f"SELECT seat_id FROM {MEMORY_TABLE} WHERE level = 'seat' ORDER BY seat_id LIMIT 1"
        ).fetchone()
    return row[0] if row else None


def format_result(result: QueryResult) -> str:
    cost = result.cost
    cited = ", ".join(result.citations) or "none"
    lines = [
        f"{result.identity} asked “{result.question}”",
        f"  answer:    {result.answer}",
        f"  status:    {result.status}",
        f"  citations: {cited}"
        + (
            f"   (dropped {len(result.dropped_citations)} invalid)"
            if result.dropped_citations
            else ""
        ),
    ]
    if result.nearest:
        lines.append(f"  nearest:   {', '.join(result.nearest)}   (a hint, not support)")
    lines += [
        f"  cost:      {cost.llm_calls} LLM calls, {cost.prompt_tokens}+{cost.completion_tokens}"
        f" tokens (o200k_base), {cost.non_llm_ms:.0f} ms excluding LLM time"
        f" (embedding {cost.embed_ms:.0f}, retrieval {cost.retrieval_ms:.0f})",
    ]
    return "\n".join(lines)


def demo_question(
    settings: Settings, seat_id: str | None = None, question: str = DEMO_QUESTION
) -> str:
    """Ask one cited question for a seat (the first seat with memory unless given); return a
    printable summary. The query is logged like any other (channel 'demo')."""
    seat = seat_id or first_seat(settings)
    if seat is None:
        return "no seat memory yet: build the memory tree first"
    engine = QueryEngine(settings)
    engine.warm_up()  # model loading is start-up cost, not the query's latency
    result = engine.ask(Identity("seat", seat), question, channel="demo")
    return format_result(result)
