"""Which modules a CLI command loads: the one probe of tests/unit/test_cli_imports.py
(parsing and ``--help``) and tests/integration/test_verb_imports.py (each verb's work).

The probe runs in a fresh interpreter, since a test process has long imported the
whole library. It runs each argv through ``main()`` in turn, in that one interpreter,
and records after each the watched modules loaded so far; so a failure names the first
command that pulled one in. Checked by which modules load, never by time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

_PROBE = textwrap.dedent(
    """
    import contextlib, json, sys, tempfile
    from ctrexec.cli.main import main
    watched = tuple(sys.argv[1].split(","))
    report = []
    for argv in json.loads(sys.argv[2]):
        # files, not StringIO: a verb that streams (exec) asks its stdout for a fileno
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as exc:
                    code = exc.code
            loaded = sorted(m for m in sys.modules if m.split(".")[0] in watched
                            or any(m == w or m.startswith(w + ".") for w in watched))
            texts = []
            for f in (out, err):
                f.flush()
                f.seek(0)
                texts.append(f.read())
        report.append({"argv": argv, "code": code, "loaded": loaded, "out": texts[0],
                       "err": texts[1]})
    print(json.dumps(report))
    """
)


def probe(
    argvs: Sequence[Sequence[str]],
    watched: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> list[dict[str, Any]]:
    """Each argv's exit code, output, and the ``watched`` modules (names or dotted
    prefixes) loaded once it returned, all in one fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(watched), json.dumps([list(a) for a in argvs])],
        capture_output=True,
        text=True,
        check=False,  # its stderr, below, says why it failed
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return report
