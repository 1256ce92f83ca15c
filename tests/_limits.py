"""The memory limit the OOM tests give a task, and the command that exceeds it: one place
for every suite (integration, chaos, nomad).

The limit is charged from ``runc init`` on, so it must hold the largest ``runc init``
among the supported runtimes: runc 1.1.15's is OOM-killed at 8m, 10m and 12m and fits
in 16m (crun fits in 8m). 32m is that with a margin for the next runc.
"""

from __future__ import annotations

#: Mebibytes, for Nomad's ``memory_mb``.
OOM_LIMIT_MB = 32
#: The same limit as the CLI and TaskConfig spell it.
OOM_LIMIT = f"{OOM_LIMIT_MB}m"

#: Doubles a shell string for ever: the busybox-only way to allocate without end, so it
#: passes any limit (it reaches 32m after about 25 doublings).
HOG = ("sh", "-c", "x=a; while :; do x=$x$x; done")
