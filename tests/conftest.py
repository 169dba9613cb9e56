"""Shared by every test: where a test runs (its role, see ``matrix_env``), the shim/control legs, the device under
test, and what a run cost (child processes that imported Composer) and left out (tests that ran nowhere).

``COMPATSHIM_TEST_DEVICE`` (set by tox's device factor) picks the device: ``cpu`` runs the CPU fake accelerator
(:mod:`compatshim.testing`), ``cuda`` and ``mps`` the real ones. Where the chosen accelerator is absent, every test
marked ``device`` is skipped with that reason.

Nothing here imports torch or Composer at import time: the ``unit`` env has neither.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from device import DEVICE, make_device  # noqa: E402,F401 (re-exported to the tests)
from matrix_env import COMPOSER, EACH_PYTHON, FAMILY, FAMILY_NAME, IS_AFFECTED, ROLE, ROW, envs_of  # noqa: E402

import compatshim  # noqa: E402
from compatshim.config.support import Family  # noqa: E402
from compatshim.shim.registry import STATE  # noqa: E402

pytest_plugins = ['pytester']


# --- Legs: with the shim, and the control without it ----------------------------------------------------------------


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

#: Tests of what the shim patches only make sense where it patches.
NEEDS_PATCH = pytest.mark.skipif(not IS_AFFECTED, reason=f'Composer {COMPOSER} is unaffected: the shim patches nothing')


#: Batches and microbatches of the tests of 0.24.1's DataSpec surface (the attribute, subclasses, batch structures).
BATCH_SIZE, MICROBATCH = 8, 2
#: Their control: without the shim the attribute is missing on 0.27+ (AttributeError), besides every control's failures.
SURFACE_CONTROL = pytest.mark.xfail(
    IS_AFFECTED,
    strict=True,
    reason=f'control: Composer {COMPOSER} does not run device_transforms as 0.24.1 did',
    raises=(AssertionError, AttributeError, TypeError),
)
#: Their legs: the shim at each stage (at stage microbatch the transform runs once per microbatch), and the control.
STAGED_LEGS = [
    pytest.param('shim', id='shim-batch', marks=pytest.mark.stage('batch')),
    pytest.param('shim', id='shim-microbatch', marks=[pytest.mark.stage('microbatch'), NEEDS_PATCH]),
    pytest.param('control', id='control', marks=[SURFACE_CONTROL, pytest.mark.control]),
]


@pytest.fixture
def per_step(leg: str, request: Any) -> int:
    """Transform calls per optimizer step in a leg of :data:`STAGED_LEGS` (batches of 8, microbatches of 2)."""
    marker = request.node.get_closest_marker('stage')
    return BATCH_SIZE // MICROBATCH if leg == 'shim' and marker and marker.args[0] == 'microbatch' else 1


@pytest.fixture
def leg(request: Any) -> Iterator[str]:
    """Enable the shim for the ``shim`` leg (stage from the companion ``stage`` marker), not for control."""
    name = request.param
    marker = request.node.get_closest_marker('stage')
    if name == 'shim':
        compatshim.enable(stage=marker.args[0] if marker else 'batch')
    try:
        yield name
    finally:
        compatshim.disable()


@pytest.fixture(autouse=True)
def _always_disabled_after() -> Iterator[None]:
    """Every test starts and ends with the shim off and no once-per-process warning given yet."""
    STATE.warned.clear()
    yield
    compatshim.disable()
    STATE.warned.clear()


@pytest.fixture
def dev_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The installed Composer's code, reporting itself as the development head ``0.33.0.dev0``.

    A ``mosaicml-0.33.0.dev0.dist-info`` goes first on ``sys.path`` (and on ``PYTHONPATH``, for child processes), so
    that ``importlib.metadata`` sees a release outside the support table whose patch targets are those of the
    installed one — as on Composer's real development head, whose targets are unchanged since 0.32.1.
    """
    import importlib.metadata

    root = dev_build_dir(tmp_path)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(filter(None, [str(root), os.environ.get('PYTHONPATH')])))
    assert importlib.metadata.version('mosaicml') == DEV_BUILD
    return DEV_BUILD


DEV_BUILD = '0.33.0.dev0'


def dev_build_dir(parent: Path) -> Path:
    """A directory holding only a ``mosaicml-0.33.0.dev0.dist-info`` (put it first on the path)."""
    root = parent / 'dev-build'
    dist = root / f'mosaicml-{DEV_BUILD}.dist-info'
    dist.mkdir(parents=True, exist_ok=True)
    (dist / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: mosaicml\nVersion: {DEV_BUILD}\n')
    return root


# --- Where a test runs ------------------------------------------------------------------------------------------------

_SESSION: dict[str, Any] = {}
DEFAULT_PLACES = {'unit': ('unit',), 'release': ('release', 'family', 'forward'), 'process': ('family',)}


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        '--role',
        choices=('unit', 'release', 'family', 'python', 'forward'),
        help='run the tests of this role here, whatever the env is (default: what this env is, tests/matrix_env.py)',
    )
    parser.addoption(
        '--conformance-record', action='store_true', help='write the traces of 0.24.1 (tests/conformance; its env only)'
    )
    parser.addoption(
        '--conformance-seeds',
        type=int,
        default=0,
        metavar='N',
        help='add generated programs 0..N-1 (tests/conformance)',
    )


def pytest_configure(config: Any) -> None:
    if config.getoption('role'):
        _SESSION['role'] = config.getoption('role')
    for line in (
        'runs_in(*places): the roles (or family:<name>, each-python) whose envs run this test (tests/matrix_env.py)',
        'python: also runs in the Python factor envs (it depends on the interpreter)',
        'forward: also runs in the forward-compat env (it depends on torch)',
        'stage(name): the stage the shim leg enables',
    ):
        config.addinivalue_line('markers', line)
    config.stash[_NOT_RUN] = {}
    config.stash[_RAN] = set()
    _SESSION['config'] = config


def places(item: Any) -> tuple[str, ...]:
    """Where ``item`` runs: its ``runs_in`` marker, else its directory's default; plus ``python``/``forward``."""
    marker = item.get_closest_marker('runs_in')
    found = tuple(marker.args) if marker else DEFAULT_PLACES.get(Path(str(item.path)).parent.name, ('release',))
    return found + tuple(m for m in ('python', 'forward') if item.get_closest_marker(m))


def role() -> str:
    """This env's role (``--role`` overrides what ``matrix_env`` found)."""
    return str(_SESSION.get('role', ROLE))


def runs_here(where: tuple[str, ...]) -> bool:
    """Whether a test that runs in ``where`` (roles, ``family:<name>``, or ``each-python``) runs in this env."""
    here = role()
    for place in where:
        if place == 'each-python':
            if ROW in EACH_PYTHON:
                return True
            continue
        wanted, _, family = place.partition(':')
        if wanted == here and family in ('', FAMILY_NAME):
            return True
    return False


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    from device import device_missing

    keep, dropped = [], []
    for item in items:
        where = places(item)
        if runs_here(where):
            keep.append(item)
            if 'device' in item.keywords and device_missing() is not None:
                item.add_marker(pytest.mark.skip(reason=device_missing()))
            continue
        dropped.append(item)
        envs = sorted({env for place in where for env in envs_of(place)})
        config.stash[_NOT_RUN][item.nodeid] = f'runs in {", ".join(where)}: tox -e {",".join(envs)}'
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_report_header(config: Any) -> str:
    composer = f'Composer {COMPOSER} ({FAMILY_NAME})' if COMPOSER else 'no Composer'
    return f'compatshim: {composer}, role {role()}, device {DEVICE}'


# --- What a run cost: child processes that imported Composer ----------------------------------------------------------

#: Where each child process that imports Composer leaves a file (set for the whole session, inherited by children).
IMPORT_LOG = 'TESTS_COMPOSER_IMPORT_LOG'
_COUNTER = '_tests_composer_import_counter'
_COUNTER_CODE = f"""# Written by tests/conftest.py for one pytest session under tox, removed after it: every process
# of this env that imports Composer while {IMPORT_LOG} is set leaves one file there. Imports only os and sys.
import os
import sys

_log = os.environ.get({IMPORT_LOG!r})


class _Counter:
    def find_spec(self, name, path=None, target=None):
        if name == 'composer':
            sys.meta_path.remove(self)
            with open(os.path.join(_log, str(os.getpid())), 'w') as out:
                out.write(' '.join(sys.argv)[:300])
        return None


if _log:
    sys.meta_path.insert(0, _Counter())
"""
_NOT_RUN = pytest.StashKey[dict[str, str]]()
_RAN = pytest.StashKey[set[str]]()
_COST = pytest.StashKey[Counter[str]]()
_LOG = pytest.StashKey[Path]()
_TOTAL = pytest.StashKey[int]()


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()['purelib'])


def pytest_sessionstart(session: Any) -> None:
    """Under tox, count the child processes that import Composer (a .pth in this env's site-packages, removed after)."""
    config = session.config
    config.stash[_COST] = Counter()
    env_dir = os.environ.get('TOX_ENV_DIR')
    if not env_dir or not sys.prefix.startswith(env_dir):
        return
    log = Path(tempfile.mkdtemp(prefix='composer-imports-'))
    (_site_packages() / f'{_COUNTER}.py').write_text(_COUNTER_CODE)
    (_site_packages() / f'{_COUNTER}.pth').write_text(f'import {_COUNTER}\n')
    os.environ[IMPORT_LOG] = str(log)
    config.stash[_LOG] = log


def _imports(config: Any) -> int:
    log = config.stash.get(_LOG, None)
    return len(list(log.iterdir())) if log else 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    before = _imports(item.config)
    try:
        return (yield)
    finally:
        started = _imports(item.config) - before
        if started:
            item.config.stash[_COST][Path(str(item.path)).relative_to(TESTS).as_posix()] += started


def pytest_runtest_logreport(report: Any) -> None:
    """Record which tests ran here and which were skipped (with the reason), for the end-of-tox summary."""
    config = _SESSION['config']
    if report.when == 'call' or (report.when == 'setup' and report.outcome != 'passed'):
        if report.skipped and not hasattr(report, 'wasxfail'):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            config.stash[_NOT_RUN][report.nodeid] = reason.removeprefix('Skipped: ')
        else:
            config.stash[_RAN].add(report.nodeid)


def pytest_sessionfinish(session: Any) -> None:
    config = session.config
    if _LOG in config.stash:  # the count, then nothing of the counter is left behind
        config.stash[_TOTAL] = _imports(config)
        for suffix in ('.pth', '.py'):
            (_site_packages() / f'{_COUNTER}{suffix}').unlink(missing_ok=True)
        shutil.rmtree(config.stash[_LOG], ignore_errors=True)
    work, env = os.environ.get('TOX_WORK_DIR'), os.environ.get('TOX_ENV_NAME')
    if work and env:  # read by toxfile.py at the end of the tox run
        record = Path(work) / '.not-run' / f'{env}.json'
        record.parent.mkdir(parents=True, exist_ok=True)
        not_run = {k: v for k, v in config.stash[_NOT_RUN].items() if k not in config.stash[_RAN]}
        counted = config.stash.get(_TOTAL, None)
        record.write_text(json.dumps({'ran': sorted(config.stash[_RAN]), 'not_run': not_run, 'imports': counted}))


def pytest_terminal_summary(terminalreporter: Any, config: Any) -> None:
    write = terminalreporter.write_line
    if _TOTAL in config.stash:
        cost = config.stash[_COST]
        detail = ', '.join(f'{module} {n}' for module, n in cost.most_common())
        write(
            f'compatshim: {config.stash[_TOTAL]} child processes imported Composer' + (f' ({detail})' if detail else '')
        )
    else:
        write('compatshim: child processes that import Composer are counted under tox only')
    deselected = Counter(v for k, v in config.stash[_NOT_RUN].items() if v.startswith('runs in '))
    for reason, n in deselected.most_common():
        write(f'compatshim: {n} test(s) not for this env ({role()}): {reason}')
