"""The support table (compatshim/config/support.py) agrees with tox.ini, matrix/ and the README."""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from compatshim.config.support import AFFECTED, DEFAULT_PYTHON, TESTED_RELEASES, UNAFFECTED, Family, family_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'matrix'))

import plan  # noqa: E402 - matrix/plan.py: tox.ini's envs and labels, expanded (what CI plans from)


def _tox() -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / 'tox.ini')
    return config


#: Envs in tox's env_list that are not rows of the support table (tooling checks run by `tox` too).
TOOLING_ENVS = ['unit', 'lint', 'docs', 'build', 'gpu-kit-offline']


def test_tox_env_list_is_the_table_on_cpu() -> None:
    """Every row once (in the order that finishes soonest under ``tox -p auto``: the longest envs first)."""
    envs = plan.tox_config()[0]
    rows = [e for e in envs if e not in TOOLING_ENVS]
    assert sorted(rows) == sorted(f'{row.env}-cpu' for row in TESTED_RELEASES) and len(set(rows)) == len(rows)
    assert all(e in envs for e in TOOLING_ENVS)


def _labels() -> dict[str, list[str]]:
    return plan.tox_config()[1]


@pytest.mark.parametrize('device', ['cuda', 'mps'])
def test_tox_device_labels_cover_the_table(device: str) -> None:
    assert _labels()[device] == [f'{row.env}-{device}' for row in TESTED_RELEASES]


#: The benchmark runs on the default Python: one bench env per row of it, per device.
BENCHED = [row for row in TESTED_RELEASES if row.python == DEFAULT_PYTHON]


@pytest.mark.parametrize(('label', 'device'), [('report', 'cpu'), ('report-cuda', 'cuda'), ('report-mps', 'mps')])
def test_report_labels_bench_every_release_then_judge(label: str, device: str) -> None:
    """`tox -m report` benches every row (default Python) on the device, then runs the report env after them all."""
    assert _labels()[label] == [f'bench-{row.env}-{device}' for row in BENCHED] + ['report']
    depends = [e for line in _tox()['testenv:report']['depends'].split() for e in plan.expand(line)]
    assert {f'bench-{row.env}-{device}' for row in BENCHED} <= set(depends)


@pytest.mark.parametrize('row', TESTED_RELEASES, ids=lambda r: r.env)
def test_matrix_file_pins_the_row(row) -> None:
    text = (ROOT / 'matrix' / f'{row.env}.txt').read_text()
    for name, version in [('mosaicml', row.composer), ('torch', row.torch), ('torchvision', row.torchvision)]:
        assert re.search(rf'^{name}=={re.escape(version)}\b', text, re.M), (
            f'{row.env}.txt does not pin {name}=={version}'
        )
    assert f'matrix/{row.env}.txt' in (ROOT / 'tox.ini').read_text()
    assert (ROOT / 'matrix' / f'{row.env}.overrides.txt').exists() == row.override


@pytest.mark.parametrize('row', TESTED_RELEASES, ids=lambda r: r.env)
def test_readme_support_table_has_the_row(row) -> None:
    readme = (ROOT / 'README.md').read_text()
    assert f'| {row.composer} | {row.torch} | ' in readme  # its words: docs/tables.py, held by test_docs


def test_at_most_six_torch_builds() -> None:
    """Distinct torch versions on disk (uv keeps one wheel per Python version of each, hardlinked into the envs)."""
    assert len({row.torch for row in TESTED_RELEASES}) <= 6


def test_python_factor() -> None:
    """0.24.1 and the newest release of each affected family run on two more Pythons: the oldest and the newest."""
    newest = {r.family: r.composer for r in TESTED_RELEASES if r.python == DEFAULT_PYTHON and not r.override}
    factor = {(r.composer, r.python) for r in TESTED_RELEASES if r.python != DEFAULT_PYTHON}
    default_minor = int(DEFAULT_PYTHON.split('.')[1])
    assert set(newest.values()) == {c for c, _ in factor}
    for composer in newest.values():
        minors = sorted(int(p.split('.')[1]) for c, p in factor if c == composer)
        assert len(minors) == 2 and minors[0] < default_minor < minors[1], (composer, minors)


def test_ranges() -> None:
    assert family_of('0.24.1') is None and Version('0.24.1') in UNAFFECTED
    assert family_of('0.25.0') is family_of('0.26.1') is Family.HOST
    assert family_of('0.27.0') is family_of('0.28.0') is Family.DROPPED
    assert family_of('0.29.0') is family_of('0.32.1') is Family.REJECTED
    assert Version('0.32.1') in AFFECTED and Version('0.33.0.dev0') not in AFFECTED
    assert not AFFECTED.contains('0.32.2')
