"""The host-network side: pinned namespaces, CNI, bridges, ports and host files.

Modules here never import :mod:`ctrexec.containerd` or the product layer.
"""
