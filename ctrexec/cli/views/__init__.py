"""Views: what docker's CLI prints, built from ctrexec's values; no I/O of their own.

What it holds: ``gotemplate`` and ``gofuncs`` (Go's text/template, the one engine of
``--format``; standard library and ``errors`` only, so a template is parsed before the
CLI connects), ``ps`` (columns, filters, states), ``durations`` (docker's wording of an
age; standard library only), ``images`` (the ``images`` table) and ``inspect``
(inspect's document in docker's shape).

Front-end code: only ``cli/`` uses it (a scheduler wants ``TaskInfo``, not docker's
wording of it), so it lives in the CLI's package. May import: ``tasks/`` value types,
``containerd/`` value types, ``oci/``, ``labels``, ``errors``. Never a verb's module of
``cli/``: the verbs import views, not the other way.
"""
