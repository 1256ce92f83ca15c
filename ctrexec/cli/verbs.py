"""What the verbs that take several names share, and the verbs docker has beyond them.

docker acts on every name given and reports each failure on its own line, then exits 1:
``rm a nosuch b`` removes ``a`` and ``b``. :func:`each` is that loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctrexec.cli._common import fail
from ctrexec.errors import CtrexecError

#: docker's exit code when some of the names given failed.
SOME_FAILED = 1


def each(ids: Sequence[str], act: Callable[[str], object]) -> int:
    """Run ``act`` on every id; print the id when it succeeds, the error when not.

    ``act`` returning True has printed its own output (``start --json``).
    """
    failed = False
    for task_id in ids:
        try:
            printed = act(task_id)
        except CtrexecError as err:
            fail(err)
            failed = True
            continue
        if printed is not True:
            print(task_id, flush=True)
    return SOME_FAILED if failed else 0
