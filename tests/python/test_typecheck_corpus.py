"""The typed-shapes corpus (tests/typecheck/, issue 22): mypy --strict and pyright (strict) accept
every good program and reject every bad one on exactly the marked lines.

A marked line ends in `# expect-error: mypy[code,...] pyright[rule,...]`: each checker must report
an error on that line carrying at least those codes. Any error on an unmarked line fails."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from typecheckers import mypy_errors, pyright_errors

pytestmark = pytest.mark.typecheck

CORPUS = Path(__file__).resolve().parents[1] / "typecheck"
_MARK = re.compile(r"#\s*expect-error:\s*mypy\[(?P<mypy>[^\]]+)\]\s+pyright\[(?P<pyright>[^\]]+)\]")


def expected(checker: str) -> dict[tuple[str, int], set[str]]:
    marks: dict[tuple[str, int], set[str]] = {}
    for path in sorted(CORPUS.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (m := _MARK.search(line)) is not None:
                marks[(path.name, number)] = set(m[checker].split(","))
    return marks


def test_the_corpus_has_good_and_bad_programs() -> None:
    names = [p.name for p in CORPUS.glob("*.py")]
    assert any(n.startswith("good_") for n in names) and any(n.startswith("bad_") for n in names)
    for path in CORPUS.glob("good_*.py"):
        assert "expect-error" not in path.read_text(), f"{path.name}: a good program marks an error"
    for path in CORPUS.glob("bad_*.py"):
        assert _MARK.search(path.read_text()), f"{path.name}: a bad program marks no error"


@pytest.mark.parametrize("checker, run", [("mypy", mypy_errors), ("pyright", pyright_errors)])
def test_checker_reports_exactly_the_marked_errors(
        checker: str, run: Callable[[Path], dict[tuple[str, int], set[str]]], tmp_path: Path) -> None:
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS, work, ignore=shutil.ignore_patterns("__pycache__"))
    found = run(work)
    wanted = expected(checker)
    problems = [f"{f}:{n}: {checker} reported {sorted(codes)} on an unmarked line"
                for (f, n), codes in sorted(found.items()) if (f, n) not in wanted]
    problems += [f"{f}:{n}: {checker} should report {sorted(codes)}, reported {sorted(found.get((f, n), ()))}"
                 for (f, n), codes in sorted(wanted.items()) if not codes <= found.get((f, n), set())]
    assert not problems, "\n".join(problems)
