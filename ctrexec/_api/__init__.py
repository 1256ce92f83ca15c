"""generated; do not edit

Python bindings for ctrexec's copies of containerd's API v1 and of Nomad's plugin
protocol (see protos/).
Regenerate with: .venv/bin/python scripts/gen-protos
"""
