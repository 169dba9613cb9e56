"""The README and the documentation site: a short README whose first screen shows the fix, a site whose pages are all
in its navigation, tables rendered from the code that owns them (never copied), and a strict build that fails on a
broken link (the build itself runs in ``tox -e docs``, where MkDocs is installed).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compatshim import _exits
from compatshim.bench import rule

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / 'docs'
sys.path.insert(0, str(DOCS))

import hooks  # noqa: E402
import tables  # noqa: E402

needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec('mkdocs') is None, reason='runs in tox -e docs')


def _nav(entries: list) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav(value) if isinstance(value, list) else [value]
    return pages


def test_readme_is_a_page_with_the_fix_on_its_first_screen() -> None:
    readme = (ROOT / 'README.md').read_text()
    assert len(readme) <= 10_000, f'README.md is {len(readme)} characters; move the depth into docs/'
    first_screen = '\n'.join(readme.splitlines()[:25])
    assert 'compatshim.enable()' in first_screen and 'device_transforms' in first_screen


def test_the_readme_is_the_users_page_and_the_maintainers_one_link_away() -> None:
    """README.md is PyPI's page: the words only the glossary defines for the project's own matrix and harness live in
    CONTRIBUTING.md (and docs/harness.md), which the README links to."""
    readme = (ROOT / 'README.md').read_text()
    for term in ('.ci/run', 'strict xfail', 'Python factor', 'GPU kit', '`control`'):
        assert term not in readme, f'{term!r} is maintainer material: CONTRIBUTING.md'
        assert term in (ROOT / 'CONTRIBUTING.md').read_text(), term
    assert (
        'Contributing: [CONTRIBUTING.md](https://github.com/compatshim/compatshim/blob/main/CONTRIBUTING.md)' in readme
    )


#: The maintainers' prose, at a size read in an hour (issue 53: 22,872 and 44,182 bytes before): the history of
#: internal changes stays in git, the words in docs/glossary.md, what a module does in its docstring.
PROSE_LIMITS = {'CHANGELOG.md': 4_096, 'CONTRIBUTING.md': 12_288}


@pytest.mark.parametrize('name', sorted(PROSE_LIMITS))
def test_the_changelog_and_contributing_stay_short(name: str) -> None:
    size = len((ROOT / name).read_bytes())
    assert size <= PROSE_LIMITS[name], f'{name} is {size} bytes (at most {PROSE_LIMITS[name]}); history stays in git'


def _commands(text: str) -> list[str]:
    """The commands of a Markdown text's ``bash`` blocks, one a line, comments dropped."""
    blocks = re.findall(r'```bash\n(.*?)```', text, re.S)
    return [line.split('#')[0].strip() for block in blocks for line in block.splitlines() if line.split('#')[0].strip()]


def test_the_readme_ends_with_the_two_commands_of_a_fresh_clone_and_ci_runs_its_test_command() -> None:
    """Issue 46: a newcomer finds in the README itself how to set up, run the main job (and where its report lands)
    and run the tests; CI (``.ci/run``) runs exactly the README's test command, its strictness in the environment."""
    readme = (ROOT / 'README.md').read_text()
    last = readme.split('\n## ')[-1]
    assert last.startswith('From a checkout'), 'the last section of the README'
    commands = _commands(last)
    assert commands == ['pip install tox tox-uv', 'tox -m report', 'tox -p auto'], commands
    assert 'matrix/reports/cpu/' in last
    tox = (ROOT / 'tox.ini').read_text()
    assert 'report = ' in tox and 'matrix{/}reports' in tox.split('[testenv:report]')[1]
    ci = (ROOT / '.ci' / 'run').read_text()
    runs = [line for line in ci.splitlines() if line.strip().startswith(('tox', 'pip install tox'))]
    assert runs == ['pip install tox tox-uv', 'tox -p auto'], runs
    assert re.search(r'^export TOX_SKIP_MISSING_INTERPRETERS=false$', ci, re.M), 'a missing interpreter fails CI'


def test_every_page_is_in_the_navigation_and_every_link_of_the_readme_is_there() -> None:
    config = yaml.safe_load((ROOT / 'mkdocs.yml').read_text().replace('!!python', '#'))
    nav = _nav(config['nav'])
    assert sorted(nav) == sorted(p.name for p in DOCS.glob('*.md'))
    for target in re.findall(r'\]\(docs/([a-z-]+\.md)', (ROOT / 'README.md').read_text()):
        assert target in nav, target


def test_every_generated_table_in_the_markdown_is_the_code_s() -> None:
    """GitHub, PyPI and the site show the same tables: each is written into its Markdown file between markers, and
    every committed copy is what the code renders now (``python docs/tables.py`` refreshes them)."""
    assert tables.stale() == [], 'run python docs/tables.py'
    found = {m.group(2) for path in tables.FILES for m in tables.BLOCK.finditer(path.read_text())}
    assert found == set(tables.GENERATED), 'every table is shown somewhere, and only known ones'
    readme = (ROOT / 'README.md').read_text()
    assert '<!-- begin generated: support-table -->\n' + tables.support_table() in readme
    read = {
        m for path in (ROOT / 'compatshim').rglob('*.py') for m in re.findall(r'COMPATSHIM_[A-Z_]+', path.read_text())
    }
    assert read == {name for name, _, _ in tables.VARIABLES}, 'every variable compatshim reads is documented, no other'
    assert tables.refresh('<!-- begin generated: rule -->\n<!-- end generated: rule -->') == (
        f'<!-- begin generated: rule -->\n{rule.RULE}\n<!-- end generated: rule -->'
    )
    with pytest.raises(ValueError, match='unknown generated table'):
        tables.refresh('<!-- begin generated: no-such-table -->\n<!-- end generated: no-such-table -->')


def test_a_stale_copy_fails_the_check_and_the_site_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table edited by hand (or code changed without a refresh): ``--check`` exits 1 naming the file; the MkDocs
    hook refuses the page."""
    page = (DOCS / 'support.md').read_text()
    edited = page.replace('| 0.28.0 |', '| 0.28.9 |', 1)
    assert edited != page and tables.refresh(edited) == page
    (tmp_path / 'support.md').write_text(edited)
    assert tables.stale([tmp_path / 'support.md']) == [tmp_path / 'support.md']
    with pytest.raises(ValueError, match='stale; run python docs/tables.py'):
        hooks.on_page_markdown(edited)
    assert hooks.on_page_markdown(page) == page
    assert tables.main(['--check']) == 0


def test_the_cli_reference_lists_every_option_of_every_command() -> None:
    from compatshim import _cli

    reference = tables.cli_reference()
    for flag in ('--plant-slowdown', '--plant-hook-us', '--size', '--device', '--no-png', '--pipeline', '--compare'):
        assert f'`{flag}`' in reference, flag
    assert [line for line in reference.splitlines() if line.startswith('### ')] == [
        f'### compatshim {name}' for name in ('run', 'doctor', 'bench', 'report')
    ]
    assert _cli.parser().prog == 'compatshim'


def test_every_exit_code_the_commands_use_is_in_the_table() -> None:
    codes = {code for code, _ in _exits.TABLE}
    used = {getattr(_exits, name) for name in _exits.__all__ if name.isupper() and name != 'TABLE'}
    assert used == codes


def test_tox_builds_the_docs_strictly_in_the_full_matrix() -> None:
    tox = (ROOT / 'tox.ini').read_text()
    assert re.search(r'^\s+docs$', tox.split('[testenv]')[0], re.M), 'docs is in env_list (tox -p auto)'
    assert 'mkdocs build --strict' in tox.split('[testenv:docs]')[1].split('\n[')[0]


@needs_mkdocs
def test_a_planted_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    """The build that passes in tox -e docs fails on a broken link and on a missing anchor."""
    copy = tmp_path / 'site-src'
    shutil.copytree(
        ROOT, copy, ignore=shutil.ignore_patterns('.git', '.tox', 'site', '__pycache__', 'build', '*.egg-info')
    )
    faq = copy / 'docs' / 'faq.md'
    faq.write_text(faq.read_text() + '\n[broken](nowhere.md) and [anchor](stages.md#no-such-heading)\n')
    build = [
        sys.executable,
        '-m',
        'mkdocs',
        'build',
        '--strict',
        '-d',
        str(tmp_path / 'out'),
    ]  # no -q: it hides warnings
    proc = subprocess.run(build, cwd=copy, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "link 'nowhere.md'" in proc.stderr and "anchor '#no-such-heading'" in proc.stderr


def _messages() -> list[str]:
    """Every string constant in compatshim's source: implicit concatenations joined, f-strings' literal parts."""
    import ast

    found = []
    for path in (ROOT / 'compatshim').rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value)
    return found


def test_troubleshooting_quotes_the_messages_as_the_code_writes_them() -> None:
    """Each heading of docs/troubleshooting.md quotes literal parts of a message: every one is in compatshim's code
    (Composer's and torch's own errors, marked so, excepted)."""
    messages = _messages()
    headings = [line for line in (DOCS / 'troubleshooting.md').read_text().splitlines() if line.startswith('### ')]
    assert len(headings) >= 20
    for heading in headings:
        if "(Composer's" in heading or "(torch's" in heading:
            continue
        quoted = [q for q in re.findall(r'`([^`]+)`', heading) if q not in ('strict=True', 'strict')]
        assert quoted, heading
        for fragment in quoted:
            assert any(fragment in message for message in messages), f'{fragment!r} ({heading}) is in no message'


def test_the_changelog_names_this_version_as_its_newest_release() -> None:
    """Keep a Changelog: an Unreleased section, then releases newest first, each with its date and link; the newest is
    the version the package (and its wheel's metadata, ``matrix/check_dist.py``) carries."""
    import compatshim

    text = (ROOT / 'CHANGELOG.md').read_text()
    # a pre-release (0.2.0rc1, 0.2.0.dev1) has a section of its own, as the release workflow's notes need
    releases = re.findall(r'^## \[(\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.dev\d+)?)\] - (\d{4}-\d\d-\d\d)$', text, re.M)
    assert '## [Unreleased]' in text and releases and releases[0][0] == compatshim.__version__
    for version, _ in releases:
        assert f'[{version}]: https://github.com/compatshim/compatshim/releases/tag/v{version}' in text
    assert '## Versions' in text and 'support table' in text.split('## [Unreleased]')[0]
