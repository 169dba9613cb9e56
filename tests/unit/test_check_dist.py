"""``matrix/check_dist.py``'s rules that need no build: the metadata it demands of ``pyproject.toml``, held to the
support table, and each rule failing on a planted mistake. (The build itself is ``tox -e build``.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from compatshim._support import TESTED_RELEASES

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'matrix'))

import check_dist  # noqa: E402


def _project_list(key: str) -> list[str]:
    """A list of strings of ``[project]`` in pyproject.toml (read without tomllib, which Python 3.9 and 3.10 lack)."""
    text = (ROOT / 'pyproject.toml').read_text().split('\n[project]\n')[1].split('\n[')[0]
    start = text.index(f'\n{key} = [') + len(f'\n{key} = ')
    end = text.index('\n]', start) + 2
    return list(ast.literal_eval(text[start:end]))


def test_the_pythons_are_the_support_tables() -> None:
    tested = sorted({row.python for row in TESTED_RELEASES}, key=lambda v: tuple(map(int, v.split('.'))))
    assert list(check_dist.PYTHONS) == tested
    assert f'requires-python = ">={tested[0]}"' in (ROOT / 'pyproject.toml').read_text()


def test_pyproject_has_every_classifier_the_check_demands() -> None:
    classifiers = _project_list('classifiers')
    assert check_dist._classifier_problems(classifiers) == []
    assert not any(c.startswith('License ::') for c in classifiers), 'PEP 639: License-Expression alone'


@pytest.mark.parametrize(
    ('change', 'expected'),
    [
        (lambda cs: [c for c in cs if c != 'Typing :: Typed'], "lacks the classifier 'Typing :: Typed'"),
        (lambda cs: [c for c in cs if c != 'Framework :: Pytest'], "lacks the classifier 'Framework :: Pytest'"),
        (lambda cs: [c for c in cs if not c.startswith('Development Status')], 'one Development Status'),
        (lambda cs: [*cs, 'Development Status :: 5 - Production/Stable'], 'one Development Status'),
        (lambda cs: [c for c in cs if not c.endswith(':: 3.13')], 'the Python classifiers name'),
        (lambda cs: [*cs, 'Programming Language :: Python :: 3.8'], 'the Python classifiers name'),
    ],
    ids=['no-typed', 'no-pytest', 'no-status', 'two-statuses', 'a-python-missing', 'an-untested-python'],
)
def test_a_planted_classifier_mistake_fails(change, expected: str) -> None:
    problems = check_dist._classifier_problems(change(_project_list('classifiers')))
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_keywords_and_authors() -> None:
    keywords = _project_list('keywords')
    assert {'composer', 'mosaicml', 'pytorch', 'device_transforms', 'monkeypatch', 'benchmark'} <= set(keywords)
    assert 'authors = [{ name = "The compatshim authors" }]' in (ROOT / 'pyproject.toml').read_text()
