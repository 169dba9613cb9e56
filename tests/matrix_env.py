"""What this test environment is: the installed Composer, its family, and the env's role in the matrix.

Every row of the support table is a tox env; what runs there depends on its **role**:

- ``unit``: no Composer installed (``tox -e unit``): the pure tests under ``tests/unit``.
- ``release``: every row on the default Python: the in-process tests under ``tests/release`` (placement, coherence,
  stages, hardening, the API, each with its control leg). Release-specific behaviour is proven here, in every release.
- ``family``: the newest release of each family (and 0.24.1, the unaffected reference), default Python: the release
  tests, plus the fresh-process mechanisms under ``tests/process`` (``compatshim run``, launcher ranks, the doctor's
  child, the pytest plugin in a child), which depend on a release only through its family.
- ``python``: the Python factor (a row with another Python): only what depends on the interpreter: tests marked
  ``python`` (import, bootstrap, patching by code shape, sourceless installs, the plugin).
- ``forward``: the forward-compat row (Composer's torch pins overridden): the release tests, and what depends on torch
  (tests marked ``forward``: the launcher's ranks).

A place that is not a role: ``each-python``, the newest release on each Python of the table, once per Python (what
depends on the interpreter but not on the release, such as the pytest plugin in a child).

A test says where it runs with ``@pytest.mark.runs_in(...)`` (roles, or ``family:<name>`` for one family's env);
without it, ``tests/release`` runs in ``release``, ``family`` and ``forward``, ``tests/process`` in ``family``, and
``tests/unit`` in ``unit``. Markers ``python`` and ``forward`` add those roles.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable, Iterable
from typing import Optional, TypeVar

from packaging.version import Version

from compatshim.config.support import (
    AFFECTED,
    DEFAULT_PYTHON,
    TESTED_RELEASES,
    UNAFFECTED_FAMILY,
    Family,
    TestedRelease,
    family_of,
)

__all__ = [
    'COMPOSER',
    'EACH_PYTHON',
    'FAMILY',
    'FAMILY_NAME',
    'FAMILY_ROWS',
    'IS_AFFECTED',
    'ROLE',
    'ROW',
    'envs_of',
]


def _installed(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


COMPOSER = _installed('mosaicml')
FAMILY: Optional[Family] = family_of(COMPOSER) if COMPOSER is not None and COMPOSER in AFFECTED else None
IS_AFFECTED = FAMILY is not None
#: The family's name as ``runs_in('family:<name>')`` writes it (``unaffected`` for 0.24.1 and older).
FAMILY_NAME = FAMILY.value if FAMILY else UNAFFECTED_FAMILY
PYTHON = f'{sys.version_info.major}.{sys.version_info.minor}'
K = TypeVar('K')


def _newest_by(key: Callable[[TestedRelease], K], rows: Iterable[TestedRelease]) -> dict[K, TestedRelease]:
    """The newest release of ``rows`` for each value of ``key``."""
    newest: dict[K, TestedRelease] = {}
    for row in rows:
        if key(row) not in newest or Version(row.composer) > Version(newest[key(row)].composer):
            newest[key(row)] = row
    return newest


#: The family envs: the newest row of each family (``None``: 0.24.1, the unaffected reference), on the default Python.
FAMILY_ROWS = _newest_by(
    lambda row: row.family, (row for row in TESTED_RELEASES if row.python == DEFAULT_PYTHON and not row.override)
)


def _row() -> Optional[TestedRelease]:
    """The support-table row this interpreter is (Composer, torch and Python), or ``None`` (a user's environment)."""
    torch = _installed('torch')
    torch = torch.split('+')[0] if torch else None
    for row in TESTED_RELEASES:
        if (row.composer, row.torch, row.python) == (COMPOSER, torch, PYTHON):
            return row
    return None


ROW = _row()


def _role() -> str:
    if COMPOSER is None:
        return 'unit'
    if ROW is None:
        return 'release'  # a user's or the GPU kit's environment: the in-process tests
    if ROW.python != DEFAULT_PYTHON:
        return 'python'
    if ROW.override:
        return 'forward'
    return 'family' if FAMILY_ROWS.get(ROW.family) == ROW else 'release'


ROLE = _role()


#: The place ``each-python``: one env per Python of the table, its newest release (the forward-compat row aside).
EACH_PYTHON = frozenset(
    _newest_by(lambda row: row.python, (row for row in TESTED_RELEASES if not row.override)).values()
)


def envs_of(where: str, device: str = 'cpu') -> list[str]:
    """The tox envs a ``runs_in`` place stands for (``family``, ``family:host``, ``python``, ``unit``, ...)."""
    role, _, family = where.partition(':')
    if role == 'unit':
        return ['unit']
    if role == 'each-python':
        return sorted(r.on(device) for r in EACH_PYTHON)
    if role == 'family':
        rows = [r for f, r in FAMILY_ROWS.items() if not family or (f.value if f else UNAFFECTED_FAMILY) == family]
    elif role == 'python':
        rows = [r for r in TESTED_RELEASES if r.python != DEFAULT_PYTHON]
    elif role == 'forward':
        rows = [r for r in TESTED_RELEASES if r.override]
    else:
        rows = [r for r in TESTED_RELEASES if r.python == DEFAULT_PYTHON and not r.override]
    return [r.on(device) for r in rows]
