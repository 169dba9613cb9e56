"""Check the built sdist and wheel: metadata, contents, and what `pip install` would pull in (`tox -e build`).

    python matrix/check_dist.py --build                  # build both into a temporary directory, then check them
    python matrix/check_dist.py --build --out dist --tag v0.1.0   # the release workflow: keep them, and the tag
    python matrix/check_dist.py DIST_DIR                  # check what is already built there
    python matrix/check_dist.py --notes 0.1.0             # print CHANGELOG.md's section of that release
    python matrix/check_dist.py --prerelease v0.2.0rc1    # prerelease=true (a GitHub pre-release, never the latest)

Fails (exit 1, naming each problem) unless:

* ``twine check --strict`` passes (the long description renders; with ``--build``), and the build prints no
  deprecation;
* there is exactly one wheel and one sdist, both of the version in ``compatshim/_version.py`` (the single source),
  which is the newest release in ``CHANGELOG.md``;
* the metadata names the project's URLs (Documentation, Source, Issues, Changelog);
* the wheel holds only the ``compatshim`` package (every module a file of this checkout, so nothing stale from an old
  build directory), ``py.typed``, the ``compatshim`` console script and the ``pytest11`` entry point — no tests, no
  baselines, no reports, no ``matrix/``;
* its metadata requires ``packaging`` only, with matplotlib only under the ``bench`` extra;
* the license is PEP 639's: ``License-Expression: Apache-2.0`` (no ``License:`` field, no ``License ::``
  classifier), LICENSE in the wheel's ``.dist-info/licenses/`` and at the top of the sdist;
* the metadata names an Author, ``Requires-Python: >=3.9``, one Development Status, a classifier for each tested
  Python (``PYTHONS``) and no other, and ``CLASSIFIERS`` (Framework :: Pytest, Typing :: Typed, ...);
* the long description (README.md, PyPI's page) names ``pip install compatshim`` first in its Install section and
  never says the package is not on PyPI yet;
* the sdist holds, for packagers, LICENSE, CHANGELOG.md and every file of ``tests/`` (its data included) and of what
  the tests read (``matrix/``, ``docs/``, ``.github/``, tox.ini, ...), so that the tests run from it;
* ``pip install <wheel>`` would install no matplotlib, and ``pip install <wheel>[bench]`` would (a dry run against the
  package index);
* with ``--tag`` (checked first; nothing is built when it fails): the tag is ``v`` and that version, CHANGELOG.md has
  a dated section with entries for it (``## [X.Y.Z] - YYYY-MM-DD``), and nothing is left under ``## [Unreleased]``.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import email
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The license, as an SPDX expression (PEP 639); its text is LICENSE, in the sdist and in the wheel's .dist-info.
LICENSE_EXPRESSION = 'Apache-2.0'
#: The Pythons of the support table (tox.ini's matrix; tests/unit/test_check_dist.py holds the two together): each has
#: its classifier, and no other Python has one.
PYTHONS = ('3.9', '3.10', '3.11', '3.12', '3.13')
#: Classifiers the metadata must have, beside one ``Development Status`` and the Pythons'.
CLASSIFIERS = (
    'Framework :: Pytest',  # the pytest11 entry point
    'Typing :: Typed',  # py.typed
    'Intended Audience :: Developers',
    'Operating System :: OS Independent',
    'Topic :: Scientific/Engineering :: Artificial Intelligence',
)
#: What the sdist holds beside the package, for packagers (MANIFEST.in): the license, the changelog, and the tests
#: with every file they read, so that they run from it.
SDIST_FILES = (
    'pyproject.toml',
    'README.md',
    'LICENSE',
    'CHANGELOG.md',
    'CONTRIBUTING.md',
    'tox.ini',
    'mkdocs.yml',
    'compatshim/__init__.py',
    'compatshim/py.typed',
)
#: Folders whose every file (bytecode aside) the sdist holds: the tests with their data, and what they read.
SDIST_TREES = ('tests', 'matrix', 'docs', '.github')


def _changelog_version() -> str:
    """The newest release of CHANGELOG.md: its first ``## [X.Y.Z]`` heading (``## [Unreleased]`` is none)."""
    for line in (ROOT / 'CHANGELOG.md').read_text().splitlines():
        if line.startswith('## [') and not line.startswith('## [Unreleased]'):
            return line[4:].split(']')[0]
    raise SystemExit('CHANGELOG.md has no release')


def _version() -> str:
    tree = ast.parse((ROOT / 'compatshim' / '_version.py').read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == '__version__' for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise SystemExit('compatshim/_version.py has no __version__')


def _would_install(requirement: str) -> set[str]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / 'report.json'
        subprocess.run(
            [
                sys.executable,
                '-m',
                'pip',
                'install',
                '--quiet',
                '--dry-run',
                '--ignore-installed',
                '--report',
                str(report),
                requirement,
            ],
            check=True,
        )
        return {item['metadata']['name'].lower() for item in json.loads(report.read_text())['install']}


def _classifier_problems(classifiers: list[str]) -> list[str]:
    problems = [f'the metadata lacks the classifier {c!r}' for c in CLASSIFIERS if c not in classifiers]
    if sum(c.startswith('Development Status :: ') for c in classifiers) != 1:
        problems.append('the metadata needs one Development Status classifier')
    minors = [
        c.rsplit(' :: ', 1)[1] for c in classifiers if re.fullmatch(r'Programming Language :: Python :: 3\.\d+', c)
    ]
    if sorted(minors, key=lambda v: int(v.split('.')[1])) != list(PYTHONS):
        problems.append(f'the Python classifiers name {minors}, the tested Pythons are {list(PYTHONS)}')
    return problems


def readme_problems(text: str) -> list[str]:
    """What keeps the README (PyPI's page of the release, its long description) from reading right the day it is
    published: its ``## Install`` section must name ``pip install compatshim`` before any other install line, and no
    line may say the package is not on PyPI yet (``until ... on PyPI``, ``once (it is) released``)."""
    problems = [
        f'README.md says the package is not on PyPI yet: {line.strip()!r}'
        for line in text.splitlines()
        if re.search(r'\buntil\b.*\bPyPI\b|\bonce (it is |it\'s )?(released|published|on PyPI)\b', line, re.I)
    ]
    section = re.search(r'^## Install\b.*?$(.*?)(?=^## |\Z)', text, re.M | re.S)
    if section is None:
        return [*problems, 'README.md has no "## Install" section']
    installs = [line.strip() for line in section.group(1).splitlines() if re.search(r'\bpip install\b', line)]
    if not installs or not re.match(r'pip install compatshim(\s|$)', installs[0]):
        first = installs[0] if installs else 'none'
        problems.append(
            f'README.md\'s Install section must name "pip install compatshim" first; its first is {first!r}'
        )
    return problems


def _tree_files(tree: str) -> set[str]:
    """Every file of this checkout's folder ``tree`` (no bytecode), as the sdist names it."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / tree).rglob('*')
        if path.is_file() and '__pycache__' not in path.parts and path.suffix not in ('.pyc', '.pyo')
    }


def check(dist: Path) -> list[str]:
    problems: list[str] = []
    version = _version()
    wheels, sdists = sorted(dist.glob('*.whl')), sorted(dist.glob('*.tar.gz'))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f'expected one wheel and one sdist in {dist}, found {[p.name for p in wheels + sdists]}']
    wheel, sdist = wheels[0], sdists[0]
    if f'-{version}-' not in wheel.name or not sdist.name.endswith(f'-{version}.tar.gz'):
        problems.append(f'{wheel.name} / {sdist.name} do not carry version {version} (compatshim.__version__)')
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith('.dist-info/METADATA'))
        metadata = email.message_from_bytes(zf.read(info))
        entry_points = zf.read(next(n for n in names if n.endswith('.dist-info/entry_points.txt'))).decode()
    for name in names:
        if '.dist-info/' in name:
            continue
        if not name.startswith('compatshim/'):
            problems.append(f'the wheel holds {name}, outside the compatshim package')
        elif not (ROOT / name).is_file():
            problems.append(f'the wheel holds {name}, which is not a file of this checkout (a stale build?)')
        if name.endswith('.json') or '/tests/' in name or name.startswith(('tests/', 'matrix/')):
            problems.append(f'the wheel holds {name} (tests, baselines and reports stay in the repository)')
    if 'compatshim/py.typed' not in names:
        problems.append('the wheel has no compatshim/py.typed')
    if not any(n.endswith('.dist-info/licenses/LICENSE') for n in names):
        problems.append('the wheel has no LICENSE in its .dist-info/licenses/ (PEP 639 license-files)')
    if metadata['License-Expression'] != LICENSE_EXPRESSION:
        problems.append(f'metadata License-Expression is {metadata["License-Expression"]!r}, not {LICENSE_EXPRESSION}')
    problems += readme_problems(metadata.get_payload())  # the long description, as PyPI will show it
    classifiers = metadata.get_all('Classifier') or []
    problems += _classifier_problems(classifiers)
    if not metadata['Author']:
        problems.append('the metadata names no Author')
    if metadata['Requires-Python'] != f'>={PYTHONS[0]}':
        problems.append(f'Requires-Python is {metadata["Requires-Python"]!r}, not >={PYTHONS[0]} (the oldest tested)')
    legacy = [c for c in classifiers if c.startswith('License ::')]
    if metadata['License']:
        problems.append(f'the metadata has a License: field ({metadata["License"]!r}); PEP 639 has License-Expression')
    if legacy:
        problems.append(f'License :: classifiers beside License-Expression (PEP 639 forbids them): {legacy}')
    if metadata['Version'] != version:
        problems.append(f'metadata Version {metadata["Version"]} != compatshim.__version__ {version}')
    released = _changelog_version()
    if metadata['Version'] != released:
        problems.append(
            f'metadata Version {metadata["Version"]} is not the newest release in CHANGELOG.md ({released})'
        )
    urls = {url.split(',')[0].strip() for url in metadata.get_all('Project-URL') or []}
    if urls != {'Documentation', 'Source', 'Issues', 'Changelog'}:
        problems.append(f'Project-URL names {sorted(urls)}, expected Documentation, Source, Issues, Changelog')
    requires = metadata.get_all('Requires-Dist') or []
    plain = [r for r in requires if 'extra ==' not in r]
    if [r.split('>')[0].split('=')[0].strip().lower() for r in plain] != ['packaging']:
        problems.append(f'unconditional requirements should be packaging only, got {plain}')
    if not any(r.startswith('matplotlib') and 'extra == "bench"' in r for r in requires):
        problems.append(f'matplotlib is not declared under the bench extra: {requires}')
    for needed in ('compatshim = compatshim._cli:main', '[pytest11]', 'compatshim = compatshim.pytest_plugin'):
        if needed not in entry_points:
            problems.append(f'entry point missing: {needed!r}')
    with tarfile.open(sdist) as tf:
        members = {m.partition('/')[2] for m in tf.getnames()}  # below the sdist's top directory
    for needed in SDIST_FILES:
        if needed not in members:
            problems.append(f'the sdist lacks {needed}')
    for tree in SDIST_TREES:
        lacking = sorted(_tree_files(tree) - members)
        if lacking:
            problems.append(f'the sdist lacks {len(lacking)} files of {tree}/ (the tests run from it): {lacking[:3]}')
    lean = _would_install(str(wheel))
    full = _would_install(f'compatshim[bench] @ {wheel.resolve().as_uri()}')
    if 'matplotlib' in lean:
        problems.append(f'pip install {wheel.name} would install matplotlib')
    if 'matplotlib' not in full:
        problems.append(f'pip install {wheel.name}[bench] would not install matplotlib')
    print(f'{wheel.name}: {len(names)} files; installs {sorted(lean)}; [bench] adds {sorted(full - lean)}')
    return problems


def _build(out: Path) -> list[str]:
    """Build the sdist and the wheel (from the sdist, as pip would) into ``out``; run twine's metadata check. A
    deprecation the build backend prints (a configuration it will stop reading) is a problem too."""
    build = subprocess.run(
        [sys.executable, '-m', 'build', '--outdir', str(out), str(ROOT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if build.returncode != 0:
        print(build.stdout, file=sys.stderr)
        return [f'python -m build exited {build.returncode}']
    printed = dict.fromkeys(line.strip() for line in build.stdout.splitlines() if 'deprecat' in line.lower())
    problems = [f'the build printed a deprecation: {line}' for line in printed]
    twine = subprocess.run(
        [sys.executable, '-m', 'twine', 'check', '--strict', *map(str, sorted(out.iterdir()))],
        capture_output=True,
        text=True,
    )
    if twine.returncode != 0:
        problems.append(f'twine check --strict failed:\n{twine.stdout}{twine.stderr}')
    return problems


_LINK = re.compile(r'\[[^\]]+\]: ')  # a link definition of the changelog's, not an entry


def release_notes(version: str) -> str:
    """CHANGELOG.md's section of ``version``: the lines under ``## [version]`` up to the next ``## `` heading."""
    lines, inside = [], False
    for line in (ROOT / 'CHANGELOG.md').read_text().splitlines():
        if line.startswith('## '):
            if inside:
                break
            inside = line.startswith(f'## [{version}]')
            continue
        if inside and not _LINK.match(line):  # a link definition of the changelog's, not the notes'
            lines.append(line)
    if not inside and not lines:
        raise SystemExit(f'CHANGELOG.md has no section "## [{version}]"')
    return '\n'.join(lines).strip() + '\n'


def changelog_problems(text: str, version: str) -> list[str]:
    """What keeps the changelog ``text`` from being tagged ``v{version}``, one line each: entries still under
    ``## [Unreleased]`` (any line but a blank one or a link definition before the next ``## [`` heading), and a
    section of ``version`` that is missing, undated (``## [X.Y.Z] - YYYY-MM-DD``) or empty."""
    problems: list[str] = []
    sections: dict[str, tuple[str, list[str]]] = {}  # the bracketed name: (its heading, its lines)
    current: list[str] = []  # the lines above the first ``## [`` heading belong to none
    for line in text.splitlines():
        if line.startswith('## ['):
            current = []
            sections.setdefault(line[4:].split(']')[0], (line.rstrip(), current))
        elif line.strip() and not _LINK.match(line):
            current.append(line)
    unreleased = sections.get('Unreleased', ('', []))[1]
    if unreleased:
        lines = f'{len(unreleased)} line' + 's' * (len(unreleased) != 1)
        problems.append(
            f'CHANGELOG.md: "## [Unreleased]" still has entries ({lines}); '
            f'move them into "## [{version}] - YYYY-MM-DD" before tagging v{version}'
        )
    if version not in sections:
        return [*problems, f'CHANGELOG.md has no section "## [{version}] - YYYY-MM-DD" for the tag v{version}']
    heading, entries = sections[version]
    dated = re.fullmatch(rf'## \[{re.escape(version)}\] - (\d{{4}}-\d\d-\d\d)', heading)
    try:
        datetime.date.fromisoformat(dated.group(1) if dated else '')
    except ValueError:
        problems.append(f'CHANGELOG.md: "{heading}" is not dated; write it "## [{version}] - YYYY-MM-DD"')
    if not entries:
        problems.append(f'CHANGELOG.md: "{heading}" has no entries')
    return problems


def is_prerelease(tag: str) -> bool:
    """Whether the tag ``vVERSION`` is a pre-release by PEP 440 (an ``a``, ``b``, ``rc`` or ``dev`` segment): the
    release workflow publishes it as a GitHub pre-release, never as the latest release."""
    from packaging.version import InvalidVersion, Version  # twine's and compatshim's own dependency

    try:
        if tag.startswith('v'):
            return Version(tag[1:]).is_prerelease
    except InvalidVersion:
        pass
    raise SystemExit(f'check_dist: the tag {tag} is not v and a version (PEP 440)')


def as_released(changelog: str) -> str:
    """``changelog`` as its newest release had it: what main added under ``## [Unreleased]`` since, left out."""
    return re.sub(r'(## \[Unreleased\]\n).*?(?=\n## \[)', r'\1', changelog, count=1, flags=re.S)


def _tag_problems(tag: str) -> list[str]:
    version = _version()
    if tag != f'v{version}':
        return [f'the tag {tag} is not v{version} (compatshim.__version__)']
    return changelog_problems((ROOT / 'CHANGELOG.md').read_text(), version)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('dist', nargs='?', help='a directory holding the built sdist and wheel')
    parser.add_argument('--build', action='store_true', help='build them first')
    parser.add_argument('--out', help='with --build: build into this directory (default: a temporary one)')
    parser.add_argument('--tag', help='the release tag, which must be v and the version')
    parser.add_argument('--notes', metavar='VERSION', help="print CHANGELOG.md's section of VERSION, and nothing else")
    parser.add_argument(
        '--prerelease', metavar='TAG', help='print prerelease=true or prerelease=false (PEP 440), and nothing else'
    )
    args = parser.parse_args(argv)
    if args.notes:
        print(release_notes(args.notes), end='')
        return 0
    if args.prerelease:
        print(f'prerelease={str(is_prerelease(args.prerelease)).lower()}')
        return 0
    if bool(args.build) == bool(args.dist) or (args.out and not args.build):
        parser.error('give --build [--out DIR] or DIST_DIR')
    problems = _tag_problems(args.tag) if args.tag else []
    if problems:  # a tag that cannot be released: nothing is built
        for problem in problems:
            print(f'check_dist: {problem}', file=sys.stderr)
        print('check_dist: FAILED (the tag)')
        return 1
    if args.build:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(args.out or tmp)
            out.mkdir(parents=True, exist_ok=True)
            problems += _build(out)
            problems += check(out)
    else:
        problems += check(Path(args.dist))
    for problem in problems:
        print(f'check_dist: {problem}', file=sys.stderr)
    print('check_dist: ' + ('FAILED' if problems else 'ok'))
    return 1 if problems else 0


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
