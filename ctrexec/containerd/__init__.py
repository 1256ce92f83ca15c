"""The containerd side: one module per noun of containerd's API.

Modules here talk to containerd through :mod:`ctrexec._rpc` and never import
:mod:`ctrexec.net` or the product layer.
"""
