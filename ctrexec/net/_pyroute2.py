"""pyroute2's ``IPRoute`` and ``NetlinkError`` without the rest of pyroute2.

Any ``import pyroute2.x`` first runs ``pyroute2/__init__.py``, which imports every
pyroute2 API (NDB, IPDB, nftables, wireguard, ...): about 2.5 times the cost of
``IPRoute`` alone, paid by every ctrexec process that touches a namespace. ctrexec
uses only ``IPRoute`` and ``NetlinkError``. So, when nothing has imported pyroute2
yet, the package module is made from its spec but not run, and only the two modules
ctrexec names are loaded under it. The package's own ``__init__`` then runs on the
first lookup of any other attribute, so a program that later uses ``pyroute2.NDB``
(or ``from pyroute2 import IPDB``) gets the whole package as usual. The classes are
the ones ``pyroute2.IPRoute`` and ``pyroute2.NetlinkError`` name.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_PACKAGE = "pyroute2"
_complete_lock = threading.Lock()


@functools.cache
def load() -> tuple[Any, type[Exception]]:
    """``(IPRoute, NetlinkError)``, importing their modules on the first call."""
    pkg = None if _PACKAGE in sys.modules else _unrun_package()
    try:
        linux = importlib.import_module("pyroute2.iproute.linux")
        exceptions = importlib.import_module("pyroute2.netlink.exceptions")
    except BaseException:
        if pkg is not None and sys.modules.get(_PACKAGE) is pkg:
            del sys.modules[_PACKAGE]  # let a later import start afresh
        raise
    if pkg is not None:
        _run_init_on_first_lookup(pkg)
    error: type[Exception] = exceptions.NetlinkError
    return linux.IPRoute, error


def _unrun_package() -> ModuleType | None:
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.loader is None:
        return None  # the import below then fails as usual
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = pkg
    return pkg


def _run_init_on_first_lookup(pkg: ModuleType) -> None:
    """Install a PEP 562 hook that runs the package's ``__init__`` once, when needed.

    Not installed while ctrexec's modules load: ``from pyroute2 import config`` inside
    them probes the package with ``hasattr``, which would run ``__init__`` at once.
    """
    spec = pkg.__spec__
    assert spec is not None and spec.loader is not None

    def complete(name: str) -> Any:
        with _complete_lock:
            if pkg.__dict__.pop("__getattr__", None) is not None:
                spec.loader.exec_module(pkg)  # type: ignore[union-attr]
        return getattr(pkg, name)

    pkg.__getattr__ = complete  # type: ignore[method-assign]
