"""hclog-style JSON lines on stderr, the log format go-plugin hosts understand.

go-plugin reads the plugin's stderr line by line and logs a line that parses as
JSON with ``@level``, ``@message`` and ``@timestamp`` at its own level, with the other
keys as fields. After the host dies the pipe has no reader: a write then fails with
EPIPE, which must not kill the plugin (a restarted agent reattaches to it) nor make
:mod:`logging` print a traceback to the same broken pipe.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from typing import Any, TextIO

#: Record attributes that are not user fields.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_LEVELS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
    logging.CRITICAL: "error",
}


def _timestamp(at: float) -> str:
    """Go's ``2006-01-02T15:04:05.000000Z07:00``: microseconds, ``Z`` or ``+hh:mm``."""
    text = datetime.fromtimestamp(at).astimezone().isoformat(timespec="microseconds")
    return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text


class HclogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "@level": _LEVELS.get(record.levelno, "info"),
            "@message": record.getMessage(),
            "@timestamp": _timestamp(record.created),
            "@module": record.name,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, int | float | bool | str) else str(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


class QuietStreamHandler(logging.StreamHandler[TextIO]):
    """Drops a line the stream cannot take (EPIPE, a closed pipe) without a word."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        del record


def install(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    handler = QuietStreamHandler(stream or sys.stderr)
    handler.setFormatter(HclogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
