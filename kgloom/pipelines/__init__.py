"""The asset graph and how it runs: ``asset_graph`` (every stage's assets in order),
``wiring`` (what the assets share), ``input_files`` (one partition per input file), jobs,
schedules and sensors; the runner, crash recovery, logs and status for the CLI."""

from kgloom.pipelines import dagster_fixes  # noqa: F401  (patches Dagster's slot wait)
