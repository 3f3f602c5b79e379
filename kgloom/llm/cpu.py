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


def threads_for_load(own_threads: float = 0) -> int:
    """Threads for the next compute burst: the usable cores left free by the rest of the
    machine, at least 1.

    Args:
        own_threads: threads this process itself kept busy during the last minute, on
            average (they are part of the load average and do not compete with it).

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
    """The threads of a process's successive compute bursts: :func:`threads_for_load`
    with this process's own CPU use over the last minute taken out of the load.

    The 1-minute load average counts this process's own threads (a burst's workers, the
    stage that ran before it on the main thread) and decays for about a minute. Counted
    as someone else's load, that makes a process that has kept one core busy choose one
    thread, and stay there: on the 2-core machine the 2Wiki pool's vectors were embedded
    on one thread after single-threaded graph stages, and the embedder once dropped to
    one thread after its own first pass (300 text units took 11.5 s on one thread, 7.4 s
    on two, the machine otherwise idle). Own use is measured, not assumed: the process's
    CPU seconds (all threads, ``time.process_time``) over the wall seconds since the
    newest sample at least a minute old (else the oldest, when 5 s or more); before that,
    over the process's life (``psutil``).

    Args:
        fixed: a configured thread count (None or 0: by load).
    """

    WINDOW_SECONDS = 60.0  # the load average's window

    def __init__(self, fixed: int | None = None) -> None:
        self.fixed = fixed
        self._samples: list[tuple[float, float]] = []  # (monotonic s, process CPU s)

    def own_load(self) -> float:
        """This process's average running threads over about the last minute."""
        now, cpu = time.monotonic(), time.process_time()
        old = [i for i, x in enumerate(self._samples) if now - x[0] >= self.WINDOW_SECONDS]
        self._samples = self._samples[old[-1] if old else 0:]  # one reference a minute old
        self._samples.append((now, cpu))
        t0, c0 = self._samples[0]
        if now - t0 >= 5.0:
            return max(0.0, (cpu - c0) / (now - t0))
        import psutil

        age = time.time() - psutil.Process().create_time()
        return max(0.0, cpu / age) if age > 0 else 0.0

    def pick(self) -> int:
        """This burst's threads: ``fixed`` when set, else :func:`threads_for_load` with
        :meth:`own_load` as the process's own share of the load."""
        if self.fixed:
            return self.fixed
        return threads_for_load(self.own_load())
