"""How many CPU threads a compute burst (an LLM call, an embedding batch) should use.

llama.cpp's threads wait for each other at every operator, so on a machine whose cores
are busy with other processes a second thread mostly waits for a descheduled partner;
with free cores, more threads are faster. So the number of threads follows the
machine's load: every core this process may use when the rest of the machine leaves
them free, else one. ``bench/bench_speed.py probe`` measures prompt and decode tokens/s
per thread setting on the machine at hand; the whole-index effect is in the
``bench/bench_speed.py book`` figures of the README.
"""

from __future__ import annotations

import os
import time


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where
    the platform has no affinity call), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def threads_for_load(own_threads: int = 0) -> int:
    """Threads for the next compute burst: the usable cores left free by the rest of the
    machine, at least 1.

    Args:
        own_threads: threads this process itself kept busy during the last minute (they
            are part of the load average and do not compete with it).

    Returns:
        ``round(cores - max(0, load1 - own_threads))`` clamped to [1, cores], where
        ``load1`` is the 1-minute load average (``os.getloadavg``; processes running or
        waiting for a CPU). Where the platform has no load average, every usable core.
    """
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    free = cores - max(0.0, load - own_threads)
    return max(1, min(cores, int(free + 0.5)))


class BurstThreads:
    """The threads of a process's successive compute bursts, chosen by
    :func:`threads_for_load` with the process's own last burst counted as its own load.

    The 1-minute load average counts this process's threads while a burst runs and
    decays for about a minute after: without that credit, a burst that kept both cores
    busy would see the load it made itself and give the next burst one thread (measured
    on the 2-core machine: 300 book-length text units embedded in 11.5 s on one thread,
    7.4 s on two, with the machine otherwise idle).

    Args:
        fixed: a configured thread count (None or 0: by load).

    Use: ``n = bt.pick()`` before a burst, ``bt.done(n)`` after it.
    """

    RECENT_SECONDS = 60.0  # the load average's window: a burst older than this is gone

    def __init__(self, fixed: int | None = None) -> None:
        self.fixed = fixed
        self.last_threads, self.last_end = 0, 0.0

    def pick(self) -> int:
        """This burst's threads: ``fixed`` when set, else :func:`threads_for_load` with
        the last burst's threads as own load when it ended under a minute ago."""
        if self.fixed:
            return self.fixed
        recent = time.monotonic() - self.last_end < self.RECENT_SECONDS
        return threads_for_load(self.last_threads if recent else 0)

    def done(self, threads: int) -> None:
        """Record that a burst of ``threads`` threads just ended."""
        self.last_threads, self.last_end = threads, time.monotonic()
