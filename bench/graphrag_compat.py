"""Drive Microsoft GraphRAG's query engine (graphrag 3.3) over a kgloom output folder through
the settings file shipped in compat/graphrag/settings.yaml (complete, written by
``kgloom graphrag-settings --output-dir data/output --root compat/graphrag --chat-url
http://127.0.0.1:8001/v1``; docs/graphrag.md); prints and saves JSON, and exits 1 when
something GraphRAG's local or global search needs is missing.

What it checks, with GraphRAG's own code (``graphrag.config.load_config``,
``graphrag.utils.api.get_embedding_store``, ``graphrag.query.indexer_adapters``, the
local and global context builders):

1. The settings load and every vector store of ``index_schema`` (entity_description,
   text_unit_text, community_full_content, mapped to kgloom's ``entities``, ``text_units``
   and ``community_reports`` LanceDB tables) opens, holds as many rows as its parquet
   table, has vectors of the configured size, and a row's own vector finds that row first
   (so report embeddings cannot come back empty silently).
2. Local search: ``LocalSearchMixedContext`` with the entity store maps a query to entities
   by vector and builds its context; the context must hold the reports, entities,
   relationships and sources tables. The query is the highest-degree entity's embedded
   text (``title: description``) and its vector the one stored for it: the text and
   vector the index's own embedder produced, since this venv has no sentence-transformers.
   Real queries must be embedded with the index's embedder (lancedb/embedder.json).
3. Global search: ``GlobalCommunityContext`` builds its report batches at every level of
   the hierarchy (no LLM call).

No GraphRAG LLM call is made (they need a chat model GraphRAG can reach); tokens are counted
with a whitespace tokenizer because GraphRAG's default (tiktoken) downloads its encodings.

Usage (graphrag has heavy dependencies, so use a separate venv):
    python3 -m venv /tmp/grvenv && /tmp/grvenv/bin/pip install graphrag==3.3.0 \
        -c requirements/constraints.txt
    /tmp/grvenv/bin/python bench/graphrag_compat.py --output-dir data/output

Skips (exit 0, "skipped" in the JSON) when the ``graphrag`` package is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stamp import save_result  # noqa: E402  (standard library only)

SETTINGS_DIR = ROOT / "compat" / "graphrag"
TABLES = ("entities", "relationships", "communities", "community_reports", "text_units")
LOCAL_CONTEXT_TABLES = ("reports", "entities", "relationships", "sources")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-dir", default=str(ROOT / "data" / "output"))
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "graphrag_compat.json"))
    args = ap.parse_args()
    save = Path(args.save)
    try:
        import numpy as np
        import pandas as pd
        from graphrag.config.load_config import load_config
        from graphrag.query.indexer_adapters import (
            read_indexer_communities,
            read_indexer_entities,
            read_indexer_relationships,
            read_indexer_reports,
            read_indexer_text_units,
        )
        from graphrag.query.structured_search.global_search.community_context import (
            GlobalCommunityContext,
        )
        from graphrag.query.structured_search.local_search.mixed_context import (
            LocalSearchMixedContext,
        )
        from graphrag.utils.api import get_embedding_store
        from graphrag_llm.tokenizer import Tokenizer
    except ImportError as exc:
        result = {"skipped": f"graphrag not importable: {exc}"}
        print(json.dumps(result))
        save_result(save, result, args)
        return

    class WhitespaceTokenizer(Tokenizer):
        def __init__(self, **kwargs):
            self.vocab: dict[str, int] = {}
            self.words: list[str] = []

        def encode(self, text: str) -> list[int]:
            ids = []
            for w in text.split():
                if w not in self.vocab:
                    self.vocab[w] = len(self.words)
                    self.words.append(w)
                ids.append(self.vocab[w])
            return ids

        def decode(self, tokens: list[int]) -> str:
            return " ".join(self.words[t] for t in tokens)

    out = Path(args.output_dir).resolve()
    problems: list[str] = []
    config = load_config(SETTINGS_DIR, {"vector_store": {"db_uri": str(out / "lancedb")}})
    read = {n: pd.read_parquet(out / f"{n}.parquet") for n in TABLES}
    rows_of = {"entities": len(read["entities"]), "text_units": len(read["text_units"]),
               "community_reports": len(read["community_reports"])}

    # 1. the vector stores, through graphrag's own factory
    stores, store_figures = {}, {}
    for name, schema in config.vector_store.index_schema.items():
        store = get_embedding_store(config=config.vector_store, embedding_name=name)
        if getattr(store, "document_collection", None) is None:
            problems.append(f"vector store {name}: LanceDB table {schema.index_name!r} missing")
            continue
        n = store.count()
        first = store.document_collection.search().limit(1).to_list()
        dim = len(first[0][schema.vector_field]) if first else 0
        hit = store.similarity_search_by_vector(first[0][schema.vector_field], k=1)[0] \
            if first else None
        store_figures[name] = {"table": schema.index_name, "rows": n,
                               "parquet_rows": rows_of.get(schema.index_name),
                               "vector_size": dim, "configured_size": schema.vector_size,
                               "self_query_top_hit": bool(hit and
                                                          hit.document.id == first[0]["id"])}
        if n == 0 or n != rows_of.get(schema.index_name):
            problems.append(f"vector store {name}: {n} rows, parquet has "
                            f"{rows_of.get(schema.index_name)}")
        if dim != schema.vector_size:
            problems.append(f"vector store {name}: vectors of {dim} dimensions, settings say "
                            f"{schema.vector_size}")
        if not store_figures[name]["self_query_top_hit"]:
            problems.append(f"vector store {name}: a row's own vector does not find it first")
        stores[name] = store

    entities = read_indexer_entities(read["entities"], read["communities"], community_level=None)
    relationships = read_indexer_relationships(read["relationships"])
    reports = read_indexer_reports(read["community_reports"], read["communities"],
                                   community_level=None)
    text_units = read_indexer_text_units(read["text_units"])
    result: dict = {
        "output_dir": str(out),
        "graphrag_loaded": {"entities": len(entities), "relationships": len(relationships),
                            "community_reports": len(reports), "text_units": len(text_units)},
        "vector_stores": store_figures}

    # 2. local search context, query mapped to entities by vector
    if "entity_description" in stores:
        top = read["entities"].sort_values("degree", ascending=False).iloc[0]
        query = f"{top['title']}: {top['description'] or ''}"
        stored = stores["entity_description"].document_collection.search().where(
            f"id = '{top['id']}'", prefilter=True).limit(1).to_list()[0]["vector"]

        class StoredVectorEmbedder:
            """graphrag's LLMEmbedding interface, answering with the index's own vector of
            the query text (see module doc)."""

            def embedding(self, input: list[str]):  # graphrag's parameter name
                class _R:
                    first_embedding: ClassVar = [float(x) for x in np.asarray(stored)]
                return _R()

        builder = LocalSearchMixedContext(
            entities=entities, entity_text_embeddings=stores["entity_description"],
            text_embedder=StoredVectorEmbedder(), text_units=text_units,
            community_reports=reports, relationships=relationships,
            tokenizer=WhitespaceTokenizer())
        # GraphRAG's own local-search settings (graphrag.config.defaults, as its query API
        # passes them): the budget and its shares decide which tables fit
        ls = config.local_search
        ctx = builder.build_context(query=query, max_context_tokens=ls.max_context_tokens,
                                    text_unit_prop=ls.text_unit_prop,
                                    community_prop=ls.community_prop,
                                    top_k_mapped_entities=ls.top_k_entities,
                                    top_k_relationships=ls.top_k_relationships)
        text = ctx.context_chunks if isinstance(ctx.context_chunks, str) else "\n".join(
            ctx.context_chunks)
        missing = [t for t in LOCAL_CONTEXT_TABLES if t not in ctx.context_records
                   or len(ctx.context_records[t]) == 0]
        problems += [f"local search context has no {t} table" for t in missing]
        result["local_search"] = {
            "query_entity": top["title"], "max_context_tokens": ls.max_context_tokens,
            "text_unit_prop": ls.text_unit_prop, "community_prop": ls.community_prop,
            "context_tables": sorted(ctx.context_records),
            "rows": {t: len(v) for t, v in ctx.context_records.items()},
            "context_chars": len(text), "query_entity_in_context": top["title"] in text}

    # 3. global search context at every level
    communities = read_indexer_communities(read["communities"], read["community_reports"])
    levels = sorted(int(x) for x in read["communities"]["level"].unique())
    result["global_search"] = {}
    for level in levels:
        level_reports = read_indexer_reports(read["community_reports"], read["communities"],
                                             community_level=level)
        gctx = GlobalCommunityContext(community_reports=level_reports, communities=communities,
                                      entities=entities, tokenizer=WhitespaceTokenizer())
        built = asyncio.run(gctx.build_context(
            query="main themes", max_context_tokens=config.global_search.max_context_tokens))
        chunks = built.context_chunks if isinstance(built.context_chunks, list) else \
            [built.context_chunks]
        n_reports = len(built.context_records.get("reports", []))
        result["global_search"][str(level)] = {"reports": n_reports, "batches": len(chunks)}
        if n_reports == 0:
            problems.append(f"global search context at level {level} holds no report")

    result["problems"] = problems
    result["ok"] = not problems
    print(json.dumps(result, indent=2, default=str))
    save_result(save, result, args, default=str)
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
