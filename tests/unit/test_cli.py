"""The command line and the bootstrap, where neither torch nor Composer is needed: bad input is refused before
anything runs, the bootstrap ships inside the package, the console scripts and the plugin are registered.

The light child processes here import compatshim only (no torch, no Composer: the ``unit`` env has neither).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import packaging
import pytest

import compatshim
from compatshim import _cli, doctor
from compatshim._bootstrap import BOOTSTRAP_DIR, child_environment

RUN = [sys.executable, '-m', 'compatshim', 'run']


def test_import_patches_nothing_and_imports_nothing_heavy() -> None:
    code = (
        'import sys, compatshim; s = compatshim.status(); assert s.patches == () and s.stage is None; '
        "heavy = sorted({'torch', 'composer'} & {m.split('.')[0] for m in sys.modules}); assert not heavy, heavy"
    )
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_import_compatshim_auto_without_composer() -> None:
    """As under compatshim run, where the import hook never fires: no Composer, nothing happens, nothing heavy."""
    code = (
        'import sys, compatshim.auto, compatshim; print(compatshim.status().verdict.value); '
        "assert not {'torch', 'composer'} & set(sys.modules)"
    )
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == 'not installed', proc.stderr


@pytest.mark.parametrize(
    ('args', 'env', 'code', 'message'),
    [
        (['--stage', 'gpu', '--', 'true'], {}, 2, "invalid choice: 'gpu'"),
        ([], {}, 2, 'no command given'),
        (['--', 'compatshim-no-such-command'], {}, 127, "cannot run 'compatshim-no-such-command'"),
        (['--', './not-executable'], {}, 126, "cannot run './not-executable': Permission denied"),
        (['--', 'true'], {'COMPATSHIM_DISABLE': 'maybe'}, 2, "COMPATSHIM_DISABLE='maybe' is not allowed; use 1, true"),
        (['--', 'true'], {'COMPATSHIM_STAGE': 'epoch'}, 2, "unknown stage in COMPATSHIM_STAGE 'epoch'; choose one of"),
        (['--', 'true'], {'COMPATSHIM_ALLOW_UNTESTED': 'maybe'}, 2, "COMPATSHIM_ALLOW_UNTESTED='maybe' is not allowed"),
        (['--', 'true'], {'COMPATSHIM_MONITOR': 'loud'}, 2, "COMPATSHIM_MONITOR='loud' is not allowed; use 1, true"),
        (['--monitor=loud', '--', 'true'], {}, 2, "argument --monitor: invalid choice: 'loud'"),
    ],
    ids=[
        'bad-stage',
        'no-command',
        'missing-command',
        'not-executable',
        'bad-kill-switch',
        'bad-stage-variable',
        'bad-untested-variable',
        'bad-monitor-variable',
        'bad-monitor-option',
    ],
)
def test_bad_input_runs_nothing(args: list[str], env: dict[str, str], code: int, message: str, tmp_path: Path) -> None:
    """Refused before anything runs, in one line naming the setting, the value and what is allowed; the exit codes of
    a shell for a command that is not there (127) or cannot run (126)."""
    marker = tmp_path / 'ran'
    (tmp_path / 'not-executable').write_text(f'#!/bin/sh\ntouch {marker}\n')
    command = args[:-1] + ['sh', '-c', f'touch {marker}'] if args[-1:] == ['true'] else args
    proc = subprocess.run(
        [*RUN, *command], env={**os.environ, **env}, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == code and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3 and 'Traceback' not in proc.stderr, proc.stderr
    assert not marker.exists(), 'a refused command must not run'


@pytest.mark.parametrize(
    ('args', 'env', 'message'),
    [
        ([], {'COMPATSHIM_STAGE': 'bogus'}, "unknown stage in COMPATSHIM_STAGE 'bogus'; choose one of"),
        ([], {'COMPATSHIM_ALLOW_UNTESTED': 'maybe'}, "COMPATSHIM_ALLOW_UNTESTED='maybe' is not allowed"),
        ([], {'COMPATSHIM_DISABLE': 'maybe'}, "COMPATSHIM_DISABLE='maybe' is not allowed"),
        (['--stage', 'batch'], {'COMPATSHIM_DISABLE': 'maybe'}, "COMPATSHIM_DISABLE='maybe' is not allowed"),
    ],
)
def test_doctor_refuses_a_bad_setting_in_one_line(args: list[str], env: dict[str, str], message: str) -> None:
    """A configuration error is exit 2 and one line, as for compatshim run — not a traceback with exit 1 ("affected,
    add the line"), nor exit 3 ("please report a bug")."""
    proc = subprocess.run(
        [sys.executable, '-m', 'compatshim', 'doctor', *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and message in proc.stderr and 'nothing was checked' in proc.stderr, proc.stderr
    assert 'Traceback' not in proc.stderr and proc.stdout == ''


def test_doctor_argument_beats_a_bad_variable() -> None:
    """``--stage batch`` stands in for a bad COMPATSHIM_STAGE: a warning names it, and the doctor goes on (here: it
    cannot tell, since this env has no Composer)."""
    proc = subprocess.run(
        [sys.executable, '-m', 'compatshim', 'doctor', '--stage', 'batch'],
        env={**os.environ, 'COMPATSHIM_STAGE': 'bogus'},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and 'not installed' in proc.stdout, proc.stdout + proc.stderr
    assert "COMPATSHIM_STAGE 'bogus'" in proc.stderr and 'ignored' in proc.stderr and 'Traceback' not in proc.stderr


def test_run_from_a_checkout_that_is_not_installed(tmp_path: Path) -> None:
    """``python -m compatshim run`` from a source checkout, on an interpreter that has no compatshim installed: each
    child's bootstrap enables the copy it belongs to. (It used to raise ModuleNotFoundError from inside the user's own
    ``import composer``.) A stand-in Composer (0.24.1: nothing to patch) keeps this free of torch."""
    checkout = tmp_path / 'checkout'
    shutil.copytree(
        Path(compatshim.__file__).parent, checkout / 'compatshim', ignore=shutil.ignore_patterns('__pycache__')
    )
    deps = tmp_path / 'deps'
    (deps / 'composer').mkdir(parents=True)
    (deps / 'composer' / '__init__.py').write_text('STAND_IN = True\n')
    (deps / 'mosaicml-0.24.1.dist-info').mkdir()
    (deps / 'mosaicml-0.24.1.dist-info' / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: mosaicml\nVersion: 0.24.1\n'
    )
    (deps / 'packaging').symlink_to(Path(packaging.__file__).parent)  # compatshim's one dependency
    job = tmp_path / 'job' / 'job.py'
    job.parent.mkdir()
    job.write_text('import composer, compatshim\nprint(compatshim.__file__, compatshim.status().verdict.value)\n')
    base = getattr(sys, '_base_executable', sys.executable)  # an interpreter without this env's site-packages
    proc = subprocess.run(
        [base, '-m', 'compatshim', 'run', '--', base, str(job)],
        cwd=checkout,
        env={**os.environ, 'PYTHONPATH': str(deps)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(checkout / 'compatshim' / '__init__.py'), 'unaffected'], proc.stdout


def test_plugin_maps_a_bad_setting_to_a_usage_error(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pytest --compatshim`` with a bad kill switch: a usage error naming it (it was an INTERNALERROR)."""
    monkeypatch.setenv('COMPATSHIM_DISABLE', 'maybe')
    result = pytester.runpytest_subprocess('--compatshim=batch')
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "COMPATSHIM_DISABLE='maybe' is not allowed" in result.stderr.str()
    assert 'INTERNALERROR' not in result.stdout.str() + result.stderr.str()


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


@pytest.mark.parametrize(
    ('given', 'before', 'expected'), [('on', None, '1'), ('strict', None, 'strict'), (None, 'strict', 'strict')]
)
def test_run_monitor_sets_the_variable_every_process_reads(given: Any, before: Any, expected: str) -> None:
    """``compatshim run --monitor[=strict]``: ``COMPATSHIM_MONITOR`` in the command's environment (an existing one is
    kept when the option is not given), and ``compatshim.config.settings.monitor`` reads it back."""
    from compatshim.config import settings as _settings

    env = child_environment({} if before is None else {'COMPATSHIM_MONITOR': before}, None, False, given)
    assert env['COMPATSHIM_MONITOR'] == expected
    assert _settings.monitor(env) == ('on' if expected == '1' else expected)
    assert _settings.monitor({}) == 'off' and _settings.monitor({'COMPATSHIM_MONITOR': 'no'}) == 'off'


def test_run_monitor_reaches_the_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*RUN, '--monitor', '--', sys.executable, '-c', 'import os; print(os.environ["COMPATSHIM_MONITOR"])'],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith('COMPATSHIM_')},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == '1', proc.stderr


def test_an_ignored_setting_is_one_line_on_the_command_line() -> None:
    """A valid --stage beats a bad COMPATSHIM_STAGE: the doctor says so in one line, not in Python's warning format."""
    env = {**os.environ, 'COMPATSHIM_STAGE': 'epoch'}
    proc = subprocess.run(
        [sys.executable, '-m', 'compatshim', 'doctor', '--stage', 'batch'], env=env, capture_output=True, text=True
    )
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "COMPATSHIM_STAGE 'epoch'" in lines[0] and lines[0].endswith('(compatshim doctor)'), (
        lines
    )
    assert 'warnings.warn' not in proc.stderr and 'Warning:' not in proc.stderr


def test_console_script_and_python_m_doctor() -> None:
    """``python -m compatshim doctor`` (the one module entry point) works, and so does the console script."""
    script = Path(sys.executable).parent / 'compatshim'
    assert script.exists(), 'the compatshim console script is installed with the package'
    for command in ([str(script), 'doctor', '--help'], [sys.executable, '-m', 'compatshim', 'doctor', '--help']):
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and '--allow-untested' in out.stdout and '--stage' in out.stdout, out.stderr


def test_doctor_cannot_tell_without_composer(capsys: pytest.CaptureFixture[str]) -> None:
    """This env has no Composer (nor torch): the doctor says so, with exit 2, and starts no child."""
    assert _cli.main(['doctor']) == doctor.EXIT_UNKNOWN
    assert 'not installed' in capsys.readouterr().out


def test_registered_as_a_pytest11_entry_point() -> None:
    found = importlib.metadata.entry_points()
    group = found.select(group='pytest11') if hasattr(found, 'select') else found.get('pytest11', [])  # Python 3.9
    plugins = {ep.name: ep.value for ep in group}
    assert plugins.get('compatshim') == 'compatshim.pytest_plugin'


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``compatshim --version`` prints the version and exits 0 (argparse's own action: no subcommand needed)."""
    import compatshim
    from compatshim import _cli

    with pytest.raises(SystemExit) as exited:
        _cli.main(['--version'])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f'compatshim {compatshim.__version__}'


ROOT = Path(__file__).resolve().parents[2]
#: Each command as a user types it, with arguments that would pass.
COMMANDS = {
    'run': ['run', '--', 'true'],
    'doctor': ['doctor'],
    'bench': ['bench'],
    'bench --pipeline': ['bench', '--pipeline', 'my_project.bench:pipeline'],
    'report': ['report', '--results', str(ROOT / 'matrix' / 'reports' / 'cpu' / 'report.json'), '--baselines']
    + [str(ROOT / 'matrix' / 'baselines'), '--out', 'out', '--no-png'],
}
#: A typo in each variable compatshim reads, and what its one line must say (the variable, the value, what is allowed).
TYPOS = {
    'COMPATSHIM_STAGE': ('batc', "unknown stage in COMPATSHIM_STAGE 'batc'; choose one of 'batch', 'microbatch'"),
    'COMPATSHIM_ALLOW_UNTESTED': ('ye', "COMPATSHIM_ALLOW_UNTESTED='ye' is not allowed; use 1, true, yes or on"),
    'COMPATSHIM_DISABLE': ('of', "COMPATSHIM_DISABLE='of' is not allowed; use 1, true, yes or on"),
    'COMPATSHIM_MONITOR': ('stict', "COMPATSHIM_MONITOR='stict' is not allowed; use 1, true, yes, on or strict"),
    'COMPATSHIM_BENCH_SIZE': ('gpuu', "COMPATSHIM_BENCH_SIZE='gpuu' is not allowed; use tiny, cpu or gpu"),
}
NOTHING = {'run': 'run', 'doctor': 'checked', 'bench': 'measured', 'report': 'judged'}


def test_every_variable_the_package_reads_is_checked() -> None:
    """The checks cover every ``COMPATSHIM_`` variable named in compatshim's source, and this test every check."""
    import re

    from compatshim.config import settings as _settings

    package = Path(compatshim.__file__).parent
    read = {m for path in package.rglob('*.py') for m in re.findall(r'COMPATSHIM_[A-Z_]+', path.read_text())}
    assert set(_settings.VARIABLES) == read == set(TYPOS)


@pytest.mark.parametrize('variable', TYPOS)
@pytest.mark.parametrize('command', COMMANDS)
def test_a_typo_in_any_variable_is_refused_by_every_command_before_anything_runs(
    command: str, variable: str, tmp_path: Path
) -> None:
    """``COMPATSHIM_STAGE=batc compatshim bench --pipeline ...`` measured for 13.7 s and then blamed the user's model;
    ``run`` and ``doctor`` refused the same typo in one line. Every command now checks every variable first: one line
    naming the variable, its value and what is allowed, exit 2, nothing imported (this env has neither torch nor
    Composer: a command that got further would fail on their absence instead), nothing written, nothing run."""
    value, message = TYPOS[variable]
    env = {k: v for k, v in os.environ.items() if k not in TYPOS}
    marker = tmp_path / 'ran'
    argv = COMMANDS[command]
    argv = argv[:-1] + ['sh', '-c', f'touch {marker}'] if command == 'run' else argv
    proc = subprocess.run(
        [sys.executable, '-m', 'compatshim', *argv],
        env={**env, variable: value},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(err) == 1 and message in err[0] and err[0].endswith(f'nothing was {NOTHING[argv[0]]})'), err
    assert proc.stdout == '' and sorted(p.name for p in tmp_path.iterdir()) == []


def test_several_typos_are_one_line_naming_each(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv('COMPATSHIM_STAGE', 'batc')
    monkeypatch.setenv('COMPATSHIM_BENCH_SIZE', 'big')
    assert _cli.main(['bench', '--pipeline', 'my_project.bench:pipeline']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "COMPATSHIM_STAGE 'batc'" in err[0] and "COMPATSHIM_BENCH_SIZE='big'" in err[0], err


@pytest.mark.parametrize(
    ('argv', 'variable', 'value', 'said'),
    [
        (['run', '--stage', 'batch', '--', 'true'], 'COMPATSHIM_STAGE', 'batc', '--stage batch wins (compatshim run)'),
        (['run', '--monitor', '--', 'true'], 'COMPATSHIM_MONITOR', 'stict', '--monitor wins (compatshim run)'),
        (['bench', '--size', 'tiny'], 'COMPATSHIM_BENCH_SIZE', 'gpuu', '--size tiny wins (compatshim bench)'),
    ],
)
def test_an_argument_that_stands_in_for_a_bad_variable_wins_said_in_one_line(
    argv: list[str], variable: str, value: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``doctor --stage`` and ``enable(stage=...)`` do: the argument wins, the variable is ignored, one line says
    so, and the command goes on (here: the run runs; the bench stops at this env's missing torch)."""
    env = {**os.environ, variable: value}
    proc = subprocess.run(
        [sys.executable, '-m', 'compatshim', *argv], env=env, capture_output=True, text=True, timeout=60
    )
    first = proc.stderr.strip().splitlines()[0]
    assert f'{variable}' in first and repr(value) in first and first.endswith(f'ignored: {said}'), proc.stderr
    if argv[0] == 'run':
        assert proc.returncode == 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
