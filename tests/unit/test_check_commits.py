"""The commit convention's check (CONTRIBUTING.md, "Commits"; ``matrix/check_commits.py``, run by ``tox -e lint``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location('check_commits', ROOT / 'matrix' / 'check_commits.py')
assert _spec is not None and _spec.loader is not None
check_commits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_commits)


@pytest.mark.parametrize(
    'subject',
    [
        "Restore 0.24.1's DataSpec.device_transforms attribute under the shim",
        'x' * 72,
    ],
)
def test_a_subject_that_says_what_changed_passes(subject: str) -> None:
    assert check_commits.problems(subject) == []


@pytest.mark.parametrize(
    ('subject', 'problem'),
    [
        ('x' * 73, '73 characters (at most 72)'),
        ('', 'empty subject'),
        ('Review: a baseline that cannot be one is refused; the doctor says it', 'a "Review:" bundle'),
    ],
)
def test_a_long_empty_or_bundled_subject_fails(subject: str, problem: str) -> None:
    assert any(found.startswith(problem) for found in check_commits.problems(subject))
