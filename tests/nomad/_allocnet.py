"""An allocation's network as Nomad's bridge mode makes it, for the tests of this folder."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from _nethelpers import PLUGIN_DIR, free_subnet, new_bridge_name

from ctrexec.net import cni, netns


class GroupNetwork:
    """What Nomad's bridge networking does for an allocation: the namespace, pinned at
    /var/run/netns/<allocID> (nsutil.NewNS), then CNI's bridge inside it."""

    def __init__(self, tmp_path: Path, alloc_id: str) -> None:
        self.alloc_id = alloc_id
        self.ns = netns.create(alloc_id)
        self.path = f"/var/run/netns/{alloc_id}"
        self.runtime = cni.CNI(
            plugin_dirs=[PLUGIN_DIR],
            conf_dir=tmp_path / "cni-conf",
            cache_dir=tmp_path / "cni-cache",
        )
        self.bridge = new_bridge_name()
        self.subnet = free_subnet()
        self.network = f"nomadt-{alloc_id[:8]}"
        conf = cni.bridge_conflist(
            self.network,
            self.bridge,
            str(self.subnet),
            ports=False,
            ipam_dir=str(tmp_path / "ipam"),
        )
        result = self.runtime.add(conf, self.ns.name, self.ns.path)
        [ipc] = result.container_ips("eth0")
        self.ip = str(ipaddress.ip_interface(ipc.address).ip)

    def close(self) -> None:
        self.runtime.delete(self.network, self.ns.name)
        netns.remove(self.ns.path)
        os.system(f"ip link del {self.bridge} 2>/dev/null")
