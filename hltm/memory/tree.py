"""The ownership tree, node versions, and the diff that says which nodes a change touches.

Versions are content hashes. A project's version hashes its placement, its source fingerprint,
the prompt versions, the hints version, the model and the build settings. A seat's or contract's
version hashes its own record and the `(child id, child version)` list it is built from. So the
version of every node in the desired tree can be computed from the sources alone — no LLM — and a
node needs rebuilding exactly when its desired version differs from the stored one. A change to a
project changes its version, hence its seat's, hence its contract's: the affected set is always
the changed leaves plus their ancestor chains (old and new parents for a move, since the old
parent's child list changed too), and untouched branches keep their versions.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hltm.memory.inputs import SourceTree
from hltm.memory.models import CHILD_LEVEL, LEVELS, Placement, canonical_json

VERSION_CHARS = 20


@dataclass(frozen=True)
class VersionConfig:
    """Everything besides the data that decides what a node's memory is."""

    prompt_versions: tuple[tuple[str, str], ...]
    hints_version: str
    model: str
    support_threshold: float
    min_support: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompts": [list(p) for p in self.prompt_versions],
            "hints": self.hints_version,
            "model": self.model,
            "support_threshold": self.support_threshold,
            "min_support": self.min_support,
        }

    @cached_property
    def canonical(self) -> str:
        """`canonical_json(as_dict())`, serialised once (every node's version hashes it)."""
        return canonical_json(self.as_dict())

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.canonical.encode()).hexdigest()[:12]


def _hash(parts: list[Any], config: VersionConfig) -> str:
    """The version of `[*parts, config]`: its canonical JSON, with the config's serialisation
    spliced in (a compact JSON list is its items joined by commas in brackets)."""
    body = f"{canonical_json(parts)[:-1]},{config.canonical}]"
    return hashlib.sha1(body.encode()).hexdigest()[:VERSION_CHARS]


def _placement_parts(p: Placement) -> list[Any]:
    return [p.node_id, p.level, p.contract_id, p.seat_id, p.project_id, p.parent_id, p.label]


def leaf_version(placement: Placement, fingerprint: str, config: VersionConfig) -> str:
    return _hash(["leaf", *_placement_parts(placement), fingerprint], config)


def parent_version(
    placement: Placement,
    fingerprint: str,
    children: Iterable[tuple[str, str]],
    config: VersionConfig,
) -> str:
    kids = [list(c) for c in sorted(children)]
    return _hash(["parent", *_placement_parts(placement), fingerprint, kids], config)


@dataclass(frozen=True)
class Tree:
    """The desired tree: nodes, their children, and every node's desired version."""

    nodes: Mapping[str, Placement]
    fingerprints: Mapping[str, str]
    children: Mapping[str, tuple[str, ...]]
    versions: Mapping[str, str]

    @classmethod
    def from_sources(cls, source: SourceTree, config: VersionConfig) -> Tree:
        nodes = {nid: n.placement for nid, n in source.nodes.items()}
        fingerprints = {nid: n.fingerprint for nid, n in source.nodes.items()}
        kids: dict[str, list[str]] = defaultdict(list)
        for nid, placement in nodes.items():
            if placement.parent_id is not None and placement.parent_id in nodes:
                kids[placement.parent_id].append(nid)
        children = {nid: tuple(sorted(kids.get(nid, []))) for nid in nodes}
        versions: dict[str, str] = {}
        for level in LEVELS:
            for nid in sorted(n for n, p in nodes.items() if p.level == level):
                placement = nodes[nid]
                if level == "project":
                    versions[nid] = leaf_version(placement, fingerprints[nid], config)
                else:
                    versions[nid] = parent_version(
                        placement,
                        fingerprints[nid],
                        [(c, versions[c]) for c in children[nid]],
                        config,
                    )
        return cls(nodes, fingerprints, children, versions)

    def ids(self, level: str) -> list[str]:
        return sorted(n for n, p in self.nodes.items() if p.level == level)

    def ancestors(self, node_id: str) -> list[str]:
        out = []
        parent = self.nodes[node_id].parent_id if node_id in self.nodes else None
        while parent is not None and parent in self.nodes:
            out.append(parent)
            parent = self.nodes[parent].parent_id
        return out


@dataclass(frozen=True)
class BuiltNode:
    """What the memory store holds for a node (enough to diff and to find old parents)."""

    node_id: str
    level: str
    version: str
    contract_id: str
    parent_id: str | None


@dataclass
class Plan:
    """Nodes to rebuild per level (leaves first) and nodes to delete, all sorted."""

    projects: list[str] = field(default_factory=list)
    seats: list[str] = field(default_factory=list)
    contracts: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)

    def level(self, level: str) -> list[str]:
        return {"project": self.projects, "seat": self.seats, "contract": self.contracts}[level]

    @property
    def rebuilds(self) -> list[str]:
        return [*self.projects, *self.seats, *self.contracts]

    @property
    def empty(self) -> bool:
        return not (self.rebuilds or self.deletes)

    def as_config(self) -> dict[str, list[str]]:
        return {
            "projects": list(self.projects),
            "seats": list(self.seats),
            "contracts": list(self.contracts),
            "deletes": list(self.deletes),
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Iterable[str]]) -> Plan:
        return cls(
            **{k: sorted(set(config.get(k, []))) for k in ("projects", "seats", "contracts")},
            deletes=sorted(set(config.get("deletes", []))),
        )

    def run_key(self, config_digest: str = "") -> str:
        """Deterministic (never Python's salted `hash()`): same change set → same key."""
        body = canonical_json({"plan": self.as_config(), "config": config_digest})
        return hashlib.sha1(body.encode()).hexdigest()

    def describe(self) -> str:
        return (
            f"{len(self.projects)} project(s), {len(self.seats)} seat(s), "
            f"{len(self.contracts)} contract(s) to rebuild; {len(self.deletes)} node(s) to delete"
        )


def close_over_ancestors(
    tree: Tree, built: Mapping[str, BuiltNode], touched: Iterable[str], deletes: Iterable[str]
) -> Plan:
    """The plan for some touched nodes: each one present in the tree, plus every ancestor —
    under its current parent and under the parent it was built with (a move rebuilds both) —
    and the deletion of every touched node the tree no longer has."""
    rebuild: set[str] = set()
    gone: set[str] = {d for d in deletes if d not in tree.nodes}
    frontier = [*touched, *deletes]
    seen: set[str] = set()
    while frontier:
        nid = frontier.pop()
        if nid in seen:
            continue
        seen.add(nid)
        if nid in tree.nodes:
            rebuild.add(nid)
        elif nid in built:
            gone.add(nid)
        parents = set()
        if nid in tree.nodes and tree.nodes[nid].parent_id:
            parents.add(tree.nodes[nid].parent_id)
        if nid in built and built[nid].parent_id:
            parents.add(built[nid].parent_id)
        frontier.extend(p for p in sorted(parents, key=str) if p is not None)
    by_level: dict[str, list[str]] = {level: [] for level in LEVELS}
    for nid in sorted(rebuild):
        by_level[tree.nodes[nid].level].append(nid)
    return Plan(by_level["project"], by_level["seat"], by_level["contract"], sorted(gone))


def plan_changes(tree: Tree, built: Mapping[str, BuiltNode]) -> Plan:
    """Everything whose stored version is not the desired one, plus deletions, with ancestors."""
    stale = [
        nid
        for nid, version in tree.versions.items()
        if nid not in built or built[nid].version != version
    ]
    removed = [nid for nid in built if nid not in tree.nodes]
    return close_over_ancestors(tree, built, stale, removed)


def plan_contracts(tree: Tree, built: Mapping[str, BuiltNode], contracts: Iterable[str]) -> Plan:
    """The refresh of some contracts' subtrees (a run over those memory partitions): every node
    of theirs whose stored version is not the one its sources give, and every node stored under
    them that the sources no longer have (a moved node belongs to its new contract; the old
    contract's nodes it left change version too, so they are in the plan of the old one)."""
    wanted = set(contracts)
    stale = [
        nid
        for nid, version in tree.versions.items()
        if tree.nodes[nid].contract_id in wanted
        and (nid not in built or built[nid].version != version)
    ]
    gone = sorted(n for n, b in built.items() if b.contract_id in wanted and n not in tree.nodes)
    by_level: dict[str, list[str]] = {level: [] for level in LEVELS}
    for nid in sorted(stale):
        by_level[tree.nodes[nid].level].append(nid)
    return Plan(by_level["project"], by_level["seat"], by_level["contract"], gone)


def contracts_of(plan: Plan, tree: Tree, built: Mapping[str, BuiltNode]) -> list[str]:
    """The contracts (memory partitions) a plan touches: each rebuilt node's, and each deleted
    or moved node's former one."""
    nodes = [*plan.rebuilds, *plan.deletes]
    return sorted(
        {tree.nodes[n].contract_id for n in nodes if n in tree.nodes}
        | {built[n].contract_id for n in nodes if n in built}
    )


def child_level(level: str) -> str:
    return CHILD_LEVEL[level]
