"""Groups: tasks that share one network namespace, and the supervisor that keeps tasks up.

What it holds: group files (``spec``), ``group up/down/ps`` (``updown``), the implicit
one-task group that ``run -p``/``--network`` makes (``implicit``), and the restart
supervisor (``supervisor``).

May import: ``tasks/`` and everything below it. Never ``views/`` or a front end.
"""
