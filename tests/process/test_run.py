"""``compatshim run -- COMMAND``: the shim in every Python process of a run, without editing any script.

Each scenario is one fresh process tree, started as a user starts it (the ``compatshim`` console script or
``python -m compatshim run``), running ``tests/run_job.py`` — a script that never calls ``enable()`` — which checks
everything it can in one go and reports it in one JSON file; the tests below read those reports. The scenarios run
concurrently: the kill switch and the sourceless copy once per family (what the shim patches there), ``tree`` and
``compatshim.auto`` once, in the newest release's env (the bootstrap, the import that enables, workers and children do
not depend on the release), and, for what depends on the interpreter (a sourceless Composer, patching by code shape),
the sourceless copy in the Python factor too.

- ``tree``: the console script, with ``--monitor``; a script that never enables; dataloader workers; a ``spawn`` and a
  ``forkserver`` child; an existing ``sitecustomize`` that must still run; every Trainer of the tree gets a monitor.
- ``kill-switch``: ``COMPATSHIM_DISABLE=1`` under ``compatshim run --monitor``: the hook is armed, nothing is patched,
  and the monitor says so. It is also the control of this harness: without the shim, the run must fail its placement
  checks on every affected release.
- ``auto``: no ``compatshim run`` at all: the script's first import is ``import compatshim.auto``, with
  ``COMPATSHIM_MONITOR=1``.
- ``sourceless``: a byte-compiled copy of the installed Composer with no ``.py`` file left (as in slim images), under
  ``--stage microbatch`` (and, on affected releases, reporting itself as the untested ``0.33.0.dev0`` with
  ``--allow-untested``: the family is found from code objects), with a script that also calls ``enable()``, and, once
  per Python, a ``spawn`` child.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import CONTROL, DEV_BUILD, FAMILY, IS_AFFECTED, dev_build_dir, role, runs_here

from compatshim.shim import data_spec, loops

pytestmark = pytest.mark.device

TESTS = Path(__file__).resolve().parents[1]
JOB = TESTS / 'run_job.py'
CHAINED_SITECUSTOMIZE = 'CHAINED = True  # an existing sitecustomize that compatshim run must still run\n'
#: Which scenarios each role starts (the tests below carry the same places).
STARTED = {'family': ('kill-switch', 'sourceless'), 'python': ('sourceless',)}
#: The tree (the console script, workers, spawn and forkserver children, a chained sitecustomize) and
#: ``compatshim.auto`` do not depend on the release: started once, in the newest release's env.
TREE = 'family:rejected'
#: The sourceless copy's ``spawn`` child: the run's reach into a child depends on the interpreter, not on the release
#: (the main process proves the family's shapes from code objects on each Python): once per Python.
SOURCELESS_CHILD = 'each-python'


def sourceless_copy(root: Path) -> Path:
    """A byte-compiled copy of the installed Composer with no ``.py`` file left, in ``root``; returns ``root``."""
    spec = importlib.util.find_spec('composer')
    assert spec is not None and spec.submodule_search_locations
    copy = root / 'composer'
    shutil.copytree(spec.submodule_search_locations[0], copy, ignore=shutil.ignore_patterns('__pycache__'))
    subprocess.run([sys.executable, '-m', 'compileall', '-b', '-q', '-j', '0', str(copy)], check=True)
    for source in copy.rglob('*.py'):
        source.unlink()
    assert not list(copy.rglob('*.py')) and list(copy.rglob('*.pyc'))
    return root


def _scenarios(tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (command, PYTHONPATH entries to put first). Each writes ``tmp/<name>.json``."""
    run = [sys.executable, '-m', 'compatshim', 'run']
    job = [sys.executable, str(JOB)]
    scenarios: dict[str, tuple[list[str], dict[str, str]]] = {}
    if runs_here((TREE,)):
        existing = tmp / 'existing-site'
        existing.mkdir()
        (existing / 'sitecustomize.py').write_text(CHAINED_SITECUSTOMIZE)
        console = Path(sys.executable).parent / 'compatshim'
        scenarios['tree'] = (
            [str(console), 'run', '--monitor', '--', *job, str(tmp / 'tree.json'), '--workers']
            + ['--children', 'spawn,forkserver'],
            {'PYTHONPATH': str(existing)},
        )
    if 'kill-switch' in STARTED.get(role(), ()):
        scenarios['kill-switch'] = (
            [*run, '--monitor', '--', *job, str(tmp / 'kill-switch.json')],
            {'COMPATSHIM_DISABLE': '1'},
        )
    if runs_here((TREE,)):
        scenarios['auto'] = ([*job, str(tmp / 'auto.json'), '--auto'], {'COMPATSHIM_MONITOR': '1'})
    if 'sourceless' in STARTED.get(role(), ()):
        path = [str(sourceless_copy(tmp / 'sourceless'))]
        untested = ['--allow-untested'] if IS_AFFECTED else []
        if IS_AFFECTED:
            path.insert(0, str(dev_build_dir(tmp)))
        child = ['--children', 'spawn'] if runs_here((SOURCELESS_CHILD,)) else []
        scenarios['sourceless'] = (
            [*run, '--stage', 'microbatch', *untested, '--', *job, str(tmp / 'sourceless.json'), '--enable', *child],
            {'PYTHONPATH': os.pathsep.join(path)},
        )
    return scenarios


@pytest.fixture(scope='module')
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, dict[str, Any] | None]]:
    tmp = tmp_path_factory.mktemp('run')
    base = {k: v for k, v in os.environ.items() if not k.startswith('COMPATSHIM_') or k == 'COMPATSHIM_TEST_DEVICE'}
    base['OMP_NUM_THREADS'] = '1'
    procs = {}
    for name, (command, extra) in _scenarios(tmp).items():
        env = {**base, **extra}
        if 'PYTHONPATH' in extra and base.get('PYTHONPATH'):
            env['PYTHONPATH'] = extra['PYTHONPATH'] + os.pathsep + base['PYTHONPATH']
        procs[name] = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp
        )
    results = {}
    for name, proc in procs.items():
        output = proc.communicate(timeout=600)[0]
        out = tmp / f'{name}.json'
        results[name] = (proc.returncode, output, json.loads(out.read_text()) if out.exists() else None)
    return results


def _report(runs: dict[str, Any], name: str) -> dict[str, Any]:
    code, output, result = runs[name]
    assert code == 0 and result is not None, f'{name} failed ({code}):\n{output[-3000:]}'
    return result


def _placed_and_coherent(process: dict[str, Any], calls: int = 1) -> None:
    assert process['placements'] == ['device'] * calls, process
    if calls == 1:
        assert process['coherent'], 'stage batch: every microbatch must carry the one draw of the step'


# --- tree ------------------------------------------------------------------------------------------------------------


@pytest.mark.runs_in(TREE)
def test_script_that_never_enables(runs: dict[str, Any]) -> None:
    report = _report(runs, 'tree')
    assert report['start_modules'] == [], 'nothing heavy may be imported before the script imports Composer'
    assert report['hook_armed'] is True
    _placed_and_coherent(report['main'])
    assert report['main']['verdict'] == ('patched' if IS_AFFECTED else 'unaffected')


@pytest.mark.runs_in(TREE)
def test_dataloader_workers_import_nothing_of_composer(runs: dict[str, Any]) -> None:
    modules = _report(runs, 'tree')['worker_modules']
    assert 'composer' not in modules and 'compatshim' not in modules, modules


@pytest.mark.runs_in(TREE)
@pytest.mark.parametrize('method', ['spawn', 'forkserver'])
def test_multiprocessing_children(runs: dict[str, Any], method: str) -> None:
    child = _report(runs, 'tree')[method]
    assert child['start_modules'] == []
    _placed_and_coherent(child)


@pytest.mark.runs_in(TREE)
def test_existing_sitecustomize_still_runs(runs: dict[str, Any]) -> None:
    assert _report(runs, 'tree')['chained'] is True


@pytest.mark.runs_in(TREE)
@pytest.mark.parametrize('process', ['main', 'spawn', 'forkserver'])
def test_run_monitor_attaches_a_monitor_to_every_trainer(runs: dict[str, Any], process: str) -> None:
    """``compatshim run --monitor``: every Trainer of every process of the run has a TransformMonitor, which says
    where the script's transform ran (the script itself never mentions one)."""
    found = _report(runs, 'tree')[process]['monitor']
    assert [entry['where'] for entry in found] == [{'device_transforms': 'device'}], found
    assert "'train'" in found[0]['line'] and 'on the device, 1 call/step' in found[0]['line']
    assert found[0]['line'] in runs['tree'][1], 'the summary on stderr too: nothing in the run set up logging'


# --- kill-switch: the control ----------------------------------------------------------------------------------------


@pytest.mark.runs_in('family')
@CONTROL
def test_kill_switch_run_is_the_control(runs: dict[str, Any]) -> None:
    """Without the shim (switched off under compatshim run), the placement checks of this harness must fail."""
    main = _report(runs, 'kill-switch')['main']
    assert 'error' not in main, main['error']  # 0.29+: Composer's own TypeError
    _placed_and_coherent(main)


@pytest.mark.runs_in('family')
def test_kill_switch_wins(runs: dict[str, Any]) -> None:
    """The kill switch beats the shim, not the monitor: the monitor says where the transform went instead, and names
    the switch as the fix (on 0.29+ the run stops at Composer's TypeError, before a monitor sees a step)."""
    report = _report(runs, 'kill-switch')
    main = report['main']
    assert report['hook_armed'] is True and main.get('patches', []) == []
    if IS_AFFECTED:
        assert all('COMPATSHIM_DISABLE is set' in w for w in main['warnings']), main['warnings']
        shim, monitor = [w for w in main['warnings'] if 'enable() patched nothing' in w], main['warnings'][1:]
        assert len(shim) == 1 and main['warnings'][0] == shim[0]
        if 'error' not in main:  # 0.25–0.28: one warning from the monitor for the one DataSpec
            assert [entry['where'] for entry in main['monitor']] == [
                {'device_transforms': 'host' if 'host' in main['monitor'][0]['line'] else 'never called'}
            ]
            assert len(monitor) == 1 and 'device_transforms' in monitor[0], monitor


# --- import compatshim.auto -----------------------------------------------------------------------------------------


@pytest.mark.runs_in(TREE)
def test_import_compatshim_auto(runs: dict[str, Any]) -> None:
    """``import compatshim.auto`` enables the shim as ``compatshim run`` would, with no warning, and honours
    ``COMPATSHIM_MONITOR`` (on the newest release: what ``enable()`` does on each release is every release's
    in-process tests')."""
    report = _report(runs, 'auto')
    assert report['start_modules'] == [] and report['hook_armed'] is False
    main = report['main']
    assert main['verdict'] == 'patched' and main['warnings'] == [] and main['patches']
    _placed_and_coherent(main)
    assert [entry['where'] for entry in main['monitor']] == [{'device_transforms': 'device'}], 'COMPATSHIM_MONITOR=1'


# --- sourceless, untested, stage microbatch, a script that also enables ----------------------------------------------


@pytest.mark.parametrize(
    'process',
    [
        pytest.param('main', marks=pytest.mark.runs_in('family', 'python')),
        pytest.param('spawn', marks=pytest.mark.runs_in(SOURCELESS_CHILD)),
    ],
)
def test_sourceless_composer_under_run(runs: dict[str, Any], process: str) -> None:
    report = _report(runs, 'sourceless')
    found = report[process]
    assert 'error' not in found, found['error']
    assert found['composer_file'].endswith('.pyc') and found['has_source'] is False, 'the copy must be sourceless'
    if IS_AFFECTED:  # patched from code objects alone, as an untested release (--allow-untested), at stage microbatch
        assert found['verdict'] == 'patched' and found['stage'] == 'microbatch'
        assert FAMILY is not None
        targets = data_spec.targets(FAMILY) + loops.TARGETS
        assert len(found['patches']) == len(set(found['patches'])) == len(targets), (
            'the script enable() patched nothing twice'
        )
        assert found['placements'] == ['device', 'device']  # one call per microbatch
        assert found['warnings'] == [], f'{DEV_BUILD} was allowed: no warning'
    else:
        assert found['verdict'] == 'unaffected' and found['patches'] == []
        _placed_and_coherent(found)
    assert report['start_modules'] == [] and report['hook_armed'] is True
