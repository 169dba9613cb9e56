"""The doctor's self-check on this release, in-process: where its probe sees the batch in train, eval and predict,
and whether training was coherent — with the shim at each stage, and the control without it.

``compatshim doctor`` runs this same check in a child process (tested once per family in
``tests/process/test_doctor.py``); what the check finds depends on the release, so it is proven here in every one.
"""

from __future__ import annotations

import pytest
from conftest import CONTROL, DEVICE, FAMILY, IS_AFFECTED, NEEDS_PATCH

import compatshim
from compatshim import doctor

pytestmark = pytest.mark.device


@pytest.mark.parametrize('stage', ['batch', pytest.param('microbatch', marks=NEEDS_PATCH)])
def test_self_check_with_the_shim(stage: str) -> None:
    compatshim.enable(stage=stage)
    leg = doctor._self_check(DEVICE, shim=True)
    assert leg.error is None and (leg.train, leg.eval, leg.predict) == ('device', 'device', 'device'), leg
    assert leg.coherent is (stage == 'batch'), leg
    assert leg.fixed(stage)


@CONTROL
def test_self_check_without_the_shim_is_the_control() -> None:
    leg = doctor._self_check(DEVICE, shim=False)
    assert leg.fixed('batch'), leg


@pytest.mark.skipif(not IS_AFFECTED, reason='unaffected: the check without the shim finds the device')
def test_self_check_names_what_goes_wrong_without_the_shim() -> None:
    """0.25–0.26: the host in train and eval; 0.27–0.28: never called; 0.29+: Composer's TypeError."""
    leg = doctor._self_check(DEVICE, shim=False)
    assert FAMILY is not None
    found = {
        'host': leg.train == 'host',
        'dropped': leg.train == 'never called',
        'rejected': 'TypeError' in str(leg.error),
    }
    assert found[FAMILY.value], leg
