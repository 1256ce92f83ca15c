"""The fenced code blocks of README.md and docs/*.md, and whether each is run.

The docs are a user's first program, so their examples run in the tests
(tests/integration/test_docs_examples.py) and a block that cannot run says why, in
the line just before its fence::

    <!-- doc-test: skip REASON -->

``python`` blocks are run as Python, ``sh``/``bash``/``console``/``shell`` blocks with
``bash -e``; a block of any other language (toml, hcl, output, none) must carry the
skip marker with a reason. tests/unit/test_docs_blocks.py holds every block to that,
so a new block can't go untested unnoticed.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = frozenset({"python", "py", "python3"})
SHELL = frozenset({"sh", "bash", "console", "shell"})
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<verb>\S+)\s*(?P<reason>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its marker and its text."""

    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    marker: str | None  # "skip" or None (no marker); anything else is a mistake
    reason: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """``python`` or ``shell`` (run), ``skip`` (not run, with a reason), or
        ``unmarked`` (a mistake: a block neither run nor marked)."""
        if self.marker == "skip" and self.reason:
            return "skip"
        if self.marker is not None:
            return "unmarked"  # an unknown verb or a skip without its reason
        if self.lang in PYTHON:
            return "python"
        if self.lang in SHELL:
            return "shell"
        return "unmarked"


def parse(text: str, path: Path) -> list[Block]:
    """The fenced blocks of one markdown text, dedented by their fence's indent."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        info = opened["info"].split()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines):
            closed = _FENCE.match(lines[i])
            if closed and closed["fence"].startswith(fence) and not closed["info"].strip():
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        before = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        marked = _MARKER.match(before)
        blocks.append(
            Block(
                path=path,
                line=start + 1,
                lang=info[0].lower() if info else "",
                marker=marked["verb"] if marked else None,
                reason=marked["reason"] if marked else "",
                code=textwrap.dedent("\n".join(body)) + "\n",
            )
        )
    return blocks


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [b for p in doc_files(root) for b in parse(p.read_text(), p)]


#: A call the docs write under ctrexec's name (``ctrexec.tasks.rename(``), not one
#: inside a label key (``io.ctrexec.run.id``) or a path; the name without its ``(``.
CALL = re.compile(r"(?<![\w./-])(ctrexec(?:\.[A-Za-z_]\w*)+)\(")
