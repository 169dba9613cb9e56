"""The support table: which Composer releases compatshim knows, and what each needs; the one source of version gating
(``tests/unit/test_support_table.py`` holds ``tox.ini``, ``matrix/`` and the README to it). Imports only packaging."""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib.metadata
import sys
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

__all__ = [
    'HOOKS', 'AFFECTED', 'Family', 'TestedRelease', 'TESTED_RELEASES', 'UNAFFECTED', 'UNAFFECTED_FAMILY',
    'WITHOUT_SHIM', 'family_of', 'installed', 'split_env',
]  # fmt: skip

#: Releases that run ``device_transforms`` on the device themselves: the shim leaves them alone.
UNAFFECTED = SpecifierSet('<0.25.0')

#: Releases the shim has read and patches. Anything newer (including dev builds) is refused unless opted in.
AFFECTED = SpecifierSet('>=0.25.0,<=0.32.1')


class Family(str, enum.Enum):
    """How an affected release treats ``DataSpec(device_transforms=fn)``; each family has its own patch plan."""

    #: 0.25.0–0.26.x: ``fn`` runs at batch level *before* the move (on the host); the move happens per microbatch.
    HOST = 'host'
    #: 0.27.0–0.28.x: the deprecated argument is assigned to ``batch_transforms``, then overwritten: never called.
    DROPPED = 'dropped'
    #: 0.29.0 and later: the keyword is gone and ``DataSpec`` raises ``TypeError``.
    REJECTED = 'rejected'


#: By family: the DataSpec transform hooks Composer's trainer reads and calls, the batch-level one first.
HOOKS: dict[Family, tuple[str, ...]] = {
    Family.HOST: ('device_transforms',),
    Family.DROPPED: ('batch_transforms', 'microbatch_transforms'),
    Family.REJECTED: ('batch_transforms', 'microbatch_transforms'),
}

#: What each family does with ``device_transforms`` without the shim (``None``: unaffected): the table's, the notices'.
WITHOUT_SHIM: dict[Family | None, str] = {
    None: 'on device, once per batch (train, eval, predict)',
    Family.HOST: 'CPU: runs before the batch is moved (train, eval); predict on device',
    Family.DROPPED: 'never called: DataSpec assigns it, then overwrites it',
    Family.REJECTED: "TypeError: unexpected keyword argument 'device_transforms'",
}

#: What results and reports call the releases below 0.25.0 (not a :class:`Family`: :func:`family_of` gives ``None``).
UNAFFECTED_FAMILY = 'unaffected'

_FAMILY_RANGES: tuple[tuple[SpecifierSet, Family], ...] = (
    (SpecifierSet('>=0.25.0,<0.27.0'), Family.HOST),
    (SpecifierSet('>=0.27.0,<0.29.0'), Family.DROPPED),
    (SpecifierSet('>=0.29.0'), Family.REJECTED),
)


def installed(distribution: str) -> Optional[str]:
    """The installed version of a distribution (``mosaicml``, ``torch``), or ``None``; remembered per ``sys.path``
    (reading metadata costs about 5 ms, and ``status()`` and ``enable()`` ask on every call)."""
    return _installed(distribution, tuple(sys.path))


@functools.lru_cache(maxsize=64)
def _installed(distribution: str, path: tuple[str, ...]) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def family_of(version: str | Version) -> Family | None:
    """The family whose range holds a Composer ``version`` (pre-releases included), or ``None`` below 0.25.0."""
    for spec, family in _FAMILY_RANGES:
        if spec.contains(version, prereleases=True):
            return family
    return None


#: The Python every row runs on unless it is a leg of the Python factor.
DEFAULT_PYTHON = '3.11'


@dataclasses.dataclass(frozen=True)
class TestedRelease:
    """One row of the support table: a Composer release the matrix runs, and the torch build it runs on."""

    __test__ = False

    composer: str
    torch: str
    torchvision: str
    #: Composer's own upper pins are overridden (the forward-compat leg).
    override: bool = False
    #: The Python version (``major.minor``) the row runs on.
    python: str = DEFAULT_PYTHON

    @property
    def env(self) -> str:
        """The tox env's row part: ``composer0.25.0``, ``composer0.28.0-py3.9``, ``fwd-composer0.32.1-torch2.15.0``."""
        if self.override:
            return f'fwd-composer{self.composer}-torch{self.torch}'
        return f'composer{self.composer}' + ('' if self.python == DEFAULT_PYTHON else f'-py{self.python}')

    def on(self, device: str) -> str:
        """The tox env of this row on ``device`` (``composer0.28.0-cpu``)."""
        return f'{self.env}-{device}'

    @property
    def family(self) -> Family | None:
        """The row's family, or ``None`` when unaffected."""
        return family_of(self.composer)


#: Every release the matrix proves, each on the oldest torch it and its neighbours share (three torch builds in all).
TESTED_RELEASES: tuple[TestedRelease, ...] = (
    TestedRelease('0.24.1', '2.4.0', '0.19.0'),
    TestedRelease('0.25.0', '2.4.0', '0.19.0'),
    TestedRelease('0.26.0', '2.4.0', '0.19.0'),
    TestedRelease('0.26.1', '2.4.0', '0.19.0'),
    TestedRelease('0.27.0', '2.4.0', '0.19.0'),
    TestedRelease('0.28.0', '2.4.0', '0.19.0'),
    TestedRelease('0.29.0', '2.4.0', '0.19.0'),
    TestedRelease('0.30.0', '2.4.0', '0.19.0'),
    TestedRelease('0.31.0', '2.7.0', '0.22.0'),
    TestedRelease('0.32.0', '2.7.0', '0.22.0'),
    TestedRelease('0.32.1', '2.7.0', '0.22.0'),
    TestedRelease('0.32.1', '2.15.0', '0.29.2', override=True),
    # The Python factor: 0.24.1 and the newest release of each affected family on the oldest and the newest Python the
    # release and its torch support (torch 2.4.0: 3.9-3.12; Composer 0.32.1 needs 3.10+, torch 2.7.0 has 3.13).
    *(
        TestedRelease(composer, '2.4.0', '0.19.0', python=python)
        for composer in ('0.24.1', '0.26.1', '0.28.0')
        for python in ('3.9', '3.12')
    ),
    *(TestedRelease('0.32.1', '2.7.0', '0.22.0', python=python) for python in ('3.10', '3.13')),
)


#: The device factor of an env name: its last ``-`` part.
DEVICES: tuple[str, ...] = ('cpu', 'cuda', 'mps')


def split_env(env: str) -> tuple[str, str]:
    """``composer0.28.0-py3.9-cpu`` -> (``composer0.28.0-py3.9``, ``cpu``), ``bench-`` dropped; a tooling env
    (``unit``) is its own row part, on ``cpu``. ``matrix/plan.py`` applies the same grammar (``test_workflow.py``)."""
    name = env.removeprefix('bench-')
    row, _, device = name.rpartition('-')
    return (row, device) if device in DEVICES else (name, 'cpu')
