"""The command line and the bootstrap, where neither torch nor Composer is needed: bad input is refused before
anything runs, the bootstrap ships inside the package, the console scripts and the plugin are registered.

The light child processes here import compatshim only (no torch, no Composer: the ``unit`` env has neither).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

import compatshim
from compatshim import doctor
from compatshim._bootstrap import BOOTSTRAP_DIR, child_environment

RUN = [sys.executable, '-m', 'compatshim', 'run']


def test_import_patches_nothing_and_imports_nothing_heavy() -> None:
    code = (
        'import sys, compatshim; s = compatshim.status(); assert s.patches == () and s.stage is None; '
        "heavy = sorted({'torch', 'composer'} & {m.split('.')[0] for m in sys.modules}); assert not heavy, heavy"
    )
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


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
    package = Path(compatshim.__file__).resolve().parent
    assert Path(BOOTSTRAP_DIR).resolve().parent == package
    assert sorted(p.name for p in Path(BOOTSTRAP_DIR).glob('*.py')) == ['__init__.py', 'sitecustomize.py']


def test_environment_puts_the_bootstrap_first_once() -> None:
    env = child_environment({'PYTHONPATH': os.pathsep.join(['a', BOOTSTRAP_DIR, 'b'])}, 'microbatch', True)
    assert env['PYTHONPATH'].split(os.pathsep) == [BOOTSTRAP_DIR, 'a', 'b']
    assert env['COMPATSHIM_STAGE'] == 'microbatch' and env['COMPATSHIM_ALLOW_UNTESTED'] == '1'
    nested = child_environment(env, None, False)
    assert nested['PYTHONPATH'] == env['PYTHONPATH'] and nested['COMPATSHIM_STAGE'] == 'microbatch'


def test_console_script_and_python_m_doctor() -> None:
    """``python -m compatshim.doctor`` works (it used to fail in argparse), and so does the console script."""
    script = Path(sys.executable).parent / 'compatshim'
    assert script.exists(), 'the compatshim console script is installed with the package'
    for command in ([str(script), 'doctor', '--help'], [sys.executable, '-m', 'compatshim.doctor', '--help']):
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and '--allow-untested' in out.stdout and '--stage' in out.stdout, out.stderr


def test_doctor_cannot_tell_without_composer(capsys: pytest.CaptureFixture[str]) -> None:
    """This env has no Composer (nor torch): the doctor says so, with exit 2, and starts no child."""
    assert doctor.main([]) == doctor.EXIT_UNKNOWN
    assert 'not installed' in capsys.readouterr().out


def test_registered_as_a_pytest11_entry_point() -> None:
    found = importlib.metadata.entry_points()
    group = found.select(group='pytest11') if hasattr(found, 'select') else found.get('pytest11', [])  # Python 3.9
    plugins = {ep.name: ep.value for ep in group}
    assert plugins.get('compatshim') == 'compatshim.pytest_plugin'
