"""Jobs, schedules and sensors; the runner, crash recovery and status for the CLI."""

from kgloom.pipelines import dagster_fixes  # noqa: F401  (patches Dagster's slot wait)
