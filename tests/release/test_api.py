"""enable()/disable()/status(): gating by the support table, idempotence, exact restoration, threads, bad input."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY, IS_AFFECTED, NEEDS_PATCH, make_device
from workload import Probe, loader, trainer

import compatshim
from compatshim.config.support import Family
from compatshim.shim import api, registry
from compatshim.shim.shape import check_shape, detect_family

pytestmark = pytest.mark.python


def _classes() -> tuple[type, type]:
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    return DataSpec, Trainer


def _snapshot() -> list[dict[str, Any]]:
    return [dict(vars(cls)) for cls in _classes()]


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return all(x.keys() == y.keys() and all(x[k] is y[k] for k in x) for x, y in zip(a, b))


def test_status_before_enable() -> None:
    s = compatshim.status()
    assert s.composer_version == COMPOSER and s.patches == () and s.stage is None
    assert s.verdict is (compatshim.Verdict.AFFECTED if IS_AFFECTED else compatshim.Verdict.UNAFFECTED)


def test_enable_verdict_and_patches() -> None:
    before = _snapshot()
    s = compatshim.enable()
    if IS_AFFECTED:
        assert s.verdict is compatshim.Verdict.PATCHED and s.stage == 'batch' and s.family == FAMILY.value
        assert any(p.endswith('DataSpec.__init__') for p in s.patches)
        assert any(p.endswith('Trainer._train_loop') for p in s.patches)
    else:
        assert s.verdict is compatshim.Verdict.UNAFFECTED and s.patches == ()
        assert _same(before, _snapshot()), 'an unaffected release must be left alone'


@NEEDS_PATCH
def test_enable_is_idempotent_and_disable_restores_exactly() -> None:
    before = _snapshot()
    first = compatshim.enable()
    patched = _snapshot()
    second = compatshim.enable()
    assert first.patches == second.patches
    assert _same(patched, _snapshot()), 'a second enable() must not re-wrap anything'
    assert compatshim.disable().verdict is compatshim.Verdict.AFFECTED
    assert _same(before, _snapshot()), 'disable() must restore vars() of every patched class exactly'
    assert compatshim.disable().patches == ()  # disable twice is a no-op
    compatshim.enable()
    compatshim.disable()
    assert _same(before, _snapshot())


@NEEDS_PATCH
def test_two_threads_enable_at_once() -> None:
    before = _snapshot()
    barrier = threading.Barrier(2)
    results: list[Any] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            barrier.wait()
            results.append(compatshim.enable())
        except BaseException as e:  # noqa: BLE001  # pragma: no cover - any error in the thread is reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2
    assert results[0].patches == results[1].patches == registry.patched_targets()
    assert len(set(registry.patched_targets())) == len(registry.patched_targets())
    compatshim.disable()
    assert _same(before, _snapshot())


def test_context_manager_restores_previous_state() -> None:
    with compatshim.enabled(stage='microbatch') as s:
        assert s.stage == ('microbatch' if IS_AFFECTED else None)
    assert compatshim.status().patches == ()
    if IS_AFFECTED:
        compatshim.enable(stage='batch')
        with compatshim.enabled(stage='microbatch'):
            assert compatshim.status().stage == 'microbatch'
        assert compatshim.status().stage == 'batch'


def test_unknown_stage_lists_choices_and_patches_nothing() -> None:
    with pytest.raises(ValueError, match=r"unknown stage 'device'; choose one of 'batch', 'microbatch'"):
        compatshim.enable(stage='device')
    assert compatshim.status().patches == ()


@NEEDS_PATCH
def test_bad_dataspec_arguments() -> None:
    from composer.core import DataSpec

    compatshim.enable()
    with pytest.raises(TypeError, match='device_transforms=.*must be a callable.*got int'):
        DataSpec(loader(8), device_transforms=5)
    with pytest.raises(ValueError, match="unknown DataSpec data_transfer_stage 'gpu'; choose one of"):
        DataSpec(loader(8), device_transforms=Probe(), data_transfer_stage='gpu')


@NEEDS_PATCH
@pytest.mark.parametrize('after', [pytest.param(False, id='alone'), pytest.param(True, id='split_batch-after')])
def test_positions_in_0_24_1s_order_on_every_release(after: bool) -> None:
    """``DataSpec(dl, None, None, fn[, split])``, 0.24.1's order: ``fn`` is the device_transforms on every release
    (0.29+ read position 3 as ``batch_transforms``, on the host; 0.27-0.28 position 4 as ``batch_transforms``), said
    once where the release reads a position otherwise."""
    from composer.core import DataSpec

    compatshim.enable()
    probe, splits = Probe(), []

    def split(batch: Any, size: int) -> Any:
        splits.append(size)
        return [batch]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        spec = DataSpec(loader(8), None, None, probe, *([split] if after else []))
    said = [str(w.message) for w in caught if issubclass(w.category, compatshim.CompatShimWarning)]
    assert spec.device_transforms is probe
    t, _ = trainer(make_device())
    t.fit(train_dataloader=spec, duration='1ba')
    assert [c.placement for c in probe.calls] == ['device']
    assert bool(splits) is after
    differs = FAMILY is Family.REJECTED or (after and FAMILY is Family.DROPPED)
    assert len(said) == differs and all("read in Composer 0.24.1's order: position" in line for line in said), said


def _pretend_installed(monkeypatch: pytest.MonkeyPatch, installed: Any) -> None:
    """What ``importlib.metadata`` says, as ``enable()`` and ``status()`` both read it."""
    from compatshim.shim import status as _status

    monkeypatch.setattr(api, 'installed', installed)
    monkeypatch.setattr(_status, 'installed', installed)


def test_composer_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend_installed(monkeypatch, lambda dist: None)
    with pytest.raises(compatshim.ComposerNotInstalledError, match='Composer is not installed'):
        compatshim.enable()
    assert compatshim.status().verdict is compatshim.Verdict.NOT_INSTALLED
    assert registry.patched_targets() == ()


def test_newer_release_warns_and_patches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend_installed(monkeypatch, lambda dist: '0.33.0.dev0' if dist == 'mosaicml' else '2.7.0')
    with pytest.warns(compatshim.UnsupportedComposerWarning, match='0.33.0.dev0 is outside the support table'):
        s = compatshim.enable()
    assert s.verdict is compatshim.Verdict.UNSUPPORTED and s.patches == ()


@NEEDS_PATCH
def test_untested_release_opt_in_checks_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opted in, the installed code's shape decides the family (here it is the real, known shape)."""
    _pretend_installed(monkeypatch, lambda dist: '0.33.0.dev0' if dist == 'mosaicml' else '2.7.0')
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        s = compatshim.enable(allow_untested=True)
    assert s.verdict is compatshim.Verdict.PATCHED and s.family == FAMILY.value


def test_shape_mismatch_is_refused() -> None:
    class NotADataSpec:
        def __init__(self, dataloader: Any) -> None: ...

    class NotATrainer:
        def predict(self) -> None: ...

    with pytest.raises(compatshim.UnexpectedComposerShapeError, match='matches none of the shapes'):
        detect_family(NotADataSpec, NotATrainer, '9.9.9')
    data_spec, trainer = _classes()
    if FAMILY is not None:
        other = Family.HOST if FAMILY is not Family.HOST else Family.REJECTED
        with pytest.raises(compatshim.UnexpectedComposerShapeError, match='Nothing was patched'):
            check_shape(other, data_spec, trainer, COMPOSER)
        check_shape(FAMILY, data_spec, trainer, COMPOSER)
    assert registry.patched_targets() == ()


def test_registry_restores_inherited_attributes_by_deleting_them() -> None:
    class Base:
        def f(self) -> str:
            return 'base'

    class Child(Base):
        pass

    before = dict(vars(Child))
    registry.STATE.patches.patch(Child, 'f', lambda original, record: lambda self: 'patched')
    assert Child().f() == 'patched' and compatshim.is_patched(Child, 'f')
    assert compatshim.get_original(Child, 'f') is Base.f
    with pytest.raises(RuntimeError, match='already patched'):
        registry.STATE.patches.patch(Child, 'f', lambda original, record: lambda self: 'twice')
    registry.STATE.patches.restore_all()
    assert dict(vars(Child)) == before and 'f' not in vars(Child) and Child().f() == 'base'


@NEEDS_PATCH
def test_after_disable_a_dataspec_behaves_as_composers_own_and_enable_brings_it_back() -> None:
    """Documented: after disable(), a DataSpec built while enabled is Composer's own (0.25–0.26 run device_transforms
    before the move, 0.27+ never); enable() again and the same DataSpec runs it on the device."""
    from composer.core import DataSpec

    compatshim.enable()
    probe = Probe()
    spec = DataSpec(loader(16), device_transforms=probe)
    compatshim.disable()
    t, _ = trainer(make_device())
    t.fit(train_dataloader=spec, duration='2ba')
    assert [c.placement for c in probe.calls] == (['host', 'host'] if FAMILY is Family.HOST else [])
    compatshim.enable()
    t.fit(duration='2ba')
    assert [c.placement for c in probe.calls][-2:] == ['device', 'device']


def test_kill_switch_patches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('COMPATSHIM_DISABLE', '1')
    before = _snapshot()
    with pytest.warns(compatshim.CompatShimWarning, match='COMPATSHIM_DISABLE is set'):
        shim = compatshim.enable(stage='microbatch')
    assert shim.patches == () and _same(before, _snapshot())
    assert shim.verdict.value == ('affected' if IS_AFFECTED else 'unaffected')
    if IS_AFFECTED:
        assert 'COMPATSHIM_DISABLE is set' in shim.detail
    for off in ('0', 'false', 'No', ''):
        monkeypatch.setenv('COMPATSHIM_DISABLE', off)
        assert bool(compatshim.enable().patches) is IS_AFFECTED, off
        compatshim.disable()


def test_kill_switch_with_a_bad_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('COMPATSHIM_DISABLE', 'maybe')
    before = _snapshot()
    with pytest.raises(ValueError, match="COMPATSHIM_DISABLE='maybe' is not allowed; use 1, true, yes or on"):
        compatshim.enable()
    assert compatshim.status().patches == () and _same(before, _snapshot())


def test_disable_with_nothing_running_and_twice() -> None:
    assert compatshim.disable().patches == ()
    compatshim.enable()
    compatshim.disable()
    assert compatshim.disable().patches == () and compatshim.status().stage is None


@NEEDS_PATCH
def test_enable_twice_with_different_stages_changes_the_default() -> None:
    first = compatshim.enable(stage='batch')
    second = compatshim.enable(stage='microbatch')
    assert second.patches == first.patches and second.stage == 'microbatch'
    with pytest.raises(ValueError, match="choose one of 'batch', 'microbatch'"):
        compatshim.enable(stage='epoch')
    assert compatshim.status().stage == 'microbatch'  # a bad second call changes nothing


@NEEDS_PATCH
@pytest.mark.runs_in('family')
def test_bare_pytest_compatshim_reads_the_stage_as_enable_does(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pytest --compatshim`` (no stage) enables the shim as ``enable()`` would: COMPATSHIM_STAGE first."""
    monkeypatch.setenv('COMPATSHIM_STAGE', 'microbatch')
    pytester.makepyfile('import compatshim\ndef test_stage():\n    assert compatshim.status().stage == "microbatch"\n')
    assert pytester.runpytest('--compatshim', '-p', 'no:cacheprovider').ret == 0
    assert pytester.runpytest('--compatshim=batch', '-p', 'no:cacheprovider').ret == 1  # an explicit stage wins


@NEEDS_PATCH
def test_the_enabled_fixture_leaves_the_shim_as_it_found_it(pytester: pytest.Pytester) -> None:
    """``compatshim_enabled`` in a run where the shim was already on (a conftest, ``compatshim run``): on for the test,
    and for the tests after it as it was (it used to be switched off)."""
    pytester.makepyfile(
        test_user="""
        import compatshim

        def test_on_before():
            compatshim.enable(stage='microbatch')

        def test_fixture(compatshim_enabled):
            assert compatshim_enabled.verdict.value == 'patched'

        def test_after():
            assert compatshim.status().stage == 'microbatch'
        """
    )
    try:
        pytester.runpytest_inprocess('-p', 'no:cacheprovider').assert_outcomes(passed=3)
    finally:
        compatshim.disable()


@NEEDS_PATCH
def test_enable_while_a_loop_runs_never_drops_the_transform_silently() -> None:
    """Issue 66: a callback that enables the shim at ``FIT_START`` (a platform's; a notebook's fit started first):
    on 0.25.0 the running fit called the transform never (without the shim 0.25 runs it on the host). That loop now
    runs as the release does, said once; the next fit runs it on the device."""
    from composer.core import Callback, DataSpec

    from compatshim.errors import CompatShimWarning

    class EnableAtFitStart(Callback):
        def fit_start(self, state: Any, logger: Any) -> None:
            compatshim.enable()

    host = FAMILY is Family.HOST
    probe = Probe()
    spec = DataSpec(loader(16, 8), device_transforms=probe) if host else DataSpec(loader(16, 8))  # 0.29+: TypeError
    fit, _ = trainer(make_device(), train_dataloader=spec, max_duration='1ep', callbacks=[EnableAtFitStart()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        fit.fit()
    said = [w for w in caught if issubclass(w.category, CompatShimWarning) and 'while a Composer' in str(w.message)]
    assert len(said) == 1 and f'as Composer {COMPOSER} does' in str(said[0].message), [str(w.message) for w in caught]
    assert [call.placement for call in probe.calls] == (['host', 'host'] if host else [])
    probe = Probe()
    spec = DataSpec(loader(16, 8), device_transforms=probe)
    fit, _ = trainer(make_device(), train_dataloader=spec, max_duration='1ep')
    fit.fit()
    assert [call.placement for call in probe.calls] == ['device', 'device']
