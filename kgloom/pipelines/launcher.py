"""A run launcher whose workers run monitoring can check (configured in ``dagster.yaml``).

Dagster's default launcher cannot tell whether a run worker still lives, so a run whose
worker was killed stays STARTED forever and keeps its pool slots. This one is the
default launcher plus a health check: the run's process, recorded in its tags by the
``index`` resource (:mod:`kgloom.pipelines.recovery`), is looked up on this host. A
worker that is gone is reported FAILED; the run monitoring daemon (``kgloom ui``) then
marks the run failed and frees its slots. Source: Dagster docs, "Run monitoring"
(``run_monitoring.enabled``; launchers that support ``check_run_worker_health``).
"""

from __future__ import annotations

from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus

from kgloom.core.processes import PID_TAG, process_alive


class PidCheckingRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` with ``check_run_worker_health`` from the run's pid tags."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        """True: see :meth:`check_run_worker_health`."""
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        """FAILED when the run's recorded process is gone from this host; RUNNING
        otherwise, including when it cannot be told (no tags yet, another host), since
        run monitoring fails a run on any other answer."""
        if process_alive(run.tags) is False:
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"process {run.tags.get(PID_TAG)} of the run is gone")
        return CheckRunHealthResult(WorkerStatus.RUNNING)
