"""``compatshim doctor``: the right verdict and exit code on the installed release, and it never changes the process.

The self-check runs in a child process; these tests hold the calling process's shim state (enabled or not, stage,
``allow_untested``, family, the patched attributes themselves) to be exactly the same before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import COMPOSER, DEVICE, IS_AFFECTED, NEEDS_PATCH, PER_FAMILY

import compatshim
from compatshim import doctor
from compatshim._state import STATE


def _state() -> tuple[Any, ...]:
    """Everything doctor must leave alone: the status, the state object, and the patched classes' attributes."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    return (
        compatshim.status(),
        STATE.stage,
        STATE.family,
        STATE.allow_untested,
        tuple((key, record.replacement, record.active) for key, record in STATE.patches.items()),
        [tuple(vars(cls).items()) for cls in (DataSpec, Trainer)],
    )


def _cli(*args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )
    try:
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    except ValueError:
        raise AssertionError(
            f'no JSON from {args} ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}'
        ) from None


@pytest.mark.device
def test_python_m_compatshim_doctor_json() -> None:
    """``python -m compatshim.doctor`` works (it used to fail in argparse), with --stage, shim not enabled."""
    code, report, err = _cli('-m', 'compatshim.doctor', '--json', '--device', DEVICE, '--stage', 'microbatch')
    assert report['composer'] == COMPOSER and report['stage'] == 'microbatch'
    assert code == report['exit_code'] == (doctor.EXIT_AFFECTED if IS_AFFECTED else doctor.EXIT_OK), report['summary']
    check = report['self_check']
    assert check['with_shim']['train'] == check['with_shim']['eval'] == check['with_shim']['predict'] == 'device'
    if IS_AFFECTED:
        assert check['without_shim']['train'] != 'device'
        assert check['with_shim']['coherent'] is False, 'stage microbatch is not batch-coherent'
        assert report['would_patch'] and 'compatshim run' in report['summary']
    else:
        assert report['verdict'] == 'unaffected' and report['would_patch'] == []


def test_console_script_and_flags() -> None:
    script = Path(sys.executable).parent / 'compatshim'
    assert script.exists(), 'the compatshim console script is installed with the package'
    out = subprocess.run([str(script), 'doctor', '--help'], capture_output=True, text=True, timeout=60).stdout
    assert '--allow-untested' in out and '--stage' in out


@pytest.mark.device
def test_doctor_leaves_an_enabled_process_exactly_as_it_was() -> None:
    stage = 'batch'  # the CLI test above checks 'microbatch'
    compatshim.enable(stage=stage)
    before = _state()
    report = doctor.run(DEVICE)
    assert _state() == before, 'doctor changed the calling process'
    assert report['exit_code'] == doctor.EXIT_OK, report['summary']
    assert report['stage'] == (stage if IS_AFFECTED else 'batch')
    if IS_AFFECTED:
        assert report['self_check']['with_shim']['coherent'] is (stage == 'batch')


def test_doctor_cannot_tell_without_composer(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from compatshim import _api

    monkeypatch.setattr(_api, '_installed', lambda dist: None)
    assert doctor.main([]) == doctor.EXIT_UNKNOWN
    assert 'not installed' in capsys.readouterr().out


@PER_FAMILY
@pytest.mark.device
def test_doctor_with_the_kill_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('COMPATSHIM_DISABLE', '1')
    report = doctor.run(DEVICE)
    assert report['kill_switch'] == '1'
    assert report['exit_code'] == (doctor.EXIT_AFFECTED if IS_AFFECTED else doctor.EXIT_OK), report['summary']
    if IS_AFFECTED:
        assert 'COMPATSHIM_DISABLE is set' in report['summary']


@PER_FAMILY
@NEEDS_PATCH
@pytest.mark.device
def test_dev_build_enabled_with_allow_untested_stays_patched(dev_build: str) -> None:
    """The reported repro: after enable(allow_untested=True) on a dev build, doctor.run() unpatched the process."""
    with pytest.warns(compatshim.UnsupportedComposerWarning):
        assert compatshim.status().verdict is compatshim.Verdict.UNSUPPORTED
        compatshim.enable()  # without the opt-in: warning, nothing patched
    assert compatshim.status().patches == ()
    compatshim.enable(allow_untested=True)
    before = _state()
    assert before[0].verdict is compatshim.Verdict.PATCHED and before[0].allow_untested
    report = doctor.run(DEVICE)
    assert _state() == before, 'doctor changed the calling process'
    assert report['exit_code'] == doctor.EXIT_OK and report['allow_untested'] is True, report['summary']
    assert report['self_check']['with_shim']['train'] == 'device'


@PER_FAMILY
@NEEDS_PATCH
@pytest.mark.device
def test_dev_build_from_the_command_line(dev_build: str) -> None:
    """Without --allow-untested the doctor cannot tell (2); with it, it checks the release (1: add the line)."""
    report = doctor.run(DEVICE)
    assert report['exit_code'] == doctor.EXIT_UNKNOWN and '--allow-untested' in report['summary']
    assert report['self_check'] is None
    code, report, err = _cli('-m', 'compatshim', 'doctor', '--json', '--device', DEVICE, '--allow-untested')
    assert report['composer'] == dev_build and report['verdict'] == 'unsupported'
    assert code == report['exit_code'] == doctor.EXIT_AFFECTED, report['summary']
    assert report['self_check']['with_shim']['train'] == 'device'


HIDING_AGENT = """
# An agent loaded at interpreter start that wraps the train loop without __wrapped__ (hides what it wraps).
import composer.trainer.trainer as _module
_loop = _module.Trainer._train_loop
def hidden_train_loop(self, *args, **kwargs):
    return _loop(self, *args, **kwargs)
_module.Trainer._train_loop = hidden_train_loop
"""


@PER_FAMILY
@NEEDS_PATCH
@pytest.mark.device
def test_affected_and_not_fixed_has_its_own_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the shim cannot patch (here: an agent hides the train loop), the doctor says so with exit 3."""
    agent = tmp_path / 'agent'
    agent.mkdir()
    (agent / 'sitecustomize.py').write_text(HIDING_AGENT)
    # Installed the way agents are (ddtrace-run, opentelemetry-instrument): first on PYTHONPATH, for every process.
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(filter(None, [str(agent), os.environ.get('PYTHONPATH')])))
    report = doctor.run(DEVICE)
    assert report['exit_code'] == doctor.EXIT_NOT_FIXED, report['summary']
    assert 'did NOT fix it' in report['summary'] and 'hidden_train_loop, a wrapper that hides' in report['summary']
    assert compatshim.status().patches == ()
