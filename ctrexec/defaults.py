"""Defaults shared by the library and the CLI's flags, in a module that imports nothing.

The CLI builds its parser (help texts, flag defaults) from these before it knows which
command runs, so they must not live in modules that load grpc, the stubs or pyroute2.
The log driver the shim runs for each task imports this module too, and loads the
standard library's cheapest modules only: so not even ``pathlib`` here (it loads ``re``
and ``fnmatch``, ~8 ms per task start), and paths are strings.
This is their one definition; the library modules import them from here.
"""

from __future__ import annotations

#: containerd's system socket.
DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
#: Environment variable naming the containerd socket, as ``ctr`` reads it.
ADDRESS_ENV = "CONTAINERD_ADDRESS"
#: The containerd binary an embedded daemon runs (its shim is taken from the same
#: directory); unset, ``containerd`` on PATH.
CONTAINERD_BIN_ENV = "CTREXEC_CONTAINERD_BIN"
#: A directory for the embedded containerd's root and state (``root/``, ``state/``),
#: for a throwaway or test daemon; unset, /var/lib/ctrexec/containerd and
#: /run/ctrexec/containerd.
EMBEDDED_DIR_ENV = "CTREXEC_EMBEDDED_DIR"
#: The containerd namespace ctrexec works in unless told otherwise.
DEFAULT_NAMESPACE = "ctrexec"
NAMESPACE_ENV = "CTREXEC_NAMESPACE"
#: ctrexec's own state on the host that lives as long as the boot: /run is a tmpfs, so a
#: reboot empties it (namespace pins, CNI results and IPAM leases, host files, markers).
RUN_DIR = "/run/ctrexec"
#: ctrexec's state that outlives a reboot, and the volumes in it:
#: ``<dir>/<namespace>/<name>/_data`` (docker's ``/var/lib/docker/volumes/NAME/_data``).
STATE_DIR = "/var/lib/ctrexec"
DEFAULT_VOLUME_DIR = f"{STATE_DIR}/volumes"
#: Where task logs go: ``<dir>/<namespace>/<id>/task.log``.
DEFAULT_LOG_DIR = "/var/log/ctrexec"
#: The shared log daemon's socket and registrations (:mod:`ctrexec.logs.daemon`).
DEFAULT_LOGD_DIR = f"{RUN_DIR}/logd"
LOGD_DIR_ENV = "CTREXEC_LOGD_DIR"
#: The Nomad plugin's socket, ``$TMPDIR/ctrexec-nomad-XXXX/plugin.sock``: one directory
#: per plugin process (``doctor`` finds those of dead plugins).
NOMAD_SOCKET_DIR_PREFIX = "ctrexec-nomad-"
NOMAD_SOCKET_NAME = "plugin.sock"
#: A json-file log's rotation (docker's ``max-size`` and ``max-file``): the current file
#: rotates before it would grow past this many bytes, and this many files are kept in
#: total, the current one included.
DEFAULT_LOG_MAX_SIZE = 10 * 1024 * 1024
DEFAULT_LOG_MAX_FILES = 3
#: ctrexec's bridge network's subnet, and the variable that moves it for the CLI
#: (:mod:`ctrexec.net.settings` reads the other network variables).
DEFAULT_SUBNET = "10.89.0.0/24"
SUBNET_ENV = "CTREXEC_SUBNET"
#: How long ``stop`` waits after the stop signal before SIGKILL, unless a task or the
#: caller says otherwise (docker's 10 s).
DEFAULT_STOP_TIMEOUT = 10.0
#: How long ctrexec waits for containerd's answer to one task's state (Tasks.Get) before
#: it calls the state unknown: its shim is slow or stopped. containerd itself gives a
#: shim 2 s to answer State (``io.containerd.timeout.task.state``), so its own answer
#: (UNKNOWN up to 2.1, DeadlineExceeded from 2.3) comes first.
TASK_STATE_TIMEOUT = 5.0
#: How long ctrexec waits for Tasks.List: containerd asks every shim in turn, and up to
#: 2.1 waits those 2 s for each task whose shim does not answer.
TASK_LIST_TIMEOUT = 30.0

#: The host's init for ``--init``, best first: Debian's tini, the static build (it runs in
#: any image), then the dynamic one (it needs the image to have a glibc).
INIT_BINARIES = ("/usr/bin/tini-static", "/usr/bin/tini")
