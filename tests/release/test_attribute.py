"""0.24.1's ``DataSpec.device_transforms`` *attribute*, beside its argument: read, called directly, assigned.

On 0.24.1 ``DataSpec.__init__`` sets ``self.device_transforms`` to the user's callable (or the identity method
``_default_device_transforms``) and the trainer reads the attribute at every batch, after moving the batch. So code
reads it, calls it on a batch it moved itself (custom evaluation loops), and assigns a new one after construction (or
in a subclass's ``__init__``) and has it run on the device. Each test asserts 0.24.1's behaviour. Its control leg runs
without the shim: a strict xfail on every affected release, where the transform runs on the host (0.25–0.26), never
runs or the attribute is missing (0.27–0.28), or the keyword is a ``TypeError`` (0.29+); it passes on 0.24.1.
What the generated conformance suite (tests/conformance) covers in every family is not repeated here; what stays runs
in every release (and, marked ``python``, on every Python) or says what the generator cannot (a custom eval loop,
``disable()``, the monitor).
"""

from __future__ import annotations

import copy
import gc
import pickle
from typing import Any

import pytest
import torch
from conftest import BATCH_SIZE, FAMILY, MICROBATCH, NEEDS_PATCH, STAGED_LEGS, make_device
from workload import Probe, assert_coherent, assert_on_device, fit_probe, loader, trainer

import compatshim
from compatshim.config.support import Family
from compatshim.observe.placement import Placement
from compatshim.shim import data_spec
from compatshim.shim.notes import TapsInside
from compatshim.testing import placement

pytestmark = pytest.mark.device

LEGS = STAGED_LEGS


def _spec(transform: Any = None, n: int = 16) -> Any:
    from composer.core import DataSpec

    return DataSpec(loader(n, BATCH_SIZE)) if transform is None else DataSpec(loader(n), device_transforms=transform)


def _fit(spec: Any, batches: int = 2) -> Any:
    t, _ = trainer(make_device(), device_train_microbatch_size=MICROBATCH)
    t.fit(train_dataloader=spec, duration=f'{batches}ba')
    return t


def _identity(spec: Any) -> None:
    """The attribute of a DataSpec given no transform: a callable that returns the batch it is given."""
    batch = [torch.ones(2, 4), torch.zeros(2)]
    assert spec.device_transforms(batch) is batch


@pytest.mark.python
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_read_gives_the_callable_given_and_it_runs_on_the_device(leg: str, per_step: int) -> None:
    fn = Probe()
    spec = _spec(fn)
    assert spec.device_transforms is fn
    _identity(_spec())
    _fit(spec)
    assert_on_device(fn, 2 * per_step, 'train')
    assert spec.device_transforms is fn


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_custom_eval_loop_calls_the_attribute_on_a_moved_batch(leg: str, per_step: int) -> None:
    """The public script's evaluation loop: iterate, ``batch_to_device``, ``_train_data_spec.device_transforms``."""
    fn = Probe()
    t = _fit(_spec(fn))
    device, spec = t.state.device, t._train_data_spec
    for batch in spec.dataloader:
        moved = device.batch_to_device(batch)
        out = spec.device_transforms(moved)
        assert placement(out[0]) == 'device', 'the custom loop got its batch back off the device'
        assert torch.all(out[0][:, 0] == fn.calls[-1].draw), 'the custom loop did not get the transformed batch'
    assert_on_device(fn, 2 * per_step + 2, 'fit, then the custom loop (one call per batch)')


@pytest.mark.python
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_assigned_after_construction_runs_on_the_device(leg: str, per_step: int) -> None:
    """Assigned before a fit and between fits, over a DataSpec built with a transform and one built without."""
    first, replacement, later = Probe(), Probe(), Probe()
    given = _spec(first)
    given.device_transforms = replacement
    assert given.device_transforms is replacement
    t = _fit(given)
    assert first.calls == [], 'the replaced transform still ran'
    assert_on_device(replacement, 2 * per_step, 'assigned before the fit')
    given.device_transforms = later
    t.fit(duration='2ba')  # two more batches
    assert_on_device(replacement, 2 * per_step, 'replaced between fits')
    assert_on_device(later, 2 * per_step, 'assigned between fits')
    bare = _spec()
    bare.device_transforms = fn = Probe()
    _fit(bare)
    assert_on_device(fn, 2 * per_step, 'assigned to a DataSpec built without one')


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_subclass_sets_the_attribute_in_its_init(leg: str, per_step: int) -> None:
    """After the base ``__init__``: it takes effect. Before it: the base ``__init__`` sets the attribute, as 0.24.1's
    does (the transform it is given; else the identity method), so an earlier value never runs."""
    from composer.core import DataSpec

    class After(DataSpec):
        def __init__(self, dataloader: Any, fn: Any) -> None:
            super().__init__(dataloader)
            self.device_transforms = fn

    class Before(DataSpec):
        def __init__(self, dataloader: Any, fn: Any, early: Any) -> None:
            self.device_transforms = early
            super().__init__(dataloader, **({} if fn is None else {'device_transforms': fn}))

    after, before, early = Probe(), Probe(), Probe()
    spec = After(loader(16), after)
    assert spec.device_transforms is after
    _fit(spec)
    assert_on_device(after, 2 * per_step, 'set after the base __init__')
    spec = Before(loader(16), before, early)
    assert spec.device_transforms is before
    _fit(spec)
    assert_on_device(before, 2 * per_step, 'given to the base __init__ by a subclass')
    _identity(Before(loader(16), None, early))
    _fit(Before(loader(16), None, early))
    assert early.calls == [], 'a value set before the base __init__ ran: 0.24.1 replaces it'


@pytest.mark.parametrize('leg', [LEGS[0], LEGS[2]], indirect=True)
def test_assigned_transform_is_coherent_at_any_microbatch_size(leg: str) -> None:
    """Stage batch: one call per step on the whole batch, every microbatch a slice of it (microbatches 1 and 4)."""
    from composer.core import DataSpec

    def assigned(probe: Probe) -> Any:
        spec = DataSpec(loader(32, 8))
        spec.device_transforms = probe
        return spec

    for microbatch in (1, 4):
        probe, per_step_inputs = fit_probe(microbatch, spec=assigned)
        assert_coherent(probe, per_step_inputs)


@NEEDS_PATCH
@pytest.mark.parametrize('stage', ['batch', 'microbatch'])
def test_assigning_none_or_deleting_removes_the_transform(stage: str) -> None:
    """0.24.1 stored ``None`` (and ``del`` removed the attribute), and its trainer then failed at the first batch;
    with the shim the attribute reads as on 0.24.1 (``None``; after ``del``, no attribute) and nothing runs."""
    compatshim.enable(stage=stage)
    fn = Probe()
    spec = _spec(fn)
    spec.device_transforms = None
    assert spec.device_transforms is None
    _fit(spec)
    assert fn.calls == []
    spec.device_transforms = again = Probe()
    _fit(spec)
    assert {c.placement for c in again.calls} == {'device'} and again.calls
    del spec.device_transforms
    assert not hasattr(spec, 'device_transforms')
    _fit(spec)
    assert len(again.calls) == 2 * (4 if stage == 'microbatch' else 1)


@NEEDS_PATCH
def test_a_value_that_is_not_callable_fails_at_the_first_batch_as_on_0_24_1() -> None:
    """The argument is refused at once (one line, nothing built); an assignment is the DataSpec's own business, and
    the trainer's call of it fails at the first batch, as 0.24.1's did."""
    compatshim.enable()
    with pytest.raises(TypeError, match=r'device_transforms=\.\.\.\) must be a callable .* got str'):
        _spec('normalize')
    spec = _spec(Probe())
    spec.device_transforms = 'normalize'
    assert spec.device_transforms == 'normalize'
    with pytest.raises(TypeError, match="'str' object is not callable"):
        _fit(spec)


@NEEDS_PATCH
def test_copies_and_pickles_keep_the_assigned_transform() -> None:
    compatshim.enable()
    spec = _spec()
    spec.device_transforms = Probe()
    for clone in (copy.deepcopy(spec), pickle.loads(pickle.dumps(spec))):
        assert isinstance(clone.device_transforms, Probe) and clone.device_transforms is not spec.device_transforms
        _fit(clone)
        assert_on_device(clone.device_transforms, 2, 'a copy')
        assert spec.device_transforms.calls == [], 'the copy ran the original transform'


@NEEDS_PATCH
def test_assigning_on_a_shallow_copy_leaves_the_original_alone() -> None:
    """As on 0.24.1, where the attribute is the instance's own: ``copy.copy(spec)``, then an assignment on the copy,
    or on the original."""
    compatshim.enable()
    first, second = Probe(), Probe()
    spec = _spec(first)
    clone = copy.copy(spec)
    clone.device_transforms = second
    assert spec.device_transforms is first and clone.device_transforms is second
    _fit(spec)
    _fit(clone)
    assert_on_device(first, 2, 'the original')
    assert_on_device(second, 2, 'the copy')
    kept, third = Probe(), Probe()
    spec = _spec(kept)
    clone = copy.copy(spec)
    spec.device_transforms = third  # on the original this time: the copy keeps its own
    assert clone.device_transforms is kept
    _fit(clone)
    assert_on_device(kept, 2, 'the copy, after an assignment on its original')
    assert third.calls == []


@NEEDS_PATCH
def test_after_disable_the_attribute_is_the_dataspecs_own() -> None:
    """After ``disable()`` nothing of the shim's is left on a DataSpec built under it: the attribute is the transform,
    and Composer does with it what Composer does (0.25–0.26: on the host; 0.27+: nothing); ``enable()`` again and it
    runs on the device."""
    compatshim.enable()
    fn = Probe()
    spec = _spec(fn)
    compatshim.disable()
    assert spec.device_transforms is fn
    _fit(spec)
    assert [c.placement for c in fn.calls] == (['host', 'host'] if FAMILY is Family.HOST else [])
    compatshim.enable()
    _fit(spec)
    assert [c.placement for c in fn.calls][-2:] == ['device', 'device']


@NEEDS_PATCH
@pytest.mark.parametrize('how', ['argument', 'assigned', 'none'])
def test_an_assignment_while_the_shim_was_off_runs_once_it_is_on_again(how: str) -> None:
    """``enable()``, a DataSpec given a transform (or none), ``disable()``, another assigned, ``enable()``: the one
    assigned last runs, on the device; the one it replaced never runs again (as if the shim had stayed on)."""
    first, assigned = Probe(), Probe()
    with compatshim.enabled():
        spec = _spec(first if how == 'argument' else None)
        if how == 'assigned':
            spec.device_transforms = first
    spec.device_transforms = assigned
    with compatshim.enabled():
        assert spec.device_transforms is assigned
        _fit(spec)
    assert_on_device(assigned, 2, 'assigned while the shim was off')
    assert first.calls == []


@NEEDS_PATCH
def test_the_monitor_reports_a_transform_assigned_while_the_shim_was_off() -> None:
    """The transform that runs once the shim is on again is the one the monitor reports (from the loop after the one
    where it took over: that loop's first step was tapped before)."""
    from compatshim.monitor import TransformMonitor

    monitor, assigned = TransformMonitor(), Probe()
    with compatshim.enabled():
        spec = _spec(Probe())
    spec.device_transforms = assigned
    with compatshim.enabled():
        t, _ = trainer(make_device(), callbacks=[monitor])
        t.fit(train_dataloader=spec, duration='2ba')
        t.fit(duration='2ba')
    seen = monitor.summaries[-1].transforms['device_transforms']
    assert (seen.where, seen.calls_per_step, seen.calls) == ('device', 1, 2), monitor.summaries[-1].line
    assert len(assigned.calls) == 4


@NEEDS_PATCH
def test_disable_restores_the_class_exactly() -> None:
    from composer.core import DataSpec

    copy.copy(_spec())  # copyreg caches __slotnames__ on the class at the first copy: not the shim's
    gc.collect()  # an earlier test's subclass keeping a hook name of its own, still alive, adds the shim's lookup
    before = dict(vars(DataSpec))
    compatshim.enable()
    assert FAMILY is not None
    added = {name for name in vars(DataSpec) if name not in before or vars(DataSpec)[name] is not before[name]}
    patched = {target.rpartition('.')[2] for target in data_spec.targets(FAMILY)}  # the trainer reads the loop's view
    assert added == patched and 'device_transforms' not in vars(DataSpec)
    compatshim.disable()
    assert dict(vars(DataSpec)) == before
    spec = _spec()
    if FAMILY is Family.HOST:
        _identity(spec)
    else:
        assert not hasattr(spec, 'device_transforms')


@NEEDS_PATCH
def test_every_read_of_a_data_spec_is_pythons_own() -> None:
    """Issue 66: with the shim on and the monitor's watch armed, no Python lookup stands between any read and a
    DataSpec's attribute, on every family: the trainer reads the loop's view of the DataSpec, whose class serves the
    hook names; a read of the DataSpec itself, in a loop or outside one, is the value itself."""
    from composer.core import DataSpec

    from compatshim.observe.watch import watch
    from compatshim.shim import loops

    watch()  # as importing compatshim.monitor does: it reads through the loop's view too
    gc.collect()  # an earlier test's subclass keeping a hook name of its own, still alive, adds the shim's lookup
    with compatshim.enabled():
        fn = lambda batch: batch  # noqa: E731
        spec = _spec(fn)
        assert DataSpec.__getattribute__ is object.__getattribute__
        assert not {'device_transforms', 'batch_transforms', 'microbatch_transforms'} & set(vars(DataSpec))
        assert spec.device_transforms is fn
        with loops.loop_frame(make_device(), 'train', None, spec, view=data_spec.view_of) as frame:
            view = frame.view
            assert isinstance(view, DataSpec) and type(view).__qualname__ == 'DataSpec' and vars(view) is vars(spec)
            assert spec.device_transforms is fn and view.split_batch is vars(spec)['split_batch']
            name = 'device_transforms' if FAMILY is Family.HOST else 'batch_transforms'
            assert isinstance(getattr(view, name), TapsInside)  # the hook, once per loop
            assert getattr(view, name) is getattr(view, name)
        if FAMILY is not Family.HOST:
            del spec.microbatch_transforms
            with pytest.raises(AttributeError, match="'DataSpec' object has no attribute 'microbatch_transforms'"):
                spec.microbatch_transforms  # noqa: B018


def _serving_batch_transforms() -> type:
    """A DataSpec subclass written for 0.27+ whose property serves batch_transforms (with a setter)."""
    from composer.core import DataSpec

    class PropSpec(DataSpec):  # type: ignore[misc]
        @property
        def batch_transforms(self) -> Any:
            return self._batch_transforms

        @batch_transforms.setter
        def batch_transforms(self, value: Any) -> None:
            self._batch_transforms = value

    return PropSpec


@pytest.mark.skipif(FAMILY in (None, Family.HOST), reason='0.27+: the hook names are ones 0.24.1 code never defines')
def test_a_subclass_serving_a_hook_name_on_its_class_is_served_by_the_shim() -> None:
    """A class that serves batch_transforms itself (a property) hides the shim's descriptor from the trainer: the shim's
    lookup serves the trainer's read, so device_transforms runs on the device, and Composer's value (the argument,
    which Composer's __init__ assigned past the property, as 0.24.1 never set it) runs as Composer runs it."""
    PropSpec = _serving_batch_transforms()
    host, device = Probe(), Probe()
    with compatshim.enabled():
        spec = PropSpec(loader(16), batch_transforms=host, device_transforms=device)
        trainer(make_device(), train_dataloader=spec, max_duration='2ba')[0].fit()
    assert [c.placement for c in host.calls] == [Placement.HOST] * 2
    assert_on_device(device, 2, 'a subclass serving batch_transforms with a property')


@pytest.mark.skipif(FAMILY in (None, Family.HOST), reason='0.27+: the hook names are ones 0.24.1 code never defines')
def test_the_monitor_sees_a_hook_name_a_subclass_serves_itself() -> None:
    """With the shim off, a subclass written for 0.27+ whose property serves batch_transforms: the trainer's read
    through the loop's view gets what the property gives, through the monitor's tap, and the monitor sees the calls."""
    from compatshim.monitor import TransformMonitor

    PropSpec = _serving_batch_transforms()
    probe, monitor = Probe(), TransformMonitor()
    spec = PropSpec(loader(16), batch_transforms=probe)
    t, _ = trainer(make_device(), train_dataloader=spec, max_duration='2ba', callbacks=[monitor])
    t.fit()
    seen = monitor.summaries[-1].transforms['batch_transforms']
    assert (seen.where, seen.calls) == ('host', len(probe.calls)) == ('host', 2), monitor.summaries[-1].line


def test_the_watch_leaves_a_deleted_hook_name_to_python() -> None:
    """With the shim off, the monitor's watch observes: a DataSpec whose hook name the trainer reads was deleted fails
    in the trainer as it does without compatshim (the shim's stand-in for a missing value is the shim's alone)."""
    from compatshim.observe.watch import watch

    watch()
    name = 'batch_transforms' if FAMILY in (Family.DROPPED, Family.REJECTED) else 'device_transforms'
    spec = _spec()
    delattr(spec, name)
    t, _ = trainer(make_device(), train_dataloader=spec, max_duration='1ba')
    with pytest.raises(AttributeError, match=f"'DataSpec' object has no attribute '{name}'"):
        t.fit()


@NEEDS_PATCH
def test_the_monitor_reports_an_assigned_transform() -> None:
    from compatshim.monitor import TransformMonitor

    compatshim.enable()
    monitor = TransformMonitor()
    t, _ = trainer(make_device(), callbacks=[monitor])
    spec = _spec(Probe())
    t.fit(train_dataloader=spec, duration='2ba')
    spec.device_transforms = assigned = Probe()
    t.fit(duration='2ba')
    seen = monitor.summaries[-1].transforms['device_transforms']
    assert (seen.where, seen.calls_per_step, seen.calls) == ('device', 1, 2), monitor.summaries[-1].line
    assert len(assigned.calls) == 2
    spec.device_transforms = None
    t.fit(duration='2ba')
    assert 'device_transforms' not in monitor.summaries[-1].transforms, monitor.summaries[-1].line
