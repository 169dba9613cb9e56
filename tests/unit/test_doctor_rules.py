"""The doctor's exit codes and summaries (``doctor.conclude``), on recorded self-check findings.

The findings come from the child process's two legs (without and with the shim); where the child runs, and what it
finds on each release, is tested in ``tests/process/test_doctor.py`` and ``tests/release/test_doctor_check.py``.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from compatshim.doctor import EXIT_AFFECTED, EXIT_NOT_FIXED, EXIT_OK, SelfCheck, conclude

ON_DEVICE: dict[str, Any] = {'train': 'device', 'eval': 'device', 'predict': 'device', 'coherent': True}
HOST = SelfCheck(shim=False, train='host', eval='host', predict='device', coherent=False)
DROPPED = SelfCheck(shim=False, train='never called', eval='never called', predict='never called')
REJECTED = SelfCheck(
    shim=False, train='error', eval='error', predict='error', error="TypeError: unexpected 'device_transforms'"
)


def _conclude(without: SelfCheck, with_shim: SelfCheck, stage: str = 'batch', **kw: Any) -> tuple[int, str]:
    settings: dict[str, Any] = {'enabled_by': None, 'killed': False, 'enable_error': None, **kw}
    return conclude(without, with_shim, stage, **settings)


def test_unaffected() -> None:
    assert _conclude(SelfCheck(False, **ON_DEVICE), SelfCheck(True, **ON_DEVICE))[0] == EXIT_OK


@pytest.mark.parametrize('without', [HOST, DROPPED, REJECTED], ids=['host', 'dropped', 'rejected'])
@pytest.mark.parametrize(
    ('enabled_by', 'code'),
    [
        (None, EXIT_AFFECTED),
        ('compatshim.enable()', EXIT_OK),
        ('compatshim run', EXIT_OK),
        ('compatshim.auto', EXIT_OK),
    ],
)
def test_affected_and_fixed(without: SelfCheck, enabled_by: str, code: int) -> None:
    """Fixed by the shim: exit 0 where it is enabled in this process, saying by what (``compatshim run``'s hook
    counts, armed or fired); else exit 1 with the one line to add."""
    exit_code, summary = _conclude(without, SelfCheck(True, **ON_DEVICE), enabled_by=enabled_by)
    assert exit_code == code
    if enabled_by:
        assert f'is enabled in this process (by {enabled_by})' in summary
    else:
        assert 'add `import compatshim; compatshim.enable()`' in summary and 'compatshim run' in summary


def test_a_kill_switch_under_compatshim_run_is_not_a_fix() -> None:
    exit_code, summary = _conclude(HOST, HOST, enabled_by='compatshim run', killed=True)
    assert exit_code == EXIT_AFFECTED and 'COMPATSHIM_DISABLE' in summary


def test_stage_microbatch_is_fixed_without_coherence() -> None:
    with_shim = SelfCheck(True, **{**ON_DEVICE, 'coherent': False})
    assert _conclude(HOST, with_shim, 'microbatch')[0] == EXIT_AFFECTED
    assert _conclude(HOST, with_shim, 'batch')[0] == EXIT_NOT_FIXED  # stage batch promises coherence


def test_kill_switch_is_affected_not_a_bug() -> None:
    exit_code, summary = _conclude(HOST, HOST, killed=True)
    assert exit_code == EXIT_AFFECTED and 'COMPATSHIM_DISABLE is set' in summary


@pytest.mark.parametrize('error', [None, 'UnexpectedComposerShapeError: Trainer._train_loop is x.hidden'])
def test_not_fixed_asks_for_a_report(error: Optional[str]) -> None:
    exit_code, summary = _conclude(HOST, HOST, enable_error=error)
    assert exit_code == EXIT_NOT_FIXED and 'please report' in summary
    assert (error in summary) if error else '()' not in summary
