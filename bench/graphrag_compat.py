"""Load kgloom's tables with Microsoft GraphRAG's query engine and build a local-search
context; prints and saves JSON. Skips (exit 0, "skipped" in the JSON) when the
``graphrag`` package is not installed.

Usage (graphrag has heavy dependencies, so use a separate venv):
    python3 -m venv /tmp/grvenv && /tmp/grvenv/bin/pip install graphrag==3.3.0 \
        -c requirements/constraints.txt
    /tmp/grvenv/bin/python bench/graphrag_compat.py --output-dir data/output

The context is built with ``LocalSearchMixedContext.build_context`` for an empty query
(graphrag then maps to its top-ranked entities; no embedding model needed) plus the
highest-degree entity named explicitly. Tokens are counted with a whitespace tokenizer,
because graphrag's default (tiktoken) downloads its encodings at run time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-dir", default=str(ROOT / "data" / "output"))
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "graphrag_compat.json"))
    args = ap.parse_args()
    save = Path(args.save)
    save.parent.mkdir(parents=True, exist_ok=True)
    try:
        import pandas as pd
        from graphrag.query.indexer_adapters import (read_indexer_entities,
                                                     read_indexer_relationships,
                                                     read_indexer_reports,
                                                     read_indexer_text_units)
        from graphrag.query.structured_search.local_search.mixed_context import (
            LocalSearchMixedContext)
        from graphrag_llm.tokenizer import Tokenizer
    except ImportError as exc:
        result = {"skipped": f"graphrag not importable: {exc}"}
        print(json.dumps(result))
        save.write_text(json.dumps(result, indent=2) + "\n")
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

    out = Path(args.output_dir)
    read = {n: pd.read_parquet(out / f"{n}.parquet") for n in
            ("entities", "relationships", "communities", "community_reports", "text_units")}
    entities = read_indexer_entities(read["entities"], read["communities"], community_level=None)
    relationships = read_indexer_relationships(read["relationships"])
    reports = read_indexer_reports(read["community_reports"], read["communities"],
                                   community_level=None)
    text_units = read_indexer_text_units(read["text_units"])
    builder = LocalSearchMixedContext(
        entities=entities, entity_text_embeddings=None, text_embedder=None,
        text_units=text_units, community_reports=reports, relationships=relationships,
        tokenizer=WhitespaceTokenizer())
    top = read["entities"].sort_values("degree", ascending=False)["title"].iloc[0]
    ctx = builder.build_context(query="", include_entity_names=[top], max_context_tokens=4000)
    text = ctx.context_chunks if isinstance(ctx.context_chunks, str) else "\n".join(
        ctx.context_chunks)
    result = {
        "graphrag_loaded": {"entities": len(entities), "relationships": len(relationships),
                            "community_reports": len(reports), "text_units": len(text_units)},
        "context_tables": sorted(ctx.context_records),
        "context_chars": len(text),
        "top_entity": top,
        "top_entity_in_context": top in text,
    }
    print(json.dumps(result, indent=2))
    save.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
