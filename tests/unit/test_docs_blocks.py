"""Every code block of README.md and docs/*.md is either run by the tests or marked
with the reason it is not (tests/_docblocks.py), and every call the docs
write as ``ctrexec.NAME(...)`` is public API: docs/library.md once taught
``ctrexec.tasks.rename(...)``, an AttributeError for the user who copied it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _docblocks import CALL, PYTHON, ROOT, all_blocks, doc_files, parse
from _usercode import private_uses

import ctrexec


def test_every_block_is_run_or_says_why_not() -> None:
    unmarked = [
        f"{b.where} ```{b.lang} (marker {b.marker!r}, reason {b.reason!r})"
        for b in all_blocks()
        if b.kind == "unmarked"
    ]
    assert not unmarked, (
        "blocks neither run nor marked `<!-- doc-test: skip REASON -->` "
        f"(tests/_docblocks.py): {unmarked}"
    )


def test_the_docs_have_blocks_that_run() -> None:
    kinds = {b.kind for b in all_blocks()}
    assert {"python", "shell", "skip"} <= kinds


def test_parse_reads_markers_indented_fences_and_reasons() -> None:
    text = "\n".join(
        [
            "1. a step",
            "",
            "   ```sh",
            "   echo one",
            "   ```",
            "<!-- doc-test: skip needs a registry -->",
            "```toml",
            "a = 1",
            "```",
            "<!-- doc-test: skip -->",
            "```python",
            "x = 1",
            "```",
            "<!-- doc-test: later maybe -->",
            "```python",
            "y = 1",
            "```",
            "````",
            "```python",
            "inside = True",
            "```",
            "````",
        ]
    )
    blocks = parse(text, ROOT / "x.md")
    assert [(b.line, b.lang, b.kind) for b in blocks] == [
        (3, "sh", "shell"),
        (7, "toml", "skip"),
        (11, "python", "unmarked"),  # a skip says why
        (15, "python", "unmarked"),  # an unknown verb is a mistake, not a skip
        (18, "", "unmarked"),
    ]
    assert blocks[0].code == "echo one\n"
    assert blocks[1].reason == "needs a registry"
    assert "inside = True" in blocks[4].code


def test_every_call_the_docs_teach_is_public_api() -> None:
    """A call written ``ctrexec.NAME(...)`` must work after ``import ctrexec``: NAME is
    one of the names ctrexec exports, never a path into a private module."""
    wrong = sorted(
        {
            f"{path.relative_to(ROOT)}: {name}(...)"
            for path in doc_files()
            for name in CALL.findall(path.read_text())
            if name.count(".") != 1 or name.split(".")[1] not in ctrexec.__all__
        }
    )
    assert not wrong, f"the docs teach calls that are not ctrexec's public API: {wrong}"
    for path in doc_files():
        for name in CALL.findall(path.read_text()):
            assert callable(getattr(ctrexec, name.split(".")[1]))


def test_doc_files_are_the_readme_and_docs() -> None:
    names = [p.relative_to(ROOT) for p in doc_files()]
    assert names[0] == Path("README.md")
    assert Path("docs/library.md") in names


def test_doctor_is_the_function_whatever_was_loaded_first() -> None:
    """``doctor`` is also the name of its subpackage: loading ``gc`` or ``Scope`` first
    made ``ctrexec.doctor`` the module (docs/reliability.md's call a TypeError)."""
    probe = (
        "import ctrexec\n"
        "from ctrexec import gc, Scope\n"
        "from ctrexec.doctor import prune\n"
        "from ctrexec import doctor\n"
        "assert callable(ctrexec.doctor) and doctor is ctrexec.doctor, ctrexec.doctor\n"
        "assert doctor.__module__ == 'ctrexec.doctor.checks'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_no_python_block_imports_a_private_module() -> None:
    """The docs teach the public API: a block that imports ``ctrexec.groups.implicit``
    (as the review's scheduler example had to) teaches what the next release breaks."""
    blocks = [b for b in all_blocks() if b.lang in PYTHON]
    assert any(b.path.name == "library.md" for b in blocks)
    private = [found for b in blocks for found in private_uses(b.code, str(b.where))]
    assert private == []
