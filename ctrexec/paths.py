"""The one type a public ctrexec call takes for a filesystem path.

Callers hold paths as ``str`` (a scheduler's f-string) or ``pathlib.Path``; every public
signature and attrs field that names a file or directory accepts both, as ``open`` does,
and converts at the boundary, so what is stored keeps the type it had (a TaskConfig's
``log_dir`` stays a ``str`` in its JSON record). Named as typeshed's ``_typeshed.StrPath``
(the same union), and not ``PathLike``, which would shadow ``os.PathLike``'s meaning.
mypy reads the plain assignment as a type alias; ``typing.TypeAlias`` would load
``typing``, which the command line's light verbs do not pay for. The library's modules
import it under ``TYPE_CHECKING`` only, so no verb loads this module.
"""

from __future__ import annotations

import os

#: A filesystem path as a public call takes it: ``str`` or ``os.PathLike[str]``.
StrPath = str | os.PathLike[str]
