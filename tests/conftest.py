"""Shared fixtures: the installed release, the device under test, and the shim/control legs.

``COMPATSHIM_TEST_DEVICE`` (set by tox's device factor) picks the device: ``cpu`` runs the CPU fake accelerator
(:mod:`compatshim.testing`), ``cuda`` and ``mps`` the real ones. Where the chosen accelerator is absent, every test
marked ``device`` is skipped with that reason; the rest (gating, registry, support table) still run.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compatshim
from compatshim._support import AFFECTED, DEFAULT_PYTHON, TESTED_RELEASES, Family, family_of

COMPOSER = importlib.metadata.version('mosaicml')
FAMILY = family_of(COMPOSER) if COMPOSER in AFFECTED else None
IS_AFFECTED = FAMILY is not None

#: Whether this env's release is the newest of its family in the support table (0.24.1 stands for the unaffected
#: ones; the forward-compat leg is 0.32.1 too). Tests of mechanisms that depend on the release only through its family
#: (compatshim run's plumbing, the doctor's variants, the two-node launch) run there, to keep the matrix fast; every
#: placement and coherence test with its control still runs on every release.
#: The Python-factor envs (any Python but the default) run everything else: these tests exercise processes and
#: launchers, not the interpreter's version, and run in the default-Python env of the same release.
PYTHON = f'{sys.version_info.major}.{sys.version_info.minor}'
REPRESENTATIVE = COMPOSER == max((r.composer for r in TESTED_RELEASES if r.family is FAMILY), key=Version) and (
    PYTHON == DEFAULT_PYTHON
)
PER_FAMILY = pytest.mark.skipif(
    not REPRESENTATIVE,
    reason=f'runs on the newest release of the {FAMILY.value if FAMILY else "unaffected"} family, on Python '
    f'{DEFAULT_PYTHON}, only (mechanism, not release or interpreter)',
)
from conftest_device import DEVICE, DEVICE_MISSING, make_device  # noqa: E402,F401 (re-exported to tests)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if DEVICE_MISSING is None:
        return
    skip = pytest.mark.skip(reason=DEVICE_MISSING)
    for item in items:
        if 'device' in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config: Any) -> str:
    return f'compatshim: Composer {COMPOSER} ({FAMILY.value if FAMILY else "unaffected"}), device {DEVICE}'


def _control_reason() -> str:
    return {
        Family.HOST: f'control: Composer {COMPOSER} runs device_transforms on the host',
        Family.DROPPED: f'control: Composer {COMPOSER} never calls device_transforms',
        Family.REJECTED: f'control: Composer {COMPOSER} rejects device_transforms with TypeError',
    }.get(FAMILY, '')  # type: ignore[arg-type]


#: Marks a leg run without the shim: it must fail on every affected release, and pass on an unaffected one.
CONTROL = pytest.mark.xfail(
    IS_AFFECTED, strict=True, reason=_control_reason(), raises=(AssertionError, TypeError, ValueError)
)

#: Legs of a placement/coherence test: with the shim (default stage), and the control without it.
LEGS = [pytest.param('shim', id='shim'), pytest.param('control', id='control', marks=[CONTROL, pytest.mark.control])]

#: Tests of stage "microbatch" only make sense where the shim patches.
NEEDS_PATCH = pytest.mark.skipif(not IS_AFFECTED, reason=f'Composer {COMPOSER} is unaffected: the shim patches nothing')


@pytest.fixture
def leg(request: Any) -> Iterator[str]:
    """Enable the shim for the ``shim`` leg (stage from the companion ``stage`` marker), not for control."""
    name = request.param
    marker = request.node.get_closest_marker('stage')
    stage = marker.args[0] if marker else 'batch'
    if name == 'shim':
        compatshim.enable(stage=stage)
    try:
        yield name
    finally:
        compatshim.disable()


@pytest.fixture(autouse=True)
def _always_disabled_after() -> Iterator[None]:
    yield
    compatshim.disable()


@pytest.fixture
def dev_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The installed Composer's code, reporting itself as the development head ``0.33.0.dev0``.

    A ``mosaicml-0.33.0.dev0.dist-info`` goes first on ``sys.path`` (and on ``PYTHONPATH``, for child processes), so
    that ``importlib.metadata`` sees a release outside the support table whose patch targets are those of the
    installed one — as on Composer's real development head, whose targets are unchanged since 0.32.1.
    """
    version = '0.33.0.dev0'
    root = tmp_path / 'dev-build'
    dist = root / f'mosaicml-{version}.dist-info'
    dist.mkdir(parents=True)
    (dist / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: mosaicml\nVersion: {version}\n')
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(filter(None, [str(root), os.environ.get('PYTHONPATH')])))
    assert importlib.metadata.version('mosaicml') == version
    return version


def pytest_configure(config: Any) -> None:
    config.addinivalue_line('markers', 'stage(name): the stage the shim leg enables')
