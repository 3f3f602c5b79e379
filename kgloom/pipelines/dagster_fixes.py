"""Two corrections to Dagster 1.13's in-process wait for a pool slot, applied on import
of :mod:`kgloom.pipelines`.

A step blocked by a pool limit (``llm``, limit 1) waits in
``inner_plan_execution_iterator``'s loop, which calls ``ActiveExecution.sleep_til_ready``
when no step is ready. Two faults made that wait spin a CPU core and ignore Ctrl-C:

1. ``InstanceConcurrencyContext.interval_to_next_pending_claim_check`` returns
   ``min([0, *(ready_at - now)])``, never more than 0, so the loop never sleeps between
   claim checks. Fixed: the time until the earliest next check, at least 0.
2. The in-process loop never looks at interrupts Dagster captured (SIGINT, SIGTERM) while
   no step runs, so Ctrl-C waits for a slot that may never come. Fixed: the wait sleeps in
   slices of at most :data:`SLICE_S` seconds and raises
   ``DagsterExecutionInterruptedError`` (the run then ends as interrupted) when an
   interrupt was captured and no step is in flight.

Both are patched only where the Dagster source still has the faulty code, checked by
its text, so a Dagster release that fixes them is left alone.
"""

from __future__ import annotations

import inspect
import time

from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._utils.interrupts import check_captured_interrupt, pop_captured_interrupt

SLICE_S = 0.25


def _interval_to_next_pending_claim_check(self) -> float:
    if not self._pending_claims or not self._pending_timeouts:
        return 0.0
    return max(0.0, min(self._pending_timeouts.values()) - time.time())


def _sleep_til_ready(self) -> None:
    deadline = time.time() + max(0.0, self.sleep_interval())
    while True:
        if check_captured_interrupt() and not self.has_in_flight_steps:
            pop_captured_interrupt()
            raise DagsterExecutionInterruptedError()
        left = deadline - time.time()
        if left <= 0:
            return
        time.sleep(min(left, SLICE_S))


def apply() -> list[str]:
    """Patch what still needs it; return the names of the patched methods."""
    patched = []
    src = inspect.getsource(InstanceConcurrencyContext.interval_to_next_pending_claim_check)
    if "min([0," in src.replace(" ", ""):
        InstanceConcurrencyContext.interval_to_next_pending_claim_check = (
            _interval_to_next_pending_claim_check)
        patched.append("InstanceConcurrencyContext.interval_to_next_pending_claim_check")
    if "check_captured_interrupt" not in inspect.getsource(ActiveExecution.sleep_til_ready):
        ActiveExecution.sleep_til_ready = _sleep_til_ready
        patched.append("ActiveExecution.sleep_til_ready")
    return patched


PATCHED = apply()
