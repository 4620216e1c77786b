"""Read the ownership tree and each project's inputs from the sources DuckDB.

A project's *fingerprint* is a hash of exactly the source columns its payload is built from
(project title and status; documents; recruiter actions; vacancies and their requirements), so a
change anywhere in them, and only there, changes the project's memory version. It is computed in
SQL, so the sensor can fingerprint every project cheaply without reading texts into Python.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import duckdb

from hltm.memory.models import Placement, node_id_for

_US = "chr(31)"  # unit separator between columns
_RS = "chr(30)"  # record separator between sections

_TREE_TABLES = ("contracts", "seats", "projects")
_INPUT_TABLES = ("project_documents", "recruiter_actions", "vacancies", "vacancy_requirements")


def _project_fingerprints(projects_where: str = "") -> str:
    """Every project's fingerprint, or those `projects_where` picks: then only their own rows
    are aggregated (the other projects' documents, actions and vacancies are never hashed)."""
    mine = "WHERE project_id IN (SELECT project_id FROM p)" if projects_where else ""
    mine_v = "WHERE v.project_id IN (SELECT project_id FROM p)" if projects_where else ""
    my_vacancies = (
        "WHERE vacancy_id IN (SELECT vacancy_id FROM vacancies"
        " WHERE project_id IN (SELECT project_id FROM p))"
        if projects_where
        else ""
    )
    return f"""
WITH p AS (SELECT project_id, seat_id, title, status FROM projects {projects_where}),
d AS (
  SELECT project_id,
         string_agg(md5(concat_ws({_US}, document_id, kind, text)), '' ORDER BY document_id) AS h
  FROM project_documents {mine} GROUP BY project_id),
a AS (
  SELECT project_id,
         string_agg(md5(concat_ws({_US}, action_id, action, coalesce(reason, chr(0)))), ''
                    ORDER BY action_id) AS h
  FROM recruiter_actions {mine} GROUP BY project_id),
r AS (
  SELECT vacancy_id,
         string_agg(md5(concat_ws({_US}, requirement_id, text, CAST(mandatory AS VARCHAR))), ''
                    ORDER BY requirement_id) AS h
  FROM vacancy_requirements {my_vacancies} GROUP BY vacancy_id),
v AS (
  SELECT v.project_id,
         string_agg(md5(concat_ws({_US}, v.vacancy_id, CAST(v.version AS VARCHAR), v.title, v.text,
                                  coalesce(r.h, ''))), '' ORDER BY v.vacancy_id) AS h
  FROM vacancies v LEFT JOIN r USING (vacancy_id) {mine_v}
  GROUP BY v.project_id)
SELECT p.project_id, p.seat_id, p.title,
       md5(concat_ws({_RS}, p.title, p.status, coalesce(d.h, ''), coalesce(a.h, ''),
                     coalesce(v.h, ''))) AS fingerprint
FROM p
LEFT JOIN d USING (project_id) LEFT JOIN a USING (project_id) LEFT JOIN v USING (project_id)
"""


@dataclass(frozen=True)
class SourceNode:
    placement: Placement
    fingerprint: str


@dataclass(frozen=True)
class SourceTree:
    """Every contract, seat and project whose ownership path is complete, keyed by node id."""

    nodes: dict[str, SourceNode]

    @property
    def empty(self) -> bool:
        return not self.nodes


def _has_sources(con: duckdb.DuckDBPyConnection) -> bool:
    wanted = [*_TREE_TABLES, *_INPUT_TABLES]
    row = con.execute(
        "SELECT count(DISTINCT table_name) FROM duckdb_tables()"
        " WHERE table_name IN (SELECT unnest(?::VARCHAR[]))",
        [wanted],
    ).fetchone()
    return bool(row and row[0] == len(wanted))


def _project_placement(pid: str, sid: str, cid: str, title: str) -> Placement:
    return Placement(
        node_id=node_id_for("project", pid),
        level="project",
        contract_id=cid,
        seat_id=sid,
        project_id=pid,
        parent_id=node_id_for("seat", sid),
        label=title,
    )


def seat_label(recruiter_name: str | None, seat_id: str) -> str:
    return f"recruiter {recruiter_name}" if recruiter_name else f"seat {seat_id}"


def read_tree(
    con: duckdb.DuckDBPyConnection,
    project_ids: list[str] | None = None,
    contract_ids: list[str] | None = None,
) -> SourceTree:
    """The tree as the sources state it now: whole, only some projects (with full parents), or
    only the subtrees of some contracts (their seats and projects; nothing else is read).

    Orphans (a seat whose contract is missing, a project whose seat is missing) have no
    ownership path and so no node.
    """
    if not _has_sources(con):
        return SourceTree({})
    nodes: dict[str, SourceNode] = {}
    in_contracts = ""
    params: list[Any] = []
    if contract_ids is not None:
        in_contracts = " WHERE contract_id IN (SELECT unnest(?::VARCHAR[]))"
        params = [sorted(set(contract_ids))]
    contracts = {
        cid: (name, fp)
        for cid, name, fp in con.execute(
            "SELECT contract_id, name, md5(coalesce(name, '')) FROM contracts" + in_contracts,
            params,
        ).fetchall()
    }
    for cid, (name, fp) in contracts.items():
        placement = Placement(
            node_id_for("contract", cid), "contract", cid, None, None, None, name or cid
        )
        nodes[placement.node_id] = SourceNode(placement, fp)
    seats: dict[str, str] = {}
    for sid, cid, name, fp in con.execute(
        "SELECT seat_id, contract_id, recruiter_name, md5(coalesce(recruiter_name, ''))"
        " FROM seats" + in_contracts,
        params,
    ).fetchall():
        if cid not in contracts:
            continue
        seats[sid] = cid
        placement = Placement(
            node_id_for("seat", sid),
            "seat",
            cid,
            sid,
            None,
            node_id_for("contract", cid),
            seat_label(name, sid),
        )
        nodes[placement.node_id] = SourceNode(placement, fp)
    if project_ids is not None:
        query = _project_fingerprints("WHERE project_id IN (SELECT unnest(?::VARCHAR[]))")
        params = [sorted(project_ids)]
    elif contract_ids is not None:
        query = _project_fingerprints("WHERE seat_id IN (SELECT unnest(?::VARCHAR[]))")
        params = [sorted(seats)]
    else:
        query, params = _project_fingerprints(), []
    for pid, sid, title, fp in con.execute(query, params).fetchall():
        if sid not in seats:
            continue
        placement = _project_placement(pid, sid, seats[sid], title or pid)
        nodes[placement.node_id] = SourceNode(placement, fp)
    return SourceTree(nodes)


def source_children(
    con: duckdb.DuckDBPyConnection, parents: list[Placement]
) -> dict[str, list[str]]:
    """Node ids of each parent's children as the sources state them now."""
    out: dict[str, list[str]] = {p.node_id: [] for p in parents}
    if not parents or not _has_sources(con):
        return out
    seats = sorted(p.seat_id for p in parents if p.level == "seat" and p.seat_id)
    contracts = sorted(p.contract_id for p in parents if p.level == "contract")
    for pid, sid in con.execute(
        "SELECT project_id, seat_id FROM projects WHERE seat_id IN (SELECT unnest(?::VARCHAR[]))"
        " ORDER BY project_id",
        [seats],
    ).fetchall():
        out[node_id_for("seat", sid)].append(node_id_for("project", pid))
    for sid, cid in con.execute(
        "SELECT seat_id, contract_id FROM seats"
        " WHERE contract_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY seat_id",
        [contracts],
    ).fetchall():
        out[node_id_for("contract", cid)].append(node_id_for("seat", sid))
    return out


def read_project_inputs(
    con: duckdb.DuckDBPyConnection, project_ids: list[str]
) -> dict[str, dict[str, Any]]:
    """The LLM payload body of each project: its record, documents, vacancies and actions."""
    if not project_ids or not _has_sources(con):
        return {}
    wanted = sorted(set(project_ids))
    inputs: dict[str, dict[str, Any]] = {}
    for pid, title, status in con.execute(
        "SELECT project_id, title, status FROM projects"
        " WHERE project_id IN (SELECT unnest(?::VARCHAR[]))",
        [wanted],
    ).fetchall():
        inputs[pid] = {
            "node_id": node_id_for("project", pid),
            "project": {"project_id": pid, "title": title, "status": status},
            "documents": [],
            "vacancies": [],
            "actions": {"counts": {}, "with_reasons": []},
        }
    for doc_id, pid, kind, text in con.execute(
        "SELECT document_id, project_id, kind, text FROM project_documents"
        " WHERE project_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY project_id, document_id",
        [wanted],
    ).fetchall():
        if pid in inputs:
            inputs[pid]["documents"].append({"document_id": doc_id, "kind": kind, "text": text})
    requirements: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for req_id, vac_id, text, mandatory in con.execute(
        "SELECT r.requirement_id, r.vacancy_id, r.text, r.mandatory"
        " FROM vacancy_requirements r JOIN vacancies v USING (vacancy_id)"
        " WHERE v.project_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY r.requirement_id",
        [wanted],
    ).fetchall():
        requirements[vac_id].append(
            {"requirement_id": req_id, "text": text, "mandatory": bool(mandatory)}
        )
    for vac_id, pid, version, title, text in con.execute(
        "SELECT vacancy_id, project_id, version, title, text FROM vacancies"
        " WHERE project_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY project_id, vacancy_id",
        [wanted],
    ).fetchall():
        if pid in inputs:
            inputs[pid]["vacancies"].append(
                {
                    "vacancy_id": vac_id,
                    "version": version,
                    "title": title,
                    "text": text,
                    "requirements": requirements.get(vac_id, []),
                }
            )
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for action_id, pid, action, reason in con.execute(
        "SELECT action_id, project_id, action, reason FROM recruiter_actions"
        " WHERE project_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY project_id, action_id",
        [wanted],
    ).fetchall():
        if pid not in inputs:
            continue
        counts[pid][action] += 1
        if reason and reason.strip():
            inputs[pid]["actions"]["with_reasons"].append(
                {"action_id": action_id, "action": action, "reason": reason}
            )
    for pid, counter in counts.items():
        inputs[pid]["actions"]["counts"] = dict(sorted(counter.items()))
    return inputs


def sources_watermark(con: duckdb.DuckDBPyConnection) -> str:
    """A cheap digest that changes whenever any row the memory tree reads changes."""
    if not _has_sources(con):
        return "no-sources"
    parts = []
    for table in (*_TREE_TABLES, *_INPUT_TABLES):
        columns = {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
            ).fetchall()
        }
        digest = "content_hash" if "content_hash" in columns else f"md5(CAST({table} AS VARCHAR))"
        row = con.execute(
            f"SELECT count(*), md5(coalesce(string_agg({digest}, ',' ORDER BY {digest}), ''))"
            f" FROM {table}"
        ).fetchone()
        parts.append(f"{table}:{row[0]}:{row[1]}" if row else f"{table}:0")
    return "|".join(parts)
