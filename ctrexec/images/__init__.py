"""Images: what a user's reference means, bringing images into containerd's store and
taking them out, and who uses them.

What it holds, lower modules first: ``reference`` (docker's reference grammar and its
normalising; pure), ``lookup`` (get/ensure/remove an image by a user's reference),
``usage`` (images by name or ID, which containers use them, rmi), ``prune``, ``store``
(the steps a pull and an import share), ``archives`` (tar members, docker and OCI
layouts; pure), ``importer`` and ``exporter`` (``load``/``save``) and ``registry/`` (pulls).

May import: ``containerd/``, ``oci/``, ``labels``, ``ids``, ``defaults``, ``errors``. Never
``_rpc``, ``_api``, ``net/``, ``tasks/`` or above; ``containerd/`` never imports this
package, so it works on the names containerd stores and never parses a reference.
"""
