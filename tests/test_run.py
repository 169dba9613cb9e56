"""``compatshim run -- COMMAND``: the shim in every Python process of a run, without editing any script.

Every scenario is a fresh process tree started as a user starts it (``python -m compatshim run ...`` or the
``compatshim`` console script), running ``tests/run_job.py``, a script that never calls ``enable()``. They run
concurrently (one Popen each) to keep the matrix fast. Each placement scenario has a control started the same way
without ``compatshim run``, which must fail (strict xfail) on affected releases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FAMILY, IS_AFFECTED, LEGS, NEEDS_PATCH, PER_FAMILY, REPRESENTATIVE

from compatshim._bootstrap import BOOTSTRAP_DIR

pytestmark = pytest.mark.device

TESTS = Path(__file__).resolve().parent
JOB = TESTS / 'run_job.py'
RUN = [sys.executable, '-m', 'compatshim', 'run']
CHAINED_SITECUSTOMIZE = 'CHAINED = True  # an existing sitecustomize that compatshim run must still run\n'
DEV_BUILD = 'Metadata-Version: 2.1\nName: mosaicml\nVersion: 0.33.0.dev0\n'


def _scenarios(tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (command, extra environment). Each writes ``tmp/<name>.json``."""
    existing = tmp / 'existing-site'
    existing.mkdir()
    (existing / 'sitecustomize.py').write_text(CHAINED_SITECUSTOMIZE)
    dist = tmp / 'dev-build' / 'mosaicml-0.33.0.dev0.dist-info'
    dist.mkdir(parents=True)
    (dist / 'METADATA').write_text(DEV_BUILD)

    def job(name: str, *args: str) -> list[str]:
        return [sys.executable, str(JOB), str(tmp / f'{name}.json'), *args]

    console = Path(sys.executable).parent / 'compatshim'
    every_release = {
        'run': ([str(console), 'run', '--', *job('run', '--workers')], {}),
        'control': (job('control'), {}),
        'run-spawn-child': ([*RUN, '--', *job('run-spawn-child', '--child', 'spawn')], {}),
        'control-spawn-child': (job('control-spawn-child', '--child', 'spawn'), {}),
    }
    if not REPRESENTATIVE:
        return every_release
    return {
        **every_release,
        'run-microbatch-script-enables': (
            [*RUN, '--stage', 'microbatch', '--', *job('run-microbatch-script-enables', '--enable')],
            {},
        ),
        'run-forkserver-child': ([*RUN, '--', *job('run-forkserver-child', '--child', 'forkserver')], {}),
        'control-forkserver-child': (job('control-forkserver-child', '--child', 'forkserver'), {}),
        'run-chains-sitecustomize': ([*RUN, '--', *job('run-chains-sitecustomize')], {'PYTHONPATH': str(existing)}),
        'run-kill-switch': ([*RUN, '--', *job('run-kill-switch')], {'COMPATSHIM_DISABLE': '1'}),
        'run-dev-build': ([*RUN, '--', *job('run-dev-build')], {'PYTHONPATH': str(dist.parent)}),
        'run-dev-build-allowed': (
            [*RUN, '--allow-untested', '--', *job('run-dev-build-allowed')],
            {'PYTHONPATH': str(dist.parent)},
        ),
    }


@pytest.fixture(scope='module')
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, dict[str, Any] | None, Path]]:
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
        results[name] = (proc.returncode, output, json.loads(out.read_text()) if out.exists() else None, tmp)
    return results


def _result(runs: dict[str, Any], name: str) -> dict[str, Any]:
    code, output, result, _ = runs[name]
    assert code == 0 and result is not None, f'{name} failed ({code}):\n{output[-3000:]}'
    return result


def _placed_and_coherent(result: dict[str, Any], calls: int = 1) -> None:
    assert result['placements'] == ['device'] * calls, result
    if calls == 1:
        assert result['coherent'], 'stage batch: every microbatch must carry the one draw of the step'


@pytest.mark.parametrize('leg', LEGS)
def test_script_that_never_enables(leg: str, runs: dict[str, Any]) -> None:
    result = _result(runs, 'run' if leg == 'shim' else 'control')
    _placed_and_coherent(result)
    assert result['start_modules'] == [], 'nothing heavy may be imported before the script imports Composer'
    assert result['hook_armed'] is (leg == 'shim')
    assert result['verdict'] == ('patched' if IS_AFFECTED else 'unaffected')


def test_dataloader_workers_import_nothing_of_composer(runs: dict[str, Any]) -> None:
    _result(runs, 'run')
    worker = json.loads((runs['run'][3] / 'run.worker0.json').read_text())
    assert 'composer' not in worker['modules'] and 'compatshim' not in worker['modules'], worker


@pytest.mark.parametrize('leg', LEGS)
def test_spawn_child(leg: str, runs: dict[str, Any]) -> None:
    result = _result(runs, 'run-spawn-child' if leg == 'shim' else 'control-spawn-child')
    _placed_and_coherent(result)
    assert result['child_start_modules'] == [] and result['parent_end_modules'] == []


@PER_FAMILY
@pytest.mark.parametrize('leg', LEGS)
def test_forkserver_child(leg: str, runs: dict[str, Any]) -> None:
    _placed_and_coherent(_result(runs, 'run-forkserver-child' if leg == 'shim' else 'control-forkserver-child'))


@PER_FAMILY
@NEEDS_PATCH
def test_script_that_also_enables_behaves_as_if_once(runs: dict[str, Any]) -> None:
    """Under ``--stage microbatch`` a script's own ``enable()`` keeps the run's stage, patches once, quietly."""
    result = _result(runs, 'run-microbatch-script-enables')
    assert result['stage'] == 'microbatch' and result['placements'] == ['device', 'device']
    assert len(result['patches']) == len(set(result['patches'])) == 4
    assert result['warnings'] == []


@PER_FAMILY
def test_existing_sitecustomize_still_runs(runs: dict[str, Any]) -> None:
    result = _result(runs, 'run-chains-sitecustomize')
    assert result['chained'] is True and result['hook_armed'] is True
    _placed_and_coherent(result)


@PER_FAMILY
def test_kill_switch_wins(runs: dict[str, Any]) -> None:
    code, output, result, _ = runs['run-kill-switch']
    if FAMILY is not None and FAMILY.value == 'rejected':
        assert code != 0 and "unexpected keyword argument 'device_transforms'" in output  # Composer's own TypeError
        return
    assert code == 0 and result is not None, output[-3000:]
    assert result['patches'] == [] and result['hook_armed'] is True
    if IS_AFFECTED:
        assert result['placements'] != ['device']
        assert 'COMPATSHIM_DISABLE is set' in output and len(result['warnings']) == 1


@PER_FAMILY
@NEEDS_PATCH
def test_untested_release_warns_unless_allowed(runs: dict[str, Any]) -> None:
    code, output, result, _ = runs['run-dev-build']
    assert 'UnsupportedComposerWarning' in output and '0.33.0.dev0 is outside the support table' in output
    assert result is None or result['patches'] == []
    allowed = _result(runs, 'run-dev-build-allowed')
    assert allowed['verdict'] == 'patched' and allowed['warnings'] == []
    _placed_and_coherent(allowed)


@PER_FAMILY
@pytest.mark.parametrize(
    ('args', 'env', 'code', 'message'),
    [
        (['--stage', 'gpu', '--', 'true'], {}, 2, "invalid choice: 'gpu'"),
        ([], {}, 2, 'no command given'),
        (['--', 'compatshim-no-such-command'], {}, 127, "cannot run 'compatshim-no-such-command'"),
        (['--', 'true'], {'COMPATSHIM_DISABLE': 'maybe'}, 2, "COMPATSHIM_DISABLE='maybe' is not understood"),
        (['--', 'true'], {'COMPATSHIM_STAGE': 'epoch'}, 2, "unknown stage in COMPATSHIM_STAGE 'epoch'"),
    ],
    ids=['bad-stage', 'no-command', 'missing-command', 'bad-kill-switch', 'bad-stage-variable'],
)
def test_bad_input_runs_nothing(args: list[str], env: dict[str, str], code: int, message: str, tmp_path: Path) -> None:
    marker = tmp_path / 'ran'
    command = args[:-1] + ['sh', '-c', f'touch {marker}'] if args[-1:] == ['true'] else args
    proc = subprocess.run([*RUN, *command], env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == code and message in proc.stderr, proc.stderr
    assert not marker.exists(), 'a refused command must not run'


def test_bootstrap_directory_ships_inside_the_package() -> None:
    import compatshim

    package = Path(compatshim.__file__).resolve().parent
    assert Path(BOOTSTRAP_DIR).resolve().parent == package
    assert sorted(p.name for p in Path(BOOTSTRAP_DIR).glob('*.py')) == ['__init__.py', 'sitecustomize.py']


def test_environment_puts_the_bootstrap_first_once() -> None:
    from compatshim._bootstrap import child_environment

    env = child_environment({'PYTHONPATH': os.pathsep.join(['a', BOOTSTRAP_DIR, 'b'])}, 'microbatch', True)
    assert env['PYTHONPATH'].split(os.pathsep) == [BOOTSTRAP_DIR, 'a', 'b']
    assert env['COMPATSHIM_STAGE'] == 'microbatch' and env['COMPATSHIM_ALLOW_UNTESTED'] == '1'
    nested = child_environment(env, None, False)
    assert nested['PYTHONPATH'] == env['PYTHONPATH'] and nested['COMPATSHIM_STAGE'] == 'microbatch'
