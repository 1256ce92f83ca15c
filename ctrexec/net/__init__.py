"""The host-network side: pinned namespaces, CNI, bridges, ports, host files, and a
group's namespace (``groupns``: its name, its path, wiring and releasing it).

Modules here never import :mod:`ctrexec.containerd` or the product layer.
"""
