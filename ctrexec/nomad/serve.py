"""The plugin's server: the driver's services plus go-plugin's, until Shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable

from ctrexec._api.nomad.base import base_pb2
from ctrexec._api.nomad.drivers import driver_pb2
from ctrexec.nomad import _rpcserver
from ctrexec.nomad.driver import NomadDriver, recoverable_detail

log = logging.getLogger("ctrexec.nomad")


async def run(socket_path: str, on_listening: Callable[[str], None]) -> None:
    driver = NomadDriver()
    methods = driver.methods()
    server = _rpcserver.PluginServer(socket_path)
    server.add_service(
        base_pb2.DESCRIPTOR.services_by_name["BasePlugin"], methods["BasePlugin"],
        recoverable_detail,
    )  # fmt: skip
    server.add_service(
        driver_pb2.DESCRIPTOR.services_by_name["Driver"], methods["Driver"], recoverable_detail
    )
    await server.start()
    # The directory is mkdtemp's (0700); the socket is root's alone too, as the agent is.
    os.chmod(socket_path, 0o600)  # noqa: PTH101
    # SIGTERM (a person, systemd) stops as Shutdown does; the handler only sets a flag.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.shutdown.set)
    on_listening(socket_path)
    log.info("plugin serving", extra={"socket": socket_path})
    await server.wait_and_stop()
    await driver.close()
    # asyncio.run cancels whatever is left, and grpc writes a traceback for each.
    await server.settle()
    log.info("plugin stopped")
