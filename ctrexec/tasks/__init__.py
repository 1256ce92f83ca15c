"""Tasks: one container and its runs, from a TaskConfig to an exit status.

What it holds: the config and its fields (``config``, ``fields``; ``envfile`` reads docker's
env files into it), the OCI spec a config
becomes (``spec``, ``users``, ``files``), the record and its rootfs (``records``), each
start's run numbers (``runs``), ``cp`` (``copyarchive``, ``copying``), reading a task
back (``info``, ``procs``), a ``run -p``
container's own network from its labels (``implicitnet``), where its output goes
(``output``: the log driver's stdio, the caller's paths) and its interactive I/O
(``stdio``), waiting and events (``waiting``, ``events``, ``aio``), what a killed ctrexec
left (``stale``), the state-checked verbs and stop (``control``), rename, stopping several
at once (``teardown``) and the ``Executor`` that composes them. Helpers take what they use
(a client, a directory, a callable), never the Executor; only ``aio`` wraps it.

May import: ``containerd/``, ``net/``, ``oci/``, ``images/``, ``logs/``, ``_linux``,
``labels``, ``ids``, ``defaults``, ``errors``. Never ``groups/`` or a front end:
a group is made of tasks, not the other way round. Inside the package the order is
enforced by ``tests/unit/test_layers.py``: a module imports only those listed before it.
"""
