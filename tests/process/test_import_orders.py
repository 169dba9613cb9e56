"""The bootstrap and the monitor in any import order: ``compatshim run --monitor`` (and ``=strict``), ``import
compatshim.auto`` and ``from compatshim.monitor import TransformMonitor`` in the orders users write them, each a fresh
process (the order of first imports is what is tested), all started at once; once under Composer's launcher; and the
doctor started by ``compatshim run``, which must see the shim that the run enables. The documented order that crashed
(the monitor imported first under ``compatshim run --monitor``) runs in every family env; the others, which share its
mechanism (the bootstrap and the import hook do not depend on the release), on the newest release.

The monitor's module imports Composer, and ``compatshim run``'s hook fires inside that import: before the hook left
the attach to the end of the monitor's import, ``monitor-first`` died with "cannot import name
'attach_to_every_trainer' from partially initialized module 'compatshim.monitor'" on every affected release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import IS_AFFECTED, runs_here

pytestmark = [pytest.mark.device, pytest.mark.runs_in('family')]

TESTS = Path(__file__).resolve().parents[1]
JOB = TESTS / 'import_order_job.py'
RUN = [sys.executable, '-m', 'compatshim', 'run']
#: name -> (command before the job, extra environment, the job's order); each one process (the launcher: three).
SCENARIOS: dict[str, tuple[list[str], dict[str, str], str]] = {
    'run-monitor-first': ([*RUN, '--monitor', '--'], {}, 'monitor-first'),
    'run-strict-composer-first': ([*RUN, '--monitor=strict', '--'], {}, 'composer-first'),
    'run-auto-first': ([*RUN, '--monitor', '--'], {}, 'auto-first'),
    'env-monitor-then-auto': ([], {'COMPATSHIM_MONITOR': '1'}, 'monitor-then-auto'),
}
#: Started once (the newest release): the other orders, the launcher's ranks, the doctor under compatshim run.
ONCE = ('family:rejected',)
#: In every family env.
EVERY_FAMILY = ('run-monitor-first',)


@pytest.fixture(scope='module')
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, Path]]:
    tmp = tmp_path_factory.mktemp('orders')
    base = {k: v for k, v in os.environ.items() if not k.startswith('COMPATSHIM_') or k == 'COMPATSHIM_TEST_DEVICE'}
    base['OMP_NUM_THREADS'] = '1'
    base['PYTHONPATH'] = os.pathsep.join(filter(None, [str(TESTS), base.get('PYTHONPATH', '')]))
    commands = {
        name: ([*prefix, sys.executable, str(JOB), order, str(tmp / f'{name}.json')], extra)
        for name, (prefix, extra, order) in SCENARIOS.items()
        if name in EVERY_FAMILY or runs_here(ONCE)
    }
    if runs_here(ONCE):
        launcher = str(Path(sys.executable).parent / 'composer')
        job = [str(JOB), 'monitor-first', str(tmp / 'launcher.json')]
        ranks = [launcher, '-n', '2', '--stdout', str(tmp / 'rank{rank}.out'), '--stderr', str(tmp / 'rank{rank}.err')]
        commands['launcher'] = ([*RUN, '--monitor', '--', *ranks, *job], {})
        commands['doctor'] = ([*RUN, '--', sys.executable, '-m', 'compatshim', 'doctor', '--json'], {})
    procs = {
        name: subprocess.Popen(
            command, env={**base, **extra}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp
        )
        for name, (command, extra) in commands.items()
    }
    outputs = {name: proc.communicate(timeout=600)[0] for name, proc in procs.items()}
    return {name: (proc.returncode, outputs[name], tmp) for name, proc in procs.items()}


def _found(runs: dict[str, Any], name: str, file: str = '') -> dict[str, Any]:
    code, output, tmp = runs[name]
    path = tmp / (file or f'{name}.json')
    assert path.exists(), f'{name} exited {code}:\n{output[-3000:]}'
    found: dict[str, Any] = json.loads(path.read_text())
    return found


@pytest.mark.parametrize('name', EVERY_FAMILY)
def test_the_monitor_imported_first_under_compatshim_run(runs: dict[str, Any], name: str) -> None:
    _placed_with_a_monitor(runs, name)


@pytest.mark.runs_in(*ONCE)
@pytest.mark.parametrize('name', [name for name in SCENARIOS if name not in EVERY_FAMILY])
def test_every_other_import_order(runs: dict[str, Any], name: str) -> None:
    _placed_with_a_monitor(runs, name)


def _placed_with_a_monitor(runs: dict[str, Any], name: str) -> None:
    found = _found(runs, name)
    by = 'compatshim.auto' if 'auto' in SCENARIOS[name][2] else 'compatshim run'
    if IS_AFFECTED:
        assert found['verdict'] == 'patched' and found['enabled_by'] == by, found
    else:
        assert found['verdict'] == 'unaffected' and found['enabled_by'] is None, found
    assert found['monitors'] == 1, 'the Trainer got one monitor, without asking for it'


@pytest.mark.runs_in(*ONCE)
def test_the_monitor_imported_first_on_the_launchers_ranks(runs: dict[str, Any]) -> None:
    for rank in ('0', '1'):
        found = _found(runs, 'launcher', f'launcher.rank{rank}.json')
        assert found['verdict'] == 'patched' and found['enabled_by'] == 'compatshim run' and found['monitors'] == 1


@pytest.mark.runs_in(*ONCE)
def test_the_doctor_under_compatshim_run_confirms_the_fix(runs: dict[str, Any]) -> None:
    """Plain ``compatshim doctor`` exits 1 here (``tests/process/test_doctor.py``); started by ``compatshim run`` its
    process is the run's, so it sees the shim enabled, says by what, and exits 0."""
    code, output, _ = runs['doctor']
    report, _ = json.JSONDecoder().raw_decode(output[output.index('{') :])
    assert code == 0 and report['exit_code'] == 0 and report['enabled_by'] == 'compatshim run', output[-2000:]
    assert 'enabled in this process (by compatshim run)' in report['summary']
