"""The processor processes' CPU priority (`ostinato server --processor-nice N`, `OSTINATO_PROCESSOR_NICE`).

On a host whose cores are contended, a processor that waits for a core fires its timers late: S4's tail on the
benchmark machine is that wait (docs/benchmarks.md, "Sessions"). Linux shares the CPU between sessions first when
autogroup is on (each processor process leads a session of its own), and by nice value inside a group or a cgroup,
so the change goes to both: the process's nice value, which its threads inherit (it is applied before any starts),
and its session's autogroup. A negative value needs CAP_SYS_NICE (or root); without it the processor runs at the
server's priority and the server says why, rather than refusing to start over a scheduling preference.
"""

from __future__ import annotations

import os
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")  # "/autogroup-627 nice 0"; absent without CONFIG_SCHED_AUTOGROUP
NICE_MIN, NICE_MAX = -20, 19


def renice(delta: int, autogroup: Path = AUTOGROUP) -> list[str]:
    """Move this process's nice value and its autogroup's by `delta` (clamped to Linux's range); what could not be
    applied, one line each (empty when everything was)."""
    if delta == 0:
        return []
    problems: list[str] = []
    try:
        before = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, _clamp(before + delta))
    except OSError as exc:
        problems.append(f"nice {delta:+d}: {exc.strerror or exc}{_hint(delta)}")
    try:
        current = int(autogroup.read_text().split()[-1])
        autogroup.write_text(str(_clamp(current + delta)))
    except FileNotFoundError:
        pass  # no autogroups in this kernel: the nice value is all there is
    except (OSError, ValueError, IndexError) as exc:
        problems.append(f"autogroup nice {delta:+d} ({autogroup}): {getattr(exc, 'strerror', None) or exc}"
                        f"{_hint(delta)}")
    return problems


def _clamp(nice: int) -> int:
    return max(NICE_MIN, min(NICE_MAX, nice))


def _hint(delta: int) -> str:
    return " (a higher priority needs CAP_SYS_NICE or root)" if delta < 0 else ""
