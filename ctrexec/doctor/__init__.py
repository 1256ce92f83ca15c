"""Upkeep for operators: what ctrexec owns that nothing owns any more, and the damage
that breaks a group's promise of one namespace and one address.

:func:`~ctrexec.doctor.checks.doctor` only looks; :func:`~ctrexec.doctor.checks.gc`
removes what doctor calls garbage, and only that. Each kind of leftover is one
:class:`~ctrexec.doctor.findings.Check` in its own module (``containers``, ``netside``,
...), listed in ``checks.CHECKS`` in the order gc removes them: the objects that hold
others first (a container before its snapshot, a namespace before its veth).

The rule every check keeps: garbage is what *nothing on the host uses*, not merely what
no record names. A pinned namespace with a process inside, an address some live
namespace holds, a veth whose peer is alive: none of these is garbage, even when the
containerd doctor is connected to knows nothing of them (another containerd, another
namespace, another tool). And nothing younger than the scope's grace period is garbage:
it may be a create in flight.

Layer: above ``groups/`` (it reads groups' damage), below ``cli/``,
``nomad/`` and ``testing``, which use it.
"""
