"""Every asset of the index, one module per stage (``<stage>_assets``), each with its asset
checks: ``ingest_assets`` (documents, text_units), ``extraction_assets``
(extracted_graph), ``corpus_assets`` (corpus), ``graph_assets`` (entities, relationships,
entity_aliases, covariates; communities; graph_stats), ``report_assets``
(community_reports), ``publish_assets`` (graph_files, vector_index, index_summary);
``metadata`` holds what they share (progress, previews, plots, timing, cost metadata).

Each asset reads its tables from the ``index`` resource's store
(:class:`kgloom.resources.index_store.IndexStore`, the whole output folder), calls one
domain function of its stage, writes its tables back atomically and reports metadata.
Every file under the output folder has one writing asset, and each asset declares as
dependencies the assets whose files it reads. The LLM cache (``llm_cache.sqlite``) is a
shared SQLite database every LLM stage reads and writes.

``ALL_ASSETS`` is the list definitions, jobs and the runner load: the asset definitions
of the ``*_assets`` modules, in the order of the stage registry
(:data:`kgloom.core.layout.ASSET_OPS`); an asset the registry lacks, or a registered op
no module defines, is an error at import.
"""

import importlib
import pkgutil

import dagster as dg

from kgloom.core.layout import ASSET_OPS


def _asset_definitions() -> dict[str, dg.AssetsDefinition]:
    """{op name: asset definition} of every ``kgloom.assets.*_assets`` module.

    Raises:
        RuntimeError: an op defined twice, or the ops differ from the registry's
            (:data:`kgloom.core.layout.ASSET_OPS`), naming them.
    """
    found: dict[str, dg.AssetsDefinition] = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.name.endswith("_assets"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, dg.AssetsDefinition):  # imported ones: the same object
                if value.op.name in found and found[value.op.name] is not value:
                    raise RuntimeError(f"asset op {value.op.name!r} defined twice")
                found[value.op.name] = value
    if set(found) != set(ASSET_OPS):
        raise RuntimeError(
            "the asset modules and the stage registry (kgloom.core.layout.STAGES) differ: "
            f"not registered {sorted(set(found) - set(ASSET_OPS))}, "
            f"not defined {sorted(set(ASSET_OPS) - set(found))}")
    return found


_DEFINED = _asset_definitions()
ALL_ASSETS: list[dg.AssetsDefinition] = [_DEFINED[op] for op in ASSET_OPS]

__all__ = ["ALL_ASSETS"]
