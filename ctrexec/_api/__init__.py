"""generated; do not edit

Python bindings for ctrexec's copy of containerd's API v1 (see protos/).
Regenerate with: .venv/bin/python scripts/gen-protos
"""
