"""The local search context (and the basic one): a question's entities, their
neighbourhood, the relationships among them, their communities' reports and the text
units of a retrieval mode, verbalized and packed into a token budget.

- **local**: the question's linked entities (or, when none links, the entities of the
  best text units) and their 1-hop neighbours ranked by connection weight to the seeds,
  then PageRank, then degree; the relationships among them (seed-seed first, then by
  weight and combined degree); the reports of the communities holding them (most members
  first); the text units of a retrieval mode (``bridge`` by default, the best mode of
  bench/eval_qa.py), then the seeds' own units; all packed by
  :func:`kgloom.query.context_builder.context.pack_context` with the given shares.
- **basic** (``direct`` search): the ``vector`` retrieval's text units, the whole budget
  theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kgloom.core.builds import IndexFilesMissingError
from kgloom.query.context_builder.context import (
    Context,
    ContextItem,
    Section,
    TokenCounter,
    pack_context,
    verbalize_entity,
    verbalize_relationship,
    verbalize_report,
    verbalize_text_unit,
)
from kgloom.query.context_builder.search_tables import SearchTables
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval import RetrievalResult, RetrievalSettings, retrieve
from kgloom.query.retrieval import vector as vector_mode


def context_sources(context: Context) -> dict[str, dict[str, str]]:
    """ref -> {kind, id, text} of every item of ``context``: what a citation points to."""
    return {x.ref: {"kind": x.kind, "id": x.source_id, "text": x.text}
            for x in context.items}


def unit_item(index: QueryIndex, row: int, score: float) -> ContextItem:
    """Text unit ``row`` as a context item ``[T<human_readable_id>] (document) text``."""
    units, tables = index.units, index.tables
    uid = units.ids[row]
    ref = f"T{tables.unit_number.get(uid, row)}"
    return ContextItem(ref, "text_units", uid, verbalize_text_unit(
        ref, units.texts[row], units.document_titles[row]), score)


def build_basic_context(index: QueryIndex, question: str, budget: int, counter: TokenCounter,
                        top_k: int, settings: RetrievalSettings, info: dict[str, Any]
                        ) -> tuple[Context, dict[str, dict[str, str]]]:
    """Plain vector RAG: the ``vector`` mode's ``top_k`` units, the whole budget theirs.

    Returns:
        (the context, its sources); ``info["retrieval"]`` says what was retrieved.
    """
    res = vector_mode.retrieve(index, question, top_k, settings)
    rows = [index.units.row_of[u] for u in res.text_units["id"].to_list()]
    items = [unit_item(index, r, s) for r, s in zip(rows, res.text_units["score"].to_list())]
    info["retrieval"] = {"mode": "vector", "top_k": top_k,
                         "best_similarity": res.info.get("best_similarity"),
                         "units": res.text_units["id"].to_list()}
    context = pack_context([Section("text_units", items, 1.0)], budget, counter)
    return context, context_sources(context)


@dataclass(frozen=True)
class LocalContextBuilder:
    """Builds local search contexts over one index (module doc).

    Attributes:
        index: the index (its :attr:`~kgloom.query.query_index.QueryIndex.tables` loaded).
        counter: the token counter of the budget.
        settings: the retrieval settings of the text units' retrieval.
        retrieval_mode: the retrieval mode that ranks the text units.
        top_k: text units asked of the retrieval.
        max_neighbors: neighbour entities considered around the seeds.
        seed_units: when no entity links, the entities of this many best units seed.
        shares: (section, share of the budget) in packing order.
    """

    index: QueryIndex
    counter: TokenCounter
    settings: RetrievalSettings
    retrieval_mode: str
    top_k: int
    max_neighbors: int
    seed_units: int
    shares: tuple[tuple[str, float], ...]

    @property
    def tables(self) -> SearchTables:
        """The index's search tables."""
        return self.index.tables

    def build_context(self, question: str, budget: int, info: dict[str, Any]
                      ) -> tuple[Context, dict[str, dict[str, str]]]:
        """The local context of ``question`` within ``budget`` tokens, and its sources;
        ``info`` gets ``retrieval`` and ``local`` (seeds, where they came from, how many
        neighbours), and ``graph`` when the index has no graph files.

        Raises:
            ValueError: a budget too small for one item.
        """
        idx, units = self.tables, self.index.units
        res = self._retrieve_units(question, info)
        linked = [(e, s) for e, s, m in zip(res.linked["entity_id"].to_list(),
                                            res.linked["score"].to_list(),
                                            res.linked["method"].to_list())
                  if m != "vector_hit"]
        seeds = [e for e, _ in sorted(linked, key=lambda x: -x[1])]
        seed_source = "linked"
        unit_rows = [units.row_of[u] for u in res.text_units["id"].to_list()]
        if not seeds:  # nothing links (another language, no name): the best units' entities
            seed_source = "best_units"
            for row in unit_rows[:self.seed_units]:
                seeds += [e for e in units.kg_node_ids[row] or [] if e not in seeds]
        seeds = [e for e in dict.fromkeys(seeds) if e in idx.entities]
        neighbours, rel_rows = self._neighbourhood(seeds)
        info["local"] = {"seeds": seeds, "seed_source": seed_source,
                         "neighbours": len(neighbours)}
        selected = seeds + neighbours
        entity_items = []
        for rank, e in enumerate(selected):
            row = idx.entities[e]
            ref = f"E{row['human_readable_id']}"
            entity_items.append(ContextItem(ref, "entities", e, verbalize_entity(
                ref, row["title"], row["type"], row["description"], self.counter),
                float(len(selected) - rank)))
        rel_items = []
        for rank, rid in enumerate(rel_rows):
            row = idx.relationships.get(rid)
            if row is None:
                continue
            ref = f"R{row['human_readable_id']}"
            rel_items.append(ContextItem(ref, "relationships", rid, verbalize_relationship(
                ref, row["source"], row["target"], row["description"], row["kind"],
                row["weight"], self.counter), float(len(rel_rows) - rank)))
        report_items = self._reports(seeds, neighbours)
        items = [unit_item(self.index, row, s) for row, s in
                 zip(unit_rows, res.text_units["score"].to_list())]
        items += self._seed_units(seeds, set(selected), set(unit_rows))
        by_kind = {"entities": entity_items, "relationships": rel_items,
                   "reports": report_items, "text_units": items}
        sections = [Section(kind, by_kind[kind], share) for kind, share in self.shares]
        context = pack_context(sections, budget, self.counter)
        return context, context_sources(context)

    def _retrieve_units(self, question: str, info: dict[str, Any]) -> RetrievalResult:
        mode = self.retrieval_mode
        try:
            res = retrieve(self.index, question, mode, self.top_k, self.settings)
        except IndexFilesMissingError as exc:  # a vector-only index: no graph files
            res = vector_mode.retrieve(self.index, question, self.top_k, self.settings)
            info["graph"] = f"none: {exc}"
        info["retrieval"] = {"mode": mode, "used_mode": res.info.get("used_mode"),
                             "fallback": res.info.get("fallback"), "top_k": self.top_k,
                             "best_similarity": res.info.get("best_similarity"),
                             "units": res.text_units["id"].to_list()}
        return res

    def _neighbourhood(self, seeds: list[str]) -> tuple[list[str], list[str]]:
        """(neighbour entity ids, ranked; relationship ids among seeds and neighbours,
        ranked). Neighbours: 1-hop, by summed edge weight to the seeds, then PageRank,
        then degree, then title; at most ``max_neighbors``. Relationships: both
        ends seeds first, then one end a seed, then the rest; each by weight, then
        combined degree."""
        tables = self.tables
        if not seeds or not tables.relationships:
            return [], []
        g = self.index.graph
        adj, node_of, ids = g.adj, g.node_of, g.entity_ids
        seed_nodes = {node_of[e] for e in seeds if e in node_of}
        strength: dict[int, float] = {}
        for s in seed_nodes:
            lo, hi = int(adj.indptr[s]), int(adj.indptr[s + 1])
            for nb, w in zip(adj.indices[lo:hi].tolist(), adj.weights[lo:hi].tolist()):
                if nb not in seed_nodes:
                    strength[nb] = strength.get(nb, 0.0) + w
        ents = tables.entities

        def key(n: int) -> tuple:
            row = ents.get(ids[n], {})
            return (-strength[n], -(row.get("pagerank") or 0.0), -(row.get("degree") or 0),
                    row.get("title") or "")

        near = sorted(strength, key=key)[:self.max_neighbors]
        chosen = seed_nodes | set(near)
        edges: dict[str, tuple] = {}
        for v in chosen:
            lo, hi = int(adj.indptr[v]), int(adj.indptr[v + 1])
            for nb, w, er in zip(adj.indices[lo:hi].tolist(), adj.weights[lo:hi].tolist(),
                                 adj.edge_rows[lo:hi].tolist()):
                if nb in chosen:
                    rid = g.relationship_ids[er]
                    ends = (v in seed_nodes) + (nb in seed_nodes)
                    row = tables.relationships.get(rid, {})
                    edges[rid] = (-ends, -w, -(row.get("combined_degree") or 0),
                                  row.get("human_readable_id") or 0)
        return [ids[n] for n in near], sorted(edges, key=lambda r: edges[r])

    def _reports(self, seeds: list[str], neighbours: list[str]) -> list[ContextItem]:
        """Reports of the communities holding seeds (weight 1) or neighbours (0.25), by
        summed weight, then finer level, then report rank; a report shared by a
        community and its unchanged copy one level down is listed once."""
        tree = self.tables.tree
        if tree is None:
            return []
        weight: dict[int, float] = {}
        for e, w in [(e, 1.0) for e in seeds] + [(e, 0.25) for e in neighbours]:
            for c in self.tables.communities_of.get(e, []):
                if c in tree.reports:
                    weight[c] = weight.get(c, 0.0) + w
        order = sorted(weight, key=lambda c: (-weight[c], -tree.reports[c].level,
                                              -tree.reports[c].rank, c))
        items, seen = [], set()
        for c in order:
            rep = tree.reports[c]
            if rep.report_key in seen:
                continue
            seen.add(rep.report_key)
            items.append(ContextItem(rep.ref, "reports", str(c),
                                     verbalize_report(rep.ref, rep.title, rep.summary),
                                     weight[c]))
        return items

    def _seed_units(self, seeds: list[str], selected: set[str],
                    skip: set[int]) -> list[ContextItem]:
        """The seeds' own text units not already retrieved, by the number of selected
        entities they mention (then position)."""
        units = self.index.units
        rows: dict[int, int] = {}
        for e in seeds:
            for row in units.mentions.get(e, []):
                if row not in skip:
                    rows[row] = len(selected & set(units.kg_node_ids[row] or []))
        order = sorted(rows, key=lambda row: (-rows[row], row))
        return [unit_item(self.index, row, float(rows[row])) for row in order]
