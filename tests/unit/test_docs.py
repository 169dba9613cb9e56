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

from compatshim import _exits, _settings, _support
from compatshim.bench import rule

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / 'docs'
sys.path.insert(0, str(DOCS))

import hooks  # noqa: E402

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


def test_readme_tables_are_the_code_s() -> None:
    readme = (ROOT / 'README.md').read_text()
    assert _support.markdown_table() in readme


def test_every_page_is_in_the_navigation_and_every_link_of_the_readme_is_there() -> None:
    config = yaml.safe_load((ROOT / 'mkdocs.yml').read_text().replace('!!python', '#'))
    nav = _nav(config['nav'])
    assert sorted(nav) == sorted(p.name for p in DOCS.glob('*.md'))
    for target in re.findall(r'\]\(docs/([a-z-]+\.md)', (ROOT / 'README.md').read_text()):
        assert target in nav, target


def test_generated_tables_render_from_the_code() -> None:
    for page in DOCS.glob('*.md'):
        rendered = hooks.render(page.read_text())
        assert '<!-- generated:' not in rendered, page.name
    assert _exits.markdown() in hooks.render('<!-- generated: exit-codes -->')
    assert hooks.render('<!-- generated: environment -->') == _settings.variables_markdown()
    assert hooks.render('<!-- generated: rule -->') == rule.RULE
    assert all(f'`{name}`' in _settings.variables_markdown() for name, _, _ in _settings.VARIABLES)
    with pytest.raises(ValueError, match='unknown generated table'):
        hooks.render('<!-- generated: no-such-table -->')


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
