"""Groups: tasks that share one network namespace, and the supervisor that keeps tasks up.

What it holds: group files (``spec``), ``group up/down/ps`` (``updown``), the implicit
one-task group that ``run -p``/``--network`` makes (``implicit``), the restart
supervisor (``supervisor``) and its presence lock (``presence``).

May import: ``tasks/`` and everything below it. Never a front end (``cli/``, its views included).
"""
