"""The plugin's server: the driver's services plus go-plugin's, until Shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from ctrexec import _rpcserver
from ctrexec._api.nomad.base import base_pb2
from ctrexec._api.nomad.drivers import driver_pb2
from ctrexec.nomad.driver import NomadDriver, recoverable_detail

log = logging.getLogger("ctrexec.nomad")


async def run(socket_path: str, on_listening: Callable[[str], None]) -> None:
    driver = NomadDriver()
    methods = driver.methods()
    services = [
        (base_pb2.DESCRIPTOR.services_by_name["BasePlugin"], methods["BasePlugin"]),
        (driver_pb2.DESCRIPTOR.services_by_name["Driver"], methods["Driver"]),
    ]
    handlers = [_rpcserver.service_handler(s, m, recoverable_detail) for s, m in services]
    server = _rpcserver.PluginServer(socket_path, handlers)
    await server.start()
    # SIGTERM (a person, systemd) stops as Shutdown does; the handler only sets a flag.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.shutdown.set)
    on_listening(socket_path)
    log.info("plugin serving", extra={"socket": socket_path})
    await server.wait_and_stop()
    await asyncio.sleep(0)
    log.info("plugin stopped")
