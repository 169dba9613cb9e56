"""Regenerate the frozen requirement files under ``matrix/`` from the support table.

One file per row of ``compatshim.config.support.TESTED_RELEASES``: ``matrix/<env>.txt``, resolved by ``uv pip compile
--universal`` (valid on Linux, macOS and Windows) for the row's Python (3.11 unless it is a leg of the Python
factor). The forward-compat row also gets
``matrix/<env>.overrides.txt``, which overrides Composer's upper pins on torch/torchvision; tox passes it to uv at
install time as well (``UV_OVERRIDE``). An existing file's pins are kept where they still fit (uv reads it as its
preferences), so adding a test requirement does not move every other pin.

Usage: ``python matrix/lock.py [ENV_PREFIX ...]`` (default: every row). Needs ``uv`` on PATH and a registry.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from compatshim.config.support import DEFAULT_PYTHON, TESTED_RELEASES, TestedRelease  # noqa: E402


def requirement_file(row: TestedRelease) -> pathlib.Path:
    """The frozen requirement file of a support-table row."""
    return HERE / f'{row.env}.txt'


def override_file(row: TestedRelease) -> pathlib.Path:
    """The uv override file of a forward-compat row."""
    return HERE / f'{row.env}.overrides.txt'


def lock(row: TestedRelease) -> None:
    """Resolve and write the frozen requirement file(s) of one row."""
    top = [f'mosaicml=={row.composer}', f'torch=={row.torch}', f'torchvision=={row.torchvision}']
    command = [
        'uv',
        'pip',
        'compile',
        '--quiet',
        '--universal',
        '--python-version',
        row.python,
        '--no-header',
        '--no-annotate',
    ]
    if row.override:
        override_file(row).write_text(
            '# Composer pins torch below this build; the forward-compat leg overrides that pin.\n'
            + '\n'.join(top[1:])
            + '\n',
        )
        command += ['--override', str(override_file(row))]
    with tempfile.NamedTemporaryFile('w', suffix='.in', delete=False) as spec:
        spec.write('\n'.join(top) + '\n-r ' + str(HERE / 'test-requirements.in') + '\n')
    target = requirement_file(row)
    with tempfile.TemporaryDirectory() as tmp:
        preferences = pathlib.Path(tmp) / target.name
        if target.exists():
            preferences.write_text(target.read_text())
        subprocess.run(command + ['--output-file', str(preferences), spec.name], check=True, capture_output=True)
        body = preferences.read_text().strip()
    python_note = '' if row.python == DEFAULT_PYTHON else f', Python {row.python}'
    requirement_file(row).write_text(
        f'# Frozen by matrix/lock.py for {row.env}: Composer {row.composer}, torch {row.torch}, '
        f'torchvision {row.torchvision}{python_note}. Do not edit by hand.\n'
        + body.replace(spec.name, 'matrix/test-requirements.in')
        + '\n',
    )
    print(f'wrote {requirement_file(row).relative_to(HERE.parent)}')


def main(argv: list[str]) -> int:
    rows = [row for row in TESTED_RELEASES if not argv or row.env in argv]
    if not rows:
        print(f'no support-table row named {argv}; choose from {[r.env for r in TESTED_RELEASES]}', file=sys.stderr)
        return 2
    for row in rows:
        lock(row)
    return 0


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
