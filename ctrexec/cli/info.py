"""``ctrexec version`` and ``ctrexec info``."""

from __future__ import annotations

import argparse
from typing import Any

from ctrexec import __version__
from ctrexec.cli._common import ArgumentParser, connect, connection_flags, json_flag, print_json


def cmd_version(args: argparse.Namespace) -> int:
    with connect(args) as client:
        # connect() has just asked containerd; a second Version call would cost a trip.
        server = client.server_version or client.version()
    out = {
        "client": {"version": __version__},
        "server": {
            "version": server.version,
            "revision": server.revision,
            "address": client.address,
        },
    }
    if args.json:
        print_json(out)
    else:
        print(f"ctrexec:    {out['client']['version']}")
        print(f"containerd: {server.version} ({server.revision})")
        print(f"address:    {client.address}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    import attrs

    with connect(args) as client:
        info = client.info()
    if args.json:
        print_json(attrs.asdict(info))
        return 0
    # which containerd, and why: two on one host hold different tasks
    why = f" ({info.address_choice.reason})" if info.address_choice else ""
    print(f"address:       {info.address}{why}")
    print(f"namespace:     {info.namespace}")
    print(f"containerd:    {info.version.version} ({info.version.revision})")
    print(f"namespaces:    {', '.join(info.namespaces) or '-'}")
    print(f"snapshotters:  {', '.join(info.snapshotters) or '-'}")
    print(f"runtimes:      {', '.join(info.runtimes) or '-'}")
    print(f"oci runtimes:  {', '.join(info.oci_runtimes) or '-'}")
    if info.runc is not None:
        print(f"runc v2:       {_runc_line(info.runc)}")
    elif info.runc_error:
        print(f"runc v2:       containerd cannot run it: {info.runc_error}")
    for d in info.deprecations:
        seen = f" (last seen {d.last_seen:%Y-%m-%d %H:%M:%S}Z)" if d.last_seen else ""
        print(f"deprecated:    {d.id}: {d.message}{seen}")
    return 0


def _runc_line(runc: Any) -> str:
    """``runc 1.1.5 (OCI 1.0.0..1.0.2-dev), shim 2.1.9, as containerd reports it``."""
    binary = " ".join(w for w in (runc.binary, runc.binary_version) if w)
    oci = f" (OCI {runc.oci_versions})" if runc.oci_versions else ""
    shim = f", shim {runc.shim_version}" if runc.shim_version else ""
    return f"{binary or '?'}{oci}{shim}, as containerd reports it"


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    parents = [connection_flags(), json_flag()]
    p = sub.add_parser("version", parents=parents, help="show ctrexec and containerd versions")
    p.set_defaults(func=cmd_version)
    p = sub.add_parser("info", parents=parents, help="show what containerd offers")
    p.set_defaults(func=cmd_info)
