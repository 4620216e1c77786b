"""Identities and the permitted subtree they open: `T_v = {v} ∪ Desc(v)`.

A query arrives with a business identity — a contract, a seat or a project id — and may only ever
read the memory of the subtree rooted at that node. The subtree is not computed by walking
children: every stored node and every vector item carries its full ownership path
(`contract_id`, `seat_id`, `project_id`), so the subtree is one equality filter on the narrowest
id, always ANDed with the contract id (which also picks the contract's own Chroma collection, a
second wall):

* contract c → `contract_id = c`                         (the contract, its seats, their projects)
* seat s     → `contract_id = c AND seat_id = s`          (the seat and its projects)
* project p  → `contract_id = c AND seat_id = s AND project_id = p`   (the project alone)

A seat's filter excludes its contract node (whose `seat_id` is empty), a project's excludes its
seat: a higher-level node never widens anyone's access.

`Scope` renders that filter for Chroma (`where`) and for DuckDB (a parameterised predicate), and
checks a row or an item's metadata against it. A request derives its permitted set from it once
(`hltm.query.permitted`); only `hltm.query.boundary` reads memory, confined to that set.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

import duckdb

from hltm.warehouse import table_exists

Level = Literal["contract", "seat", "project"]
LEVELS: tuple[Level, ...] = ("contract", "seat", "project")
DEPTH = {"contract": 0, "seat": 1, "project": 2}
MEMORY_TABLE = "memory_nodes"  # the memory tree's DuckDB table (layout fixed by hltm.memory)


class ScopeError(ValueError):
    """An identity that cannot be resolved unambiguously, or a narrowing that would widen."""


@dataclass(frozen=True)
class Identity:
    """Who is asking: one contract, seat or project (raw source id, not the node id)."""

    level: Level
    id: str

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ScopeError(f"unknown identity level {self.level!r}: expected {LEVELS}")
        if not self.id or not self.id.strip():
            raise ScopeError("an identity needs a non-empty id")

    @property
    def node_id(self) -> str:
        return f"{self.level}:{self.id}"

    def __str__(self) -> str:
        return self.node_id

    @classmethod
    def parse(cls, text: str) -> Identity:
        """`seat:c01-s01` (also `seat_urn:…`, `seat=…`)."""
        level, sep, ident = text.replace("=", ":", 1).partition(":")
        level = level.strip().lower().removesuffix("_urn").removesuffix("_id")
        if not sep:
            raise ScopeError(f"not an identity: {text!r} (expected e.g. 'seat:<id>')")
        return cls(level, ident.strip())  # type: ignore[arg-type]


@dataclass(frozen=True)
class Scope:
    """The resolved ownership path of an identity; `contract_id is None` means nothing to read."""

    identity: Identity
    contract_id: str | None
    seat_id: str | None = None
    project_id: str | None = None

    @property
    def empty(self) -> bool:
        return self.contract_id is None

    @property
    def root_node_id(self) -> str:
        return self.identity.node_id

    @property
    def level(self) -> Level:
        return self.identity.level

    def _conditions(self) -> list[tuple[str, str]]:
        if self.contract_id is None:
            raise ScopeError(f"{self.identity} resolves to no memory: nothing may be read")
        conditions = [("contract_id", self.contract_id)]
        if self.level in ("seat", "project"):
            conditions.append(("seat_id", str(self.seat_id)))
        if self.level == "project":
            conditions.append(("project_id", str(self.project_id)))
        return conditions

    def narrowest_id(self) -> tuple[str, str]:
        """The narrowest ownership column of the subtree and its value (`seat_id`, `s`)."""
        return self._conditions()[-1]

    def chroma_where(self, **extra: str | list[str]) -> dict[str, Any] | None:
        """The subtree filter for Chroma's `where`, ANDed with `extra` equalities (or `$in`);
        None when nothing is left to filter.

        It names the narrowest id only (`seat_id = s`, not also `contract_id = c`): the query
        runs inside the contract's own collection, which is the contract condition, so a
        contract's own scope adds no clause at all. Chroma's filter cost grows with how many
        items a clause matches, and a contract clause matches the whole collection (measured on
        3,000 items: 28 ms with it, 2 ms without). Every hit is still checked against all three
        ids of its node's stored row (`ScopedMemory.search`).
        """
        clauses: list[dict[str, Any]] = []
        if self.level != "contract":
            clauses.append(dict([self.narrowest_id()]))
        for key, value in extra.items():
            if isinstance(value, list | tuple):
                values = sorted(set(value))
                clauses.append({key: values[0]} if len(values) == 1 else {key: {"$in": values}})
            else:
                clauses.append({key: value})
        if not clauses:
            return None
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

    def sql_predicate(self, alias: str = "") -> tuple[str, list[str]]:
        """The subtree filter as `(sql, params)` over `memory_nodes` columns."""
        prefix = f"{alias}." if alias else ""
        conditions = self._conditions()
        sql = " AND ".join(f"{prefix}{column} = ?" for column, _ in conditions)
        return f"({sql})", [value for _, value in conditions]

    def admits(self, contract_id: Any, seat_id: Any, project_id: Any) -> bool:
        """Whether a node with this ownership path lies inside the subtree."""
        if self.contract_id is None or contract_id != self.contract_id:
            return False
        if self.level in ("seat", "project") and (seat_id or None) != self.seat_id:
            return False
        return not (self.level == "project" and (project_id or None) != self.project_id)

    def admits_metadata(self, meta: dict[str, Any]) -> bool:
        return self.admits(meta.get("contract_id"), meta.get("seat_id"), meta.get("project_id"))

    def contains(self, other: Scope) -> bool:
        """Whether `other`'s whole subtree lies inside this one (a narrowing, never a widening)."""
        if self.empty or other.empty or DEPTH[other.level] < DEPTH[self.level]:
            return False
        return self.admits(other.contract_id, other.seat_id, other.project_id)

    def describe(self) -> str:
        if self.empty:
            return f"{self.identity} (no memory)"
        path = [f"contract {self.contract_id}"]
        if self.seat_id:
            path.append(f"seat {self.seat_id}")
        if self.project_id:
            path.append(f"project {self.project_id}")
        return " / ".join(path)


_COLUMN = {"contract": "contract_id", "seat": "seat_id", "project": "project_id"}


def scope_from_paths(identity: Identity, paths: Collection[tuple[Any, ...]]) -> Scope:
    """The scope of `identity` from the distinct (contract, seat, project) paths of the nodes
    carrying its id. None: an empty scope (answered "no memory for this scope", which reveals
    nothing about other owners). An id found under two different ownership paths is refused:
    the data is inconsistent and guessing could widen access."""
    if not paths:
        return Scope(identity, None)
    if identity.level == "contract":
        return Scope(identity, identity.id)
    if identity.level == "seat":
        seats = {(c, s) for c, s, _ in paths}
        if len(seats) != 1:
            raise ScopeError(f"{identity} appears under {len(seats)} ownership paths; refused")
        ((contract_id, seat_id),) = seats
        return Scope(identity, contract_id, seat_id)
    projects = {(c, s, p) for c, s, p in paths}
    if len(projects) != 1:
        raise ScopeError(f"{identity} appears under {len(projects)} ownership paths; refused")
    ((contract_id, seat_id, project_id),) = projects
    return Scope(identity, contract_id, seat_id, project_id)


def resolve_scope(con: duckdb.DuckDBPyConnection, identity: Identity) -> Scope:
    """Resolve an identity against the stored memory tree (see `scope_from_paths`)."""
    if not table_exists(con, MEMORY_TABLE):
        return Scope(identity, None)
    column = _COLUMN[identity.level]
    rows = con.execute(
        f"SELECT DISTINCT contract_id, seat_id, project_id FROM {MEMORY_TABLE} WHERE {column} = ?",
        [identity.id],
    ).fetchall()
    return scope_from_paths(identity, rows)


def narrow_to(scope: Scope, inner: Scope) -> Scope:
    """Allow `inner` only if it lies inside `scope` (a token never widens)."""
    if inner.identity == scope.identity:
        return scope
    if not scope.contains(inner):
        raise ScopeError(f"{inner.identity} is outside the permitted scope {scope.identity}")
    return inner


def narrow(con: duckdb.DuckDBPyConnection, scope: Scope, target: Identity) -> Scope:
    """Resolve `target` and allow it only if it lies inside `scope` (a token never widens)."""
    if target == scope.identity:
        return scope
    return narrow_to(scope, resolve_scope(con, target))
