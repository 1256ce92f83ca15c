"""Logs: the log modes, the binary:// driver, the shared log daemon and the reader.

What it holds, in import order (a module imports only those before it):
``driver`` (the process the shim runs, and the json-file writer), ``modes`` (the
``--log-driver`` vocabulary), ``launcher`` (the stand-in package script both
processes start from, and the driver's launcher file), ``copies`` (the daemon's copy
of an interactive task's output for its attached client), ``holders`` (which
process holds a FIFO open), ``daemon`` (one process reading every json-file task's
FIFOs), ``client`` (a start's one request to the
daemon), ``orphaned_shims`` (stopping a shim left serving only a driver), ``reader``
(reading a log back, per driver; stdio URIs). What one task's config makes of the
modes is above this package, in :mod:`ctrexec.tasks.output`.

May import: the standard library, ``defaults``, ``errors`` and ``oci/``. ``driver`` and
``daemon`` run in processes of their own that load only the standard library's cheap
modules, ``defaults`` and ``errors`` (see ``launcher``), so this ``__init__`` imports
nothing.
"""
