"""``matrix/check_dist.py``'s rules that need no build: the metadata it demands of ``pyproject.toml``, held to the
support table, and each rule failing on a planted mistake. (The build itself is ``tox -e build``.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from compatshim.config.support import TESTED_RELEASES

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


#: CHANGELOG.md as its newest release had it (main adds entries under Unreleased until the next).
CHANGELOG = check_dist.as_released((ROOT / 'CHANGELOG.md').read_text())
#: A changelog as short as the rules need: the version policy above the releases, an empty Unreleased, one release.
SHORT = """# Changelog

## Versions

- **patch** (0.1.x): fixes only.

## [Unreleased]

## [0.2.0rc1] - 2026-12-10

### Fixed

- a fix

[Unreleased]: https://github.com/compatshim/compatshim/compare/v0.2.0rc1...HEAD
[0.2.0rc1]: https://github.com/compatshim/compatshim/releases/tag/v0.2.0rc1
"""


def test_the_changelog_as_committed_can_be_tagged() -> None:
    from compatshim import __version__

    assert check_dist.changelog_problems(CHANGELOG, __version__) == []
    assert check_dist.changelog_problems(SHORT, '0.2.0rc1') == [], 'a pre-release has its own dated section'


def test_entries_left_under_unreleased_refuse_the_tag() -> None:
    """The changelog as it was before 0.1.0 was folded: its entries under Unreleased, above a dated 0.1.0."""
    before = CHANGELOG.replace('## [Unreleased]\n', '## [Unreleased]\n\n### Added\n\n- a thing\n  on two lines\n', 1)
    assert before != CHANGELOG
    assert check_dist.changelog_problems(before, '0.1.0') == [
        'CHANGELOG.md: "## [Unreleased]" still has entries (3 lines); move them into "## [0.1.0] - YYYY-MM-DD" '
        'before tagging v0.1.0'
    ]
    only_a_heading = SHORT.replace('## [Unreleased]\n', '## [Unreleased]\n\n### Added\n', 1)
    assert len(check_dist.changelog_problems(only_a_heading, '0.2.0rc1')) == 1


@pytest.mark.parametrize(
    ('heading', 'expected'),
    [
        ('## [0.2.0rc1]', '"## [0.2.0rc1]" is not dated; write it "## [0.2.0rc1] - YYYY-MM-DD"'),
        ('## [0.2.0rc1] - TBD', '"## [0.2.0rc1] - TBD" is not dated'),
        ('## [0.2.0rc1] - 2026-13-40', '"## [0.2.0rc1] - 2026-13-40" is not dated'),
        ('## [0.2.0rc1] 2026-12-10', '"## [0.2.0rc1] 2026-12-10" is not dated'),
        ('## [0.2.0] - 2026-12-10', 'no section "## [0.2.0rc1] - YYYY-MM-DD" for the tag v0.2.0rc1'),
    ],
    ids=['undated', 'tbd', 'no-such-day', 'no-dash', 'missing'],
)
def test_a_section_missing_or_undated_refuses_the_tag(heading: str, expected: str) -> None:
    planted = SHORT.replace('## [0.2.0rc1] - 2026-12-10', heading, 1)
    problems = check_dist.changelog_problems(planted, '0.2.0rc1')
    assert len(problems) == 1 and expected in problems[0], problems


def test_an_empty_section_refuses_the_tag() -> None:
    empty = SHORT.replace('### Fixed\n\n- a fix\n', '', 1)
    assert check_dist.changelog_problems(empty, '0.2.0rc1') == [
        'CHANGELOG.md: "## [0.2.0rc1] - 2026-12-10" has no entries'
    ]


def test_a_tag_that_cannot_be_released_stops_before_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--build --tag`` as the release workflow runs it: exit 1, one line naming the problem, nothing built."""
    (tmp_path / 'compatshim').mkdir()
    (tmp_path / 'compatshim' / '_version.py').write_text("__version__ = '0.2.0rc1'\n")
    (tmp_path / 'CHANGELOG.md').write_text(SHORT.replace('## [Unreleased]\n', '## [Unreleased]\n\n- pending\n', 1))
    monkeypatch.setattr(check_dist, 'ROOT', tmp_path)
    monkeypatch.setattr(check_dist, '_build', lambda out: pytest.fail('built despite the tag'))
    assert check_dist.main(['--build', '--out', str(tmp_path / 'dist'), '--tag', 'v0.2.0rc1']) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        'check_dist: CHANGELOG.md: "## [Unreleased]" still has entries (1 line); move them into '
        '"## [0.2.0rc1] - YYYY-MM-DD" before tagging v0.2.0rc1'
    ]
    assert not (tmp_path / 'dist').exists()


README = (ROOT / 'README.md').read_text()
#: The Install section of the README before the release, as a user would have read it on PyPI the day it came out.
BEFORE_THE_RELEASE = """## Install

Until 0.1.0 is on PyPI (the release workflow publishes it from a tag), install it from the repository or a wheel:

```bash
pip install "git+https://github.com/compatshim/compatshim@v0.1.0"      # or: uv pip install "git+..."
pip install .                     # from a checkout (uv pip install .)
pip install compatshim            # once it is released
```

## Three ways to enable it
"""


def _with_install(section: str) -> str:
    start, end = README.index('## Install\n'), README.index('## Three ways to enable it\n')
    return README[:start] + section + README[end + len('## Three ways to enable it\n') :]


def test_the_readme_reads_right_on_pypi_the_day_it_is_published() -> None:
    assert check_dist.readme_problems(README) == []
    install = README.split('## Install\n')[1].split('\n## ')[0]
    assert 'pip install "compatshim[bench]"' in install
    assert install.index('pip install compatshim') < install.index('pip install "git+') < install.index('pip install .')


def test_a_readme_written_before_the_release_fails() -> None:
    problems = check_dist.readme_problems(_with_install(BEFORE_THE_RELEASE))
    assert problems == [
        "README.md says the package is not on PyPI yet: 'Until 0.1.0 is on PyPI (the release workflow publishes it "
        "from a tag), install it from the repository or a wheel:'",
        "README.md says the package is not on PyPI yet: 'pip install compatshim            # once it is released'",
        'README.md\'s Install section must name "pip install compatshim" first; its first is '
        '\'pip install "git+https://github.com/compatshim/compatshim@v0.1.0"      # or: uv pip install "git+..."\'',
    ]


@pytest.mark.parametrize(
    ('section', 'expected'),
    [
        ('## Install\n\n```bash\npip install .\npip install compatshim\n```\n\n', "its first is 'pip install .'"),
        ('## Install\n\n```bash\nuv pip install compatshim\n```\n\n', "its first is 'uv pip install compatshim'"),
        ('## Install\n\nFrom PyPI.\n\n', "its first is 'none'"),
        ('## Setup\n\n```bash\npip install compatshim\n```\n\n', 'README.md has no "## Install" section'),
        ('## Install\n\n```bash\npip install compatshim\n```\n\nNot until it reaches PyPI.\n\n', 'not on PyPI yet'),
    ],
    ids=['a-checkout-first', 'uv-first', 'no-install-line', 'no-install-section', 'until-pypi'],
)
def test_a_planted_install_section_fails(section: str, expected: str) -> None:
    problems = check_dist.readme_problems(_with_install(section + '## Three ways to enable it\n'))
    assert len(problems) == 1 and expected in problems[0], problems
