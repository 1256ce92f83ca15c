#!/bin/bash
# The guest is the host kind it claims to be (cgroup v2, systemd as PID 1, the runtimes
# and Python the issue names), and ctrexec installs and imports in it offline.
set -euo pipefail
share=${CTREXEC_SHARE:-/mnt/share}
echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup)"
echo "PID 1: $(cat /proc/1/comm)"
echo "kernel: $(uname -r)"
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || { echo "not cgroup v2" >&2; exit 1; }
[ "$(cat /proc/1/comm)" = systemd ] || { echo "PID 1 is not systemd" >&2; exit 1; }
runc --version | head -n 1
crun --version | head -n 1
containerd --version
python3 --version
echo "containerd.service: $(systemctl is-enabled containerd.service || true)"
t0=$SECONDS
python3 -m venv /root/venv
cp -a "$share/src" /root/src
/root/venv/bin/pip install -q --no-index --find-links "$share/wheels" /root/src
echo "venv and install: $((SECONDS - t0)) s"
cd /
/root/venv/bin/python -c 'import ctrexec; print("import ctrexec:", ctrexec.__file__)'
