#!/bin/bash
# The unit suite under the guest's Python 3.13 (about 8 min under TCG).
set -euo pipefail
share=${CTREXEC_SHARE:-/mnt/share}
python3 -m venv /root/venv
cp -a "$share/src" /root/src
/root/venv/bin/pip install -q --no-index --find-links "$share/wheels" -e '/root/src[dev]'
cd /root/src
/root/venv/bin/pytest -q -p no:cacheprovider tests/unit
