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

from kgloom.corpus.partitions import graph_inputs_fingerprint
from kgloom.pipelines.asset_graph import ALL_ASSETS
from kgloom.pipelines.input_files import live_partition_keys
from kgloom.pipelines.jobs import GRAPH_ASSETS, INGEST_ASSETS
from kgloom.pipelines.wiring import GRAPH_INPUTS

_INGEST_KEYS = {dg.AssetKey(n) for n in ("documents", "text_units", "extracted_graph")}
GRAPH_KEYS = [k for a in ALL_ASSETS for k in a.keys if k not in _INGEST_KEYS]
SUMMARY_FILE = "index-summary.json"  # the last graph asset's output; gone means rebuild


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
