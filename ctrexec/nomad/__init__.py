"""ctrexec as a Nomad task driver: ``nomad-driver-ctrexec``, a go-plugin over gRPC.

Nomad creates each group's network namespace itself (``/var/run/netns/<allocID>``)
and hands its path to a driver that does not claim it; this driver just joins it,
which is ctrexec's design, so there is no pause container to die. See docs/nomad.md.

:mod:`ctrexec.nomad.main` is the entry point and imports nothing heavy until the
magic cookie has been checked: Nomad starts and kills the plugin twice at boot.
"""
