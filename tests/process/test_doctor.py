"""``compatshim doctor``'s child process: the self-check runs there, so the calling process never changes.

These hold the calling process's shim state (enabled or not, stage, ``allow_untested``, family, the patched
attributes themselves) to be exactly the same before and after ``doctor.diagnose()``. The self-check (where the probe
sees its batches, per release) is tested in-process in every release env (``tests/release/test_doctor_check.py``), and
the exit-code rules on recorded findings in ``tests/unit/test_doctor_rules.py``; here is what needs the child: once per
family from an enabled process, and once each for an untested release and an agent that hides a method.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import DEVICE, IS_AFFECTED

import compatshim
from compatshim import doctor
from compatshim.shim.registry import STATE

pytestmark = pytest.mark.device


def _state() -> tuple[Any, ...]:
    """Everything doctor must leave alone: the status, the state object, and the patched classes' attributes."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    return (
        compatshim.status(),
        STATE.stage,
        STATE.family,
        STATE.allow_untested,
        tuple((key, record.replacement, record.active) for key, record in STATE.patches.live.items()),
        [tuple(vars(cls).items()) for cls in (DataSpec, Trainer)],
    )


def test_doctor_leaves_an_enabled_process_exactly_as_it_was() -> None:
    compatshim.enable(stage='batch')
    before = _state()
    report = doctor.diagnose(DEVICE)
    assert _state() == before, 'doctor changed the calling process'
    assert report['exit_code'] == doctor.EXIT_OK, report['summary']
    assert report['stage'] == 'batch'
    check = report['self_check']
    assert check['with_shim']['train'] == check['with_shim']['eval'] == check['with_shim']['predict'] == 'device'
    if IS_AFFECTED:
        assert check['with_shim']['coherent'] is True and check['without_shim']['train'] != 'device'
        assert report['would_patch']
    else:
        assert report['verdict'] == 'unaffected' and report['would_patch'] == []


@pytest.mark.runs_in('family:rejected')
def test_dev_build_enabled_with_allow_untested_stays_patched(dev_build: str) -> None:
    """The reported repro: after enable(allow_untested=True) on a dev build, doctor.diagnose() unpatched the process.
    Without the opt-in the doctor cannot tell (exit 2, no child); with it, the child checks the release too."""
    with pytest.warns(compatshim.UnsupportedComposerWarning):
        assert compatshim.status().verdict is compatshim.Verdict.UNSUPPORTED
        compatshim.enable()  # without the opt-in: warning, nothing patched
    assert compatshim.status().patches == ()
    report = doctor.diagnose(DEVICE)
    assert report['exit_code'] == doctor.EXIT_UNKNOWN and '--allow-untested' in report['summary']
    assert report['self_check'] is None
    compatshim.enable(allow_untested=True)
    before = _state()
    assert before[0].verdict is compatshim.Verdict.PATCHED and before[0].allow_untested
    report = doctor.diagnose(DEVICE)
    assert _state() == before, 'doctor changed the calling process'
    assert report['exit_code'] == doctor.EXIT_OK and report['allow_untested'] is True, report['summary']
    assert report['composer'] == dev_build and report['self_check']['with_shim']['train'] == 'device'


HIDING_AGENT = """
# An agent loaded at interpreter start that wraps the train loop without __wrapped__ (hides what it wraps).
import composer.trainer.trainer as _module
_loop = _module.Trainer._train_loop
def hidden_train_loop(self, *args, **kwargs):
    return _loop(self, *args, **kwargs)
_module.Trainer._train_loop = hidden_train_loop
"""


@pytest.mark.runs_in('family:host')
def test_affected_and_not_fixed_has_its_own_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the shim cannot patch (here: an agent hides the train loop), the doctor says so with exit 3."""
    agent = tmp_path / 'agent'
    agent.mkdir()
    (agent / 'sitecustomize.py').write_text(HIDING_AGENT)
    # Installed the way agents are (ddtrace-run, opentelemetry-instrument): first on PYTHONPATH, for every process.
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(filter(None, [str(agent), os.environ.get('PYTHONPATH')])))
    report = doctor.diagnose(DEVICE)
    assert report['exit_code'] == doctor.EXIT_NOT_FIXED, report['summary']
    assert 'did NOT fix it' in report['summary'] and 'hidden_train_loop, a wrapper that hides' in report['summary']
    assert compatshim.status().patches == ()
