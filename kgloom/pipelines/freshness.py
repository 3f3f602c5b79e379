"""Is the graph up to date? Which graph-wide assets must run again?

Every graph-wide asset records in its materialization metadata the fingerprint of the
inputs it was built from (``graph_inputs``:
:func:`kgloom.corpus.partitions.graph_inputs_fingerprint` of the live partitions'
manifests, the settings, the models and kgloom's code; computed
by ``entity_graph``, inherited by every later graph asset). An asset whose latest
materialization carries today's fingerprint needs no run; one with another (or none)
is stale, and so is everything downstream of it. So:

- nothing changed: no graph run at all (``kgloom index``, the nightly schedule);
- a run that failed at ``community_reports``: the retry runs ``community_reports``
  and what depends on it, not the stages that succeeded, as Dagster's re-execution from
  failure would;
- a changed partition: the fingerprint changes, every graph asset runs.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kgloom.core.layout import GRAPH_ASSETS as GRAPH_ASSET_NAMES
from kgloom.core.layout import PARTITIONED_ASSETS, SUMMARY_FILE
from kgloom.corpus.partitions import graph_inputs_fingerprint
from kgloom.pipelines.input_files import live_partition_keys

GRAPH_INPUTS = "graph_inputs"  # metadata key of every graph-wide asset
INGEST_ASSETS = dg.AssetSelection.assets(*PARTITIONED_ASSETS)
GRAPH_ASSETS = dg.AssetSelection.all() - INGEST_ASSETS
GRAPH_KEYS = [dg.AssetKey(name) for name in GRAPH_ASSET_NAMES]


def current_graph_inputs(resources: dict, instance: dg.DagsterInstance) -> str:
    """The fingerprint a graph refresh with ``resources`` (the ``index``, ``llm`` and
    ``embedder`` resources) would record now. Raises ``ModelFileError`` when the model
    file is missing."""
    index = resources["index"]
    return graph_inputs_fingerprint(index.output_dir, live_partition_keys(instance),
                                    index.settings(),
                                    resources["llm"].index_model_id(index.settings().method),
                                    resources["embedder"].model_path)


def recorded_graph_inputs(instance: dg.DagsterInstance, key: dg.AssetKey) -> str:
    """The ``graph_inputs`` of ``key``'s latest materialization ("" when none)."""
    event = instance.get_latest_materialization_event(key)
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    return str(meta[GRAPH_INPUTS].value) if GRAPH_INPUTS in meta else ""


def graph_inputs_of(context: dg.AssetExecutionContext, *upstream: str) -> str:
    """The graph-inputs fingerprint (:func:`kgloom.corpus.partitions.graph_inputs_fingerprint`)
    an asset is built from: the one shared by the latest materializations of its
    graph-wide ``upstream`` assets, or "" when they differ or lack one (the asset then
    counts as stale). The ``corpus`` asset computes it; every later graph asset inherits
    it."""
    values = {recorded_graph_inputs(context.instance, dg.AssetKey(name)) for name in upstream}
    return values.pop() if len(values) == 1 else ""


def stale_graph_assets(instance: dg.DagsterInstance, fingerprint: str,
                       output_dir: str | Path) -> list[dg.AssetKey]:
    """The graph-wide asset keys whose latest materialization was not built from
    ``fingerprint`` (all of them when the output folder has no index summary)."""
    if not (Path(output_dir) / SUMMARY_FILE).exists():
        return list(GRAPH_KEYS)
    return [k for k in GRAPH_KEYS if recorded_graph_inputs(instance, k) != fingerprint]


def rerun_selection(stale: list[dg.AssetKey]) -> dg.AssetSelection:
    """The stale assets, everything downstream of them among the graph-wide assets, and
    the other outputs of any multi-asset among them (``entity_graph`` runs whole)."""
    return ((dg.AssetSelection.assets(*stale).downstream() - INGEST_ASSETS)
            & GRAPH_ASSETS).required_multi_asset_neighbors()
