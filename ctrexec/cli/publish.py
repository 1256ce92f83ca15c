"""``run``/``create``'s docker flags for a container's own network and its restarts.

``--network bridge|cni:NAME``, ``-p`` and ``-P`` are a :class:`ctrexec.NetworkRequest`
(the container's namespace of its own); ``--network none|host`` is ``--netns none|host``.
``--restart`` is docker's policy, which ``ctrexec supervise`` applies: ctrexec has no
daemon, so a policy set while no supervisor runs gets one warning on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ctrexec import DEFAULT_SUBNET, SUBNET_ENV, InvalidArgument

if TYPE_CHECKING:
    from ctrexec import Client, NetworkRequest, RestartPolicy, TaskConfig

_POLICIES = ("no", "on-failure", "always", "unless-stopped")
SUPERVISOR_UNIT = "contrib/systemd/ctrexec-supervise@.service"


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--network",
        "--net",
        metavar="MODE",
        help="bridge, none, host or cni:NAME: bridge and cni give the container a "
        f"namespace of its own; the bridge's subnet is {subnet_default()} (default: as --netns)",
    )
    p.add_argument(
        "-p",
        "--publish",
        action="append",
        default=[],
        metavar="[[IP:]HOST:]CONTAINER[/PROTO]",
        help="publish a port or a range (8000-8001:80-81); with no HOST, a free one is "
        "picked and kept (implies --network bridge)",
    )
    p.add_argument(
        "-P",
        "--publish-all",
        action="store_true",
        help="publish every port the image exposes on a free host port",
    )
    p.add_argument(
        "--restart",
        type=restart_policy,
        metavar="POLICY",
        help="no, on-failure[:N], always or unless-stopped, applied by `ctrexec supervise` "
        "(default: no)",
    )


def subnet_default() -> str:
    """The bridge subnet in force without a flag, as --help says it (environment included)."""
    value = os.environ.get(SUBNET_ENV)
    return f"{value} (${SUBNET_ENV})" if value else f"{DEFAULT_SUBNET} (or ${SUBNET_ENV})"


def restart_policy(text: str) -> tuple[str, int]:
    """``--restart`` as docker spells it: the policy and its maximum retry count."""
    policy, colon, count = text.partition(":")
    if policy not in _POLICIES:
        raise argparse.ArgumentTypeError(
            f"invalid restart policy {text!r}: use {', '.join(_POLICIES[:-1])} or unless-stopped"
        )
    if not colon:
        return policy, 0
    if policy != "on-failure":
        raise argparse.ArgumentTypeError(
            f"maximum retry count cannot be used with restart policy {policy!r}"
        )
    if not count.isdigit():
        raise argparse.ArgumentTypeError(f"invalid maximum retry count {count!r}")
    return policy, int(count)


def restart_config(args: argparse.Namespace) -> RestartPolicy:
    """The task's RestartPolicy (docker's default: no); TaskConfig refuses it with --rm."""
    from ctrexec import RestartPolicy

    policy, count = args.restart or ("no", 0)
    return RestartPolicy(policy=policy, max_attempts=count)


def netns_value(args: argparse.Namespace) -> str:
    """What ``--netns`` the task gets: ``--network none|host`` spell two of them."""
    if args.network in ("none", "host"):
        if args.netns not in ("none", ""):
            raise InvalidArgument("--netns cannot be used with --network")
        return str(args.network)
    return str(args.netns)


def network_request(args: argparse.Namespace) -> NetworkRequest | None:
    """The namespace to make for the container, checked before any daemon is asked.

    ``-p`` or ``-P`` alone mean docker's default network, the bridge; with
    ``--network none|host`` (``--netns``: :func:`netns_value`) ``-P`` publishes nothing.
    """
    if args.network is None and not args.publish and not args.publish_all:
        return None
    if args.network in ("none", "host") and not args.publish:
        return None
    from ctrexec import NetworkRequest

    return NetworkRequest(
        mode=args.network or "bridge", ports=args.publish, publish_all=args.publish_all
    )


def warn_unsupervised(client: Client, configs: list[TaskConfig]) -> None:
    """One line on stderr when a policy is set that no running supervisor will apply."""
    policies = sorted({c.restart.policy for c in configs} - {"no"})
    if not policies:
        return  # without loading the supervisor module (its event stubs cost ~7 ms)
    from ctrexec import is_supervised

    if is_supervised(client):
        return
    print(
        f"ctrexec: warning: restart policy {', '.join(policies)}: no `ctrexec supervise` runs for "
        f"namespace {client.namespace}, so nothing restarts the task until one does "
        f"(see {SUPERVISOR_UNIT})",
        file=sys.stderr,
    )
