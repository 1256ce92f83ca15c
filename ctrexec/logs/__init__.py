"""Logs: the log modes, the binary:// driver, the shared log daemon and the reader.

What it holds: ``driver`` (the process the shim runs, and the json-file writer),
``daemon`` (one process reading every json-file task's FIFOs), ``client`` (a start's one
request to the daemon), ``reader`` (reading a log back; stdio URIs), ``modes`` (the
``--log-driver`` vocabulary).

May import: the standard library, ``defaults``, ``errors`` and ``oci/``. ``driver`` and
``daemon`` run in processes of their own that load the standard library only, so this
``__init__`` imports nothing.
"""
