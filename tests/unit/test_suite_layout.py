"""The suite's own layout: pytest imports test files by basename (no packages here), so
two folders holding one name break collection of the whole run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_test_file_names_are_unique_across_folders() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
