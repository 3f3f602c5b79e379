"""How many CPU threads a compute burst (an LLM call, a block of embedding windows)
should use.

llama.cpp's threads wait for each other at every operator, so on a machine whose cores
are busy with other processes a second thread mostly waits for a descheduled partner;
with free cores, more threads are faster. So the number of threads follows what the
rest of the machine uses: every core this process may run on that other processes leave
free, else one. ``bench/bench_speed.py probe`` measures prompt and decode tokens/s per
thread setting on the machine at hand; the whole-index effect is in the
``bench/bench_speed.py book`` figures of the README.

Other processes' use is measured directly and over the last seconds only: the busy
CPU time of this process's cores (``psutil.cpu_times(percpu=True)``, the kernel's
per-CPU counters) less this process's own CPU time (``time.process_time``), per wall
second. The 1-minute load average, used before, lagged by about a minute and counted
this process's own runnable-but-waiting threads (two llama workers, the main thread,
Dagster's) as someone else's: on the 2Wiki pool's 6,119 passages the entity resolution's
31,287 embedding windows ran on one thread of an otherwise idle machine (5.96 ms a
window against 3.3 on two).
"""

from __future__ import annotations

import os
import threading
import time

# a measurement spans at least MIN_SPAN_S seconds (the kernel counts CPU time in ticks
# of 10 ms: over 1 s that is +-0.02 of a core per CPU) and at most MAX_SPAN_S (older
# use says little about now). Without a sample in that range, a pick looks for PROBE_S
# seconds with this thread idle. Use is not demand: a process that wants a whole core
# got 0.5-0.77 of one on the 2-core machine while our two threads ran; so where others
# used PROBE_ABOVE cores or more, a look (at most one per MAX_SPAN_S) measures what they
# use with the cores left to them
MIN_SPAN_S, MAX_SPAN_S, PROBE_S, PROBE_ABOVE = 1.0, 10.0, 0.25, 0.25
# CPU time counted busy (psutil.cpu_times fields; Linux counts guest time inside user)
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "interrupt", "dpc")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where
    the platform has no affinity call), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def threads_for_others(others: float) -> int:
    """Threads for the next compute burst: the usable cores that ``others`` (cores'
    worth of CPU used by other processes, >= 0) leave free, rounded half up, clamped to
    [1, :func:`usable_cores`]."""
    cores = usable_cores()
    return max(1, min(cores, int(cores - max(0.0, others) + 0.5)))


def busy_seconds() -> float:
    """CPU seconds the cores this process may run on have been busy since boot
    (:data:`BUSY_FIELDS` of ``psutil.cpu_times``: idle, I/O wait and time stolen by a
    hypervisor are not busy). All cores where the affinity mask cannot be matched to
    the per-CPU counters (no affinity call, CPUs offline)."""
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    try:
        mine = os.sched_getaffinity(0)
    except AttributeError:
        mine = set(range(len(per_cpu)))
    if len(per_cpu) != os.cpu_count() or max(mine, default=0) >= len(per_cpu):
        mine = set(range(len(per_cpu)))
    return sum(getattr(per_cpu[c], f, 0.0) for c in mine for f in BUSY_FIELDS)


class OthersUse:
    """Other processes' CPU use, in cores, over the last seconds: (busy CPU seconds of
    this process's cores, :func:`busy_seconds`, less this process's own CPU seconds,
    ``time.process_time``, all threads) per wall second, between now and the newest
    sample from :data:`MIN_SPAN_S` to :data:`MAX_SPAN_S` seconds old. Without one, or
    when others used :data:`PROBE_ABOVE` cores or more and the last look is older than
    :data:`MAX_SPAN_S`, over a :data:`PROBE_S`-second look taken now with the calling
    thread asleep. Samples are the process's, not a caller's: the measure does not
    depend on which of the process's work made them. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: list[tuple[float, float, float]] = []  # (monotonic, busy, own) s
        self._looked = float("-inf")  # monotonic s of the last look

    @staticmethod
    def _sample() -> tuple[float, float, float]:
        return time.monotonic(), busy_seconds(), time.process_time()

    @staticmethod
    def _rate(ref: tuple[float, float, float], now: tuple[float, float, float]) -> float:
        wall = now[0] - ref[0]
        return max(0.0, ((now[1] - ref[1]) - (now[2] - ref[2])) / wall) if wall > 0 else 0.0

    def cores(self) -> float:
        """Cores' worth of CPU other processes used over the span (>= 0)."""
        with self._lock:
            now = self._sample()
            fit = [s for s in self._samples if MIN_SPAN_S <= now[0] - s[0] <= MAX_SPAN_S]
            others = self._rate(fit[-1], now) if fit else None
            if others is None or (others >= PROBE_ABOVE
                                  and now[0] - self._looked >= MAX_SPAN_S):
                ref = now
                time.sleep(PROBE_S)
                now = self._sample()
                self._looked = now[0]
                others = self._rate(ref, now)
            self._samples = [s for s in self._samples if now[0] - s[0] <= MAX_SPAN_S]
            self._samples.append(now)
            return others


_OTHERS = OthersUse()  # one per process: every burst's pick reads and feeds it


class BurstThreads:
    """The threads of a process's successive compute bursts: a configured count, or
    :func:`threads_for_others` of the process-wide :class:`OthersUse` at each pick.

    Args:
        fixed: a configured thread count (None or 0: by others' use).
    """

    def __init__(self, fixed: int | None = None) -> None:
        self.fixed = fixed

    def pick(self) -> int:
        """This burst's threads: ``fixed`` when set, else the cores other processes
        have left free over the last seconds (at least 1)."""
        if self.fixed:
            return self.fixed
        return threads_for_others(_OTHERS.cores())
