"""Entry point: build the parser from the command modules and map errors to exit codes."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ctrexec.cli import _common, daemon, groups, images, info, netns, tasks
from ctrexec.errors import CtrexecError

COMMAND_MODULES = (info, tasks, images, groups, netns, daemon)


def build_parser() -> _common.ArgumentParser:
    parser = _common.ArgumentParser(
        prog="ctrexec",
        description="Run containers through containerd in pre-created network namespaces.",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_common.ArgumentParser
    )
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code: int = args.func(args)
    except CtrexecError as err:
        return _common.fail(err)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
