"""Misuse gets a clear error and a truthful status: nested ``enabled()`` blocks with ``enable()``/``disable()`` inside,
settings given in code against settings in the environment, arguments of the wrong type, a keyword given twice.

Each of these failed on the shim before the fix it tests (the state-machine test, ``test_api_states.py``, found the
first one by itself).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from conftest import FAMILY, IS_AFFECTED, NEEDS_PATCH, make_device
from workload import Probe, loader, trainer

import compatshim
from compatshim.config.support import Family
from compatshim.shim import registry

pytestmark = pytest.mark.python


def _live() -> tuple[str, ...]:
    """What is really installed: every patch whose replacement is reachable on Composer's classes and switched on."""
    return tuple(r.label for r in registry.STATE.patches.live.values() if compatshim.is_patched(r.owner, r.name))


def test_disable_inside_an_enabled_block_leaves_the_state_from_before_it() -> None:
    """The reported repro: enable('batch'); with enabled('microbatch'): disable() — status said patched, stage batch,
    with nothing installed, and every later enable() returned early."""
    compatshim.enable('batch')
    before = compatshim.status()
    with compatshim.enabled('microbatch'):
        compatshim.disable()
        assert compatshim.status().patches == () == _live()
    after = compatshim.status()
    assert (after.verdict, after.stage, after.patches) == (before.verdict, before.stage, before.patches)
    assert after.patches == _live()
    if IS_AFFECTED:
        assert after.patches and after.stage == 'batch'


def test_enabled_blocks_nest_and_restore_what_was_there() -> None:
    with compatshim.enabled('batch'):
        with compatshim.enabled('microbatch'):
            compatshim.enable('batch')  # inside: changes the default for the rest of the inner block
            assert compatshim.status().stage == ('batch' if IS_AFFECTED else None)
        assert compatshim.status().stage == ('batch' if IS_AFFECTED else None)
        with compatshim.enabled('microbatch'):
            assert compatshim.status().stage == ('microbatch' if IS_AFFECTED else None)
        assert compatshim.status().patches == _live()
    assert compatshim.status().patches == () == _live() and compatshim.status().stage is None


@pytest.mark.parametrize(
    ('variable', 'value', 'call'),
    [
        ('COMPATSHIM_STAGE', 'bogus', {'stage': 'batch'}),
        ('COMPATSHIM_ALLOW_UNTESTED', 'maybe', {'allow_untested': False}),
    ],
)
def test_a_valid_argument_beats_an_invalid_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, call: dict[str, Any]
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.warns(compatshim.CompatShimWarning, match=rf"{variable}.*'{value}'.*ignored: .* given in code"):
        shim = compatshim.enable(**call)
    assert bool(shim.patches) is IS_AFFECTED
    compatshim.disable()
    before = compatshim.status()
    with pytest.raises(compatshim.ConfigurationError, match=rf"{variable}.*'{value}'"):
        compatshim.enable()  # no argument stands in for the variable: refused, nothing changed
    assert compatshim.status() == before and _live() == ()


@pytest.mark.parametrize('value', ['no', 'yes', 0, 1, 1.0])
def test_allow_untested_must_be_a_bool(value: Any) -> None:
    """``enable(allow_untested='no')`` used to opt in (the value went through bool())."""
    with pytest.raises(compatshim.ConfigurationError, match=r'allow_untested=.* is not allowed; pass True or False'):
        compatshim.enable(allow_untested=value)
    assert compatshim.status().patches == () == _live()


def test_the_kill_switch_warns_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the README says: once per process, also across disable() (it used to warn again after each)."""
    monkeypatch.setenv('COMPATSHIM_DISABLE', '1')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(3):
            compatshim.enable()
            compatshim.disable()
    assert len([w for w in caught if 'COMPATSHIM_DISABLE is set' in str(w.message)]) == 1


@NEEDS_PATCH
def test_device_transforms_given_twice_is_composers_error() -> None:
    """By position and by keyword, as 0.24.1 said it (the shim once kept the keyword and dropped the positional one,
    silently), on every release: positions are read in 0.24.1's order."""
    from composer.core import DataSpec

    compatshim.enable()
    with pytest.raises(TypeError, match="multiple values for argument 'device_transforms'"):
        DataSpec(loader(8), None, None, Probe(), device_transforms=Probe())
    with pytest.raises(TypeError, match="multiple values for argument 'num_samples'"):
        DataSpec(loader(8), 8, None, Probe(), num_samples=8)


@pytest.mark.skipif(FAMILY is not Family.DROPPED, reason='0.27-0.28 drop a device_transforms given before enable()')
def test_a_dataspec_built_before_enable_is_said_once_at_the_trainers_first_read() -> None:
    """0.27-0.28 drop a ``device_transforms`` argument at construction, without a trace: a DataSpec built before
    ``enable()`` trains untransformed. The shim cannot run what it never saw, but says so, once, when the trainer first
    reads such a DataSpec; one built after, or a copy of one, or one whose attribute was deleted, is not said."""
    import copy

    from composer.core import DataSpec

    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # Composer's own deprecation warning
        before = DataSpec(loader(8), device_transforms=Probe())
    compatshim.enable()
    after = DataSpec(loader(8), device_transforms=Probe())
    deleted = copy.copy(after)
    del deleted.device_transforms
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        t, _ = trainer(make_device())
        for spec in (after, copy.copy(after), deleted, before, before):
            t.fit(train_dataloader=spec, duration='1ba', reset_time=True)
    said = [str(w.message) for w in caught if 'built before compatshim.enable()' in str(w.message)]
    assert len(said) == 1 and 'DataSpec(dataloader=DataLoader over TensorDataset)' in said[0], said
