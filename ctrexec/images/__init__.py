"""Images: bringing them into containerd's store and taking them out, and who uses them.

What it holds: ``store`` (the steps a pull and an import share), ``archives`` (tar
members, docker and OCI layouts; pure), ``importer`` and ``exporter`` (``load``/``save``),
``registry/`` (pulls), ``usage`` (images by name or ID, which containers use them, rmi)
and ``prune``.

May import: ``containerd/``, ``oci/``, ``labels``, ``ids``, ``defaults``, ``errors``. Never
``net/``, ``tasks/`` or above.
"""
