"""How the log driver's and the log daemon's processes start: from a stand-in package.

Both run for every task (the driver once per task start, the daemon's memory a share
of each task's), so they start with ``python -IS`` (no ``PYTHON*`` variables, no user
site, no ``site``, and so no editable-install finder) and load the standard library's
cheap modules only. Importing ``ctrexec.logs.driver`` the usual way would run
``ctrexec/__init__.py`` first: it loads no grpc (its names are lazy, PEP 562), but
``typing``, with ``re``, ``enum``, ``collections`` and ``contextlib``, which the driver
is written to avoid (see :mod:`ctrexec.logs.driver`): about 20 ms per task start
(``python -IS -X importtime``, here). The stand-in is an empty module registered as
``ctrexec`` whose ``__path__`` is this tree's package directory, so the submodules load
from the same files and ``ctrexec/__init__.py`` never runs.

:func:`boot_source` is that script, the one copy: the daemon runs it with ``-c``, and
:func:`write_launcher` writes it, behind a ``#!`` line, into the executable file a
``binary://`` stdio URI names.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import urllib.parse
from pathlib import Path

from ctrexec.defaults import RUN_DIR
from ctrexec.errors import FailedPrecondition, InvalidArgument
from ctrexec.logs.driver import DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE, DRIVER_NAME, check_limits

#: Where :func:`ctrexec.logs.reader.log_uri` writes the launcher when no driver is given:
#: a tmpfs that a reboot clears, like the tasks that used it.
DEFAULT_LAUNCHER_DIR = f"{RUN_DIR}/bin"

#: This ctrexec tree's package directory, which the stand-in's ``__path__`` names.
PACKAGE_DIR = str(Path(__file__).absolute().parent.parent)


def boot_source(module: str) -> str:
    """Python source that runs ``module``'s ``main()`` from a stand-in ``ctrexec``
    package (``main`` reads its arguments from ``sys.argv[1:]``)."""
    return (
        "import sys, types\n"
        "pkg = types.ModuleType('ctrexec')\n"
        f"pkg.__path__ = [{PACKAGE_DIR!r}]\n"
        "sys.modules['ctrexec'] = pkg\n"
        f"from {module} import main\n"
        "sys.exit(main())\n"
    )


def launcher_source(python: str) -> str:
    """The launcher file's content: the log driver's :func:`boot_source` behind a ``#!``
    naming ``python -IS``."""
    return (
        f"#!{python} -IS\n"
        f"# ctrexec.logs.launcher.write_launcher wrote this: {DRIVER_NAME} for binary:// URIs.\n"
        + boot_source("ctrexec.logs.driver")
    )


def write_launcher(directory: str | os.PathLike[str], *, python: str | None = None) -> str:
    """Write (once) an executable launcher for the log driver; return its absolute path.

    The shim executes the ``binary://`` path directly, with an environment holding only
    ``CONTAINER_ID`` and ``CONTAINER_NAMESPACE``, so the driver must be a file that
    runs on its own: a script whose ``#!`` names this Python and whose body loads the
    driver from this very ctrexec tree. Measured here (time until the driver closes
    fd 5, i.e. the delay it adds to a task start), it is ready in ~25 ms with ~10 MB
    RSS; the ``ctrexec-logdriver`` console script would also go through ``site``, the
    installed package's finders and ``ctrexec/__init__``. The file name
    carries a hash of the content, so two ctrexec installs sharing a directory never
    overwrite each other's launcher.
    """
    where = Path(directory).absolute()
    source = launcher_source(python or sys.executable)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    target = where / f"{DRIVER_NAME}-{digest}"
    with contextlib.suppress(OSError):
        if target.read_text(encoding="utf-8") == source and os.access(target, os.X_OK):
            return str(target)
    try:
        where.mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(source, encoding="utf-8")
        tmp.chmod(0o755)
        tmp.replace(target)
    except OSError as exc:
        raise FailedPrecondition(f"cannot write log driver launcher in {where}: {exc}") from exc
    return str(target)


def log_uri(
    log_path: str | os.PathLike[str],
    max_size: int = DEFAULT_MAX_SIZE,
    max_files: int = DEFAULT_MAX_FILES,
    *,
    driver: str | os.PathLike[str] | None = None,
) -> str:
    """The ``binary://`` stdio URI that makes the shim run the log driver for a task.

    Use it as both stdout and stderr of ``Tasks.Create`` (stdin must stay empty).
    containerd 1.6 (``pkg/process.NewBinaryCmd``) runs the URI's path and turns each
    query parameter into two arguments, key then value, in Go map order (random), so
    the driver takes ``path``, ``max-size`` and ``max-files`` as key/value pairs in any
    order. ``driver`` defaults to a launcher written into :data:`DEFAULT_LAUNCHER_DIR`.
    """
    log_path = os.fspath(log_path)
    if not Path(log_path).is_absolute():
        raise InvalidArgument(f"log path must be absolute: {log_path!r}")
    check_limits(max_size, max_files)
    driver_path = os.fspath(driver) if driver is not None else write_launcher(DEFAULT_LAUNCHER_DIR)
    if not Path(driver_path).is_absolute():
        raise InvalidArgument(f"log driver path must be absolute: {driver_path!r}")
    query = urllib.parse.urlencode(
        [("path", log_path), ("max-size", str(max_size)), ("max-files", str(max_files))]
    )
    return "binary://" + urllib.parse.quote(driver_path, safe="/") + "?" + query
