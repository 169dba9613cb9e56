"""``compatshim doctor`` gives the right verdict and exit code on the installed release, with and without the shim."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import COMPOSER, DEVICE, IS_AFFECTED

from compatshim import doctor


@pytest.mark.device
def test_doctor_cli_json() -> None:
    """The console entry point, in a fresh interpreter, as a user runs it (shim not enabled)."""
    script = Path(sys.executable).parent / 'compatshim'
    command = [str(script)] if script.exists() else [sys.executable, '-m', 'compatshim']
    proc = subprocess.run(command + ['doctor', '--json', '--device', DEVICE], capture_output=True, text=True,
                          timeout=300)
    report = json.loads(proc.stdout)
    assert report['composer'] == COMPOSER
    assert proc.returncode == report['exit_code'] == (1 if IS_AFFECTED else 0), proc.stdout + proc.stderr
    check = report['self_check']
    assert check['with_shim']['train'] == check['with_shim']['eval'] == check['with_shim']['predict'] == 'device'
    assert check['with_shim']['coherent'] is True
    if IS_AFFECTED:
        assert check['without_shim']['train'] != 'device'
        assert report['would_patch']
    else:
        assert report['verdict'] == 'unaffected' and report['would_patch'] == []


@pytest.mark.device
def test_doctor_with_shim_enabled_exits_zero() -> None:
    import compatshim

    compatshim.enable()
    report = doctor.run(DEVICE)
    assert report['exit_code'] == 0, report['summary']
    assert compatshim.status().verdict.value == ('patched' if IS_AFFECTED else 'unaffected'), 'doctor must not change state'


def test_doctor_cannot_tell_without_composer(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from compatshim import _api

    monkeypatch.setattr(_api, '_installed', lambda dist: None)
    assert doctor.main(['doctor']) == 2
    assert 'not installed' in capsys.readouterr().out


def test_doctor_cannot_tell_on_unsupported_release(monkeypatch: pytest.MonkeyPatch) -> None:
    from compatshim import _api

    monkeypatch.setattr(_api, '_installed', lambda dist: '0.33.0.dev0' if dist == 'mosaicml' else '2.7.0')
    report = doctor.run()
    assert report['exit_code'] == 2 and report['verdict'] == 'unsupported'


@pytest.mark.device
def test_doctor_with_the_kill_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('COMPATSHIM_DISABLE', '1')
    report = doctor.run(DEVICE)
    assert report['kill_switch'] == '1'
    assert report['exit_code'] == (1 if IS_AFFECTED else 0), report['summary']
    if IS_AFFECTED:
        assert 'COMPATSHIM_DISABLE is set' in report['summary']


@pytest.mark.device
def test_doctor_keeps_the_enabled_stage() -> None:
    import compatshim

    compatshim.enable(stage='microbatch')
    doctor.run(DEVICE)
    assert compatshim.status().stage == ('microbatch' if IS_AFFECTED else None)
