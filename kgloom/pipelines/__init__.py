"""How the asset graph runs, as Dagster definitions: ``input_files`` (one dynamic partition
per input file), ``jobs`` (the jobs, the nightly schedule and the input-folder sensor),
``freshness`` (is the graph up to date; the ``graph_inputs`` metadata every graph asset
records), ``recovery`` and ``launcher`` (runs whose process died), ``dagster_fixes``.
The assets themselves are :mod:`kgloom.assets`; what the CLI runs is :mod:`kgloom.cli`."""

from kgloom.pipelines import dagster_fixes  # noqa: F401  (patches Dagster's slot wait)
