"""ctrexec's version: the one source, read by packaging (pyproject) and by ``version``.

A constant rather than ``importlib.metadata``: that lookup imports the email
package and scans every distribution on sys.path, about 25 ms of ``ctrexec version``.
"""

VERSION = "0.1.0"
