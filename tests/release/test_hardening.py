"""The shim is never the reason a run crashes, loses a checkpoint or hides an error.

Transforms that raise or return the wrong thing, unusual batch structures, checkpoints saved and resumed with the
shim on and off, pickling and deep copies, dataloader workers under fork and spawn, and a Composer algorithm on
``Event.AFTER_DATALOADER``. Placement tests have a control leg (strict xfail on affected releases).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import pickle
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FAMILY, IS_AFFECTED, LEGS, NEEDS_PATCH, make_device
from torch.utils.data import DataLoader
from workload import Probe, any_batch_model, loader, trainer

import compatshim
from compatshim.config.support import Family
from compatshim.shim import loops, registry
from compatshim.testing import placement

pytestmark = pytest.mark.device

STAGES = [pytest.param('batch', id='batch'), pytest.param('microbatch', id='microbatch', marks=NEEDS_PATCH)]


class UserAugmentError(ValueError):
    """Stands for whatever a user's transform raises."""


def failing_transform(batch: Any) -> Any:
    raise UserAugmentError('boom in the user transform')


def _spec(transform: Any, **kwargs: Any) -> Any:
    """A DataSpec with ``transform`` as its device_transforms (``None``: no transform, not even the keyword)."""
    from composer.core import DataSpec

    if transform is not None:
        kwargs['device_transforms'] = transform
    return DataSpec(kwargs.pop('dataloader', None) or loader(16), **kwargs)


def _nothing_left_open(device: Any) -> None:
    assert loops.current_frame() is None
    assert 'batch_to_device' not in vars(device), 'something of the shim was left on the device'
    assert 'batch_to_device' not in vars(type(device)), "the loop frame's interposer was left on the device's class"


@pytest.mark.parametrize('stage', STAGES)
def test_transform_exception_propagates_unchanged(stage: str) -> None:
    compatshim.enable(stage=stage)
    patched = registry.patched_targets()
    device = make_device()
    t, _ = trainer(
        device, train_dataloader=_spec(failing_transform), max_duration='2ba', device_train_microbatch_size=4
    )
    with pytest.raises(UserAugmentError) as info:
        t.fit()
    assert type(info.value) is UserAugmentError and str(info.value) == 'boom in the user transform'
    assert traceback.extract_tb(info.value.__traceback__)[-1].name == 'failing_transform'
    _nothing_left_open(device)
    assert registry.patched_targets() == patched  # nothing half-patched or half-restored
    # The same process trains normally afterwards.
    probe = Probe()
    t2, _ = trainer(make_device(), train_dataloader=_spec(probe), max_duration='2ba', device_train_microbatch_size=4)
    t2.fit()
    assert {c.placement for c in probe.calls} == {'device'}


@NEEDS_PATCH
def test_a_transform_returning_none_gets_a_note_on_composers_own_error() -> None:
    """0.24.1 could not run a transform that returns ``None`` either; at stage batch Composer's own error propagates
    as raised, with a note naming what read the batch, the transform, the DataSpec and both structures."""
    compatshim.enable(stage='batch')
    device = make_device()
    t, _ = trainer(device, train_dataloader=_spec(lambda batch: None), max_duration='2ba')
    with pytest.raises(Exception) as info:
        t.fit()
    assert not isinstance(info.value, compatshim.CompatShimError)
    assert not any('compatshim' in line for line in str(info.value).splitlines()), 'the message was changed'
    (note,) = info.value.__notes__
    assert 'returned: None (is a `return` missing?) for a batch that was a list of 2' in note
    assert 'get_num_samples_in_batch' in note
    assert 'DataSpec(dataloader=DataLoader over TensorDataset)' in note
    _nothing_left_open(device)


Pair = collections.namedtuple('Pair', ['x', 'y'])


@dataclasses.dataclass
class Record:
    """A dataclass-like batch: Composer's batch_to_device leaves such objects alone."""

    x: torch.Tensor
    y: torch.Tensor


def _x(batch: Any) -> torch.Tensor:
    if isinstance(batch, Record):
        return batch.x
    if isinstance(batch, dict):
        return batch['inputs']
    return batch[0]


def _collate(kind: str) -> Any:
    def collate(samples: list[torch.Tensor]) -> Any:
        x, y = torch.stack(samples), torch.zeros(len(samples))
        return {
            'namedtuple': Pair(x, y),
            'empty': {'inputs': x, 'labels': y, 'extras': [], 'meta': {}, 'nothing': None, 'tags': ()},
            'dataclass': Record(x, y),
        }[kind]

    return collate


def _shape_of(batch: Any) -> Any:
    """Types and placements, recursively: what 'the same behaviour as Composer's batch_to_device' compares."""
    if isinstance(batch, torch.Tensor):
        return ('tensor', placement(batch))
    if isinstance(batch, dict):
        return ('dict', {k: _shape_of(v) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, [_shape_of(v) for v in batch])
    if isinstance(batch, Record):
        return ('Record', _shape_of(batch.x), _shape_of(batch.y))
    return (type(batch).__name__, batch)


@NEEDS_PATCH
@pytest.mark.parametrize('kind', ['namedtuple', 'empty', 'dataclass'])
def test_structures_match_composers_batch_to_device(kind: str) -> None:
    from composer import Trainer
    from composer.core import DataSpec

    compatshim.enable()
    seen: list[Any] = []

    def transform(batch: Any) -> Any:
        seen.append(_shape_of(batch))
        return batch

    data = [torch.randn(4) for _ in range(8)]
    spec = DataSpec(
        DataLoader(data, batch_size=4, collate_fn=_collate(kind)),
        device_transforms=transform,
        get_num_samples_in_batch=lambda b: len(_x(b)),
        split_batch=lambda b, n: [b],
    )
    Trainer(
        model=any_batch_model(_x),
        device=make_device(),
        train_dataloader=spec,
        max_duration='2ba',
        progress_bar=False,
        precision='fp32',
    ).fit()
    expected = _shape_of(make_device().batch_to_device(_collate(kind)(data[:4])))
    assert seen == [expected, expected]


def _checkpoint(folder: Path, shim: bool, transform: Any) -> tuple[Path, dict[str, torch.Tensor]]:
    """Train 2 batches with the shim on or off and save; returns the checkpoint and the final weights."""
    (compatshim.enable if shim else compatshim.disable)()
    spec = _spec(transform if shim or FAMILY is not Family.REJECTED else None)
    t, _ = trainer(
        make_device(),
        train_dataloader=spec,
        max_duration='2ba',
        device_train_microbatch_size=4,
        save_folder=str(folder),
        save_interval='2ba',
        save_filename='ckpt-ba{batch}.pt',
    )
    t.fit()
    weights = {k: v.detach().cpu().clone() for k, v in t.state.model.state_dict().items()}
    t.close()
    path = folder / 'ckpt-ba2.pt'
    assert path.exists(), sorted(p.name for p in folder.iterdir())
    return path, weights


@pytest.mark.parametrize(
    ('saved_with', 'resumed_with'), [(True, True), (True, False), (False, True)], ids=['on-on', 'on-off', 'off-on']
)
def test_checkpoint_save_and_resume(tmp_path: Path, saved_with: bool, resumed_with: bool) -> None:
    path, weights = _checkpoint(tmp_path, saved_with, Probe())
    assert b'compatshim' not in path.read_bytes(), 'something of the shim was pickled into the checkpoint'
    (compatshim.enable if resumed_with else compatshim.disable)()
    probe = Probe()
    spec = _spec(probe if resumed_with or FAMILY is not Family.REJECTED else None)
    t, _ = trainer(
        make_device(), train_dataloader=spec, max_duration='4ba', device_train_microbatch_size=4, load_path=str(path)
    )
    loaded = t.state.model.state_dict()
    for name, value in weights.items():
        assert torch.equal(loaded[name].detach().cpu(), value), f'{name} was not restored'
    assert int(t.state.timestamp.batch) == 2
    t.fit()
    assert int(t.state.timestamp.batch) == 4
    if resumed_with:
        assert [c.placement for c in probe.calls] == ['device', 'device']


def picklable_transform(batch: Any) -> Any:
    return Probe()(batch)


def _hooks(spec: Any) -> list[Any]:
    names = ('device_transforms', 'batch_transforms', 'microbatch_transforms')
    return [getattr(spec, n) for n in names if type(getattr(spec, n, None)).__module__ == 'compatshim.shim.hooks']


@pytest.mark.parametrize('how', ['pickle', 'deepcopy'])
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_pickle_and_deepcopy(leg: str, how: str) -> None:
    """A copied DataSpec keeps its hooks (stage, owner) and its copied transform still runs on the device."""
    probe = Probe()
    patched = leg == 'shim' and IS_AFFECTED
    spec = _spec(probe, data_transfer_stage='microbatch') if patched else _spec(probe)
    clone = pickle.loads(pickle.dumps(spec)) if how == 'pickle' else copy.deepcopy(spec)
    assert [type(h).__name__ for h in _hooks(clone)] == [type(h).__name__ for h in _hooks(spec)]
    for original, copied in zip(_hooks(spec), _hooks(clone)):
        assert copied is not original and copied.stage == original.stage and copied.spec_name == original.spec_name
    hooks = _hooks(clone)
    copied_probe = hooks[0].transform if hooks else getattr(clone, 'device_transforms', None)
    assert copied_probe is not probe and isinstance(copied_probe, Probe)
    t, _ = trainer(make_device(), train_dataloader=clone, max_duration='2ba', device_train_microbatch_size=4)
    t.fit()
    assert probe.calls == []
    assert {c.placement for c in copied_probe.calls} == {'device'}
    assert len(copied_probe.calls) == (4 if patched else 2)  # stage microbatch: 2 microbatches x 2 steps


#: ``spawn`` workers are fresh processes (each imports torch; 8-9 s a leg): the shim's side of them is its family's
#: and torch's, so they run in the family envs and on the forward torch, ``fork`` in every release.
SPAWN = pytest.param('spawn', marks=pytest.mark.runs_in('family', 'forward'))


@pytest.mark.parametrize('context', ['fork', SPAWN])
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_dataloader_workers(leg: str, context: str) -> None:
    probe = Probe()
    workers = loader(16, num_workers=2, multiprocessing_context=context)
    t, _ = trainer(
        make_device(),
        train_dataloader=_spec(probe, dataloader=workers),
        max_duration='2ba',
        device_train_microbatch_size=4,
    )
    t.fit()
    assert [c.placement for c in probe.calls] == ['device', 'device']
    assert sorted(i for c in probe.calls for i in c.ids) == list(range(16))


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_after_dataloader_algorithm_sees_the_device_batch(leg: str) -> None:
    """Composer's CutOut runs on Event.AFTER_DATALOADER; with stage "batch" it gets the device batch, as in 0.24.1."""
    from composer import Trainer
    from composer.algorithms import CutOut
    from composer.core import DataSpec

    from compatshim.bench.engine import SIZES
    from compatshim.bench.workload import Augment, bench_loader, bench_model

    class RecordingCutOut(CutOut):
        seen: list[str] = []

        def apply(self, event: Any, state: Any, logger: Any) -> Any:
            self.seen.append(placement(state.batch))
            return super().apply(event, state, logger)

    algorithm = RecordingCutOut(length=0.25)
    size = SIZES['tiny']
    spec = DataSpec(bench_loader(size), device_transforms=Augment(size.blur))
    Trainer(
        model=bench_model(),
        train_dataloader=spec,
        device=make_device(),
        max_duration='2ba',
        device_train_microbatch_size=size.microbatch,
        algorithms=[algorithm],
        progress_bar=False,
        precision='fp32',
    ).fit()
    assert algorithm.seen == ['device', 'device']


@NEEDS_PATCH
def test_a_loops_reads_of_the_hook_names_make_no_object_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer reads a hook name at every batch (0.27+: two names, per microbatch); the shim serves each loop's
    reads the hook it made at the first one, while the transform and the stage stay the same."""
    from compatshim.shim import hooks

    made: collections.Counter[str] = collections.Counter()
    for cls in (hooks.BatchHook, hooks.MicrobatchHook):
        original = cls.__init__

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            made[type(self).__name__] += 1
            _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, '__init__', counted)
    compatshim.enable()
    probe = Probe()
    t, _ = trainer(
        make_device(), train_dataloader=_spec(probe, dataloader=loader(96, 8)), max_duration='1ep',
        device_train_microbatch_size=4,
    )  # fmt: skip
    t.fit()
    assert len(probe.calls) == 12, 'the transform did not run once per batch'
    assert sum(made.values()) <= 2, f'hooks made for 12 batches of 2 microbatches: {dict(made)}'
    # A subclass's own value under a name 0.27 took (not callable: no transform the hook runs) is served alike.
    made.clear()
    spec = _spec(Probe(), dataloader=loader(96, 8))
    spec.batch_transforms = spec.microbatch_transforms = ['flip', 'crop']
    t.fit(train_dataloader=spec, duration='1ep')
    assert sum(made.values()) <= 2, f'hooks made for a subclass-style value over 12 batches: {dict(made)}'


@NEEDS_PATCH
def test_a_class_that_refuses_subclasses_is_not_subclassed() -> None:
    """A DataSpec subclass whose ``__init_subclass__`` refuses any subclass (a 'final' class): the view the trainer
    reads it through derives from the nearest base that can be subclassed, and the transform runs on the device,
    without a word."""
    import warnings

    from composer.core import DataSpec

    from compatshim.errors import CompatShimWarning

    class Final(DataSpec):  # type: ignore[misc]
        def __init_subclass__(cls, **kwargs: Any) -> None:
            raise TypeError('Final is final')

    compatshim.enable()
    probe = Probe()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        spec = Final(loader(16, 8), device_transforms=probe)
        trainer(make_device(), train_dataloader=spec, max_duration='1ep')[0].fit()
    assert not [w for w in caught if issubclass(w.category, CompatShimWarning)]
    assert [call.placement for call in probe.calls] == ['device', 'device']


def _callback(**events: Any) -> Any:
    """A callback running ``events[name](state)`` at each event of that name."""
    from composer.core import Callback

    class At(Callback):  # type: ignore[misc]
        def run_event(self, event: Any, state: Any, logger: Any) -> None:
            if event.value in events:
                events[event.value](state)

    return At()


@NEEDS_PATCH
def test_the_views_of_a_loop_keep_user_code_as_on_0_24_1() -> None:
    """Issue 66's review: a class registry kept by ``__init_subclass__`` never sees the view's class; the trainer's
    binding read by user code during the fit copies and pickles as the DataSpec, and (0.25–0.26) gives a transform
    that moves nothing when called by hand; an eval run from an ``EVAL_END`` callback (a loop inside one of its own
    mode) moves its batches."""
    from composer.core import DataSpec

    class Base(DataSpec):  # type: ignore[misc]
        registry: dict[str, type] = {}

        def __init_subclass__(cls, **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)
            Base.registry[cls.__name__] = cls

    class Registered(Base):  # type: ignore[misc]
        pass

    compatshim.enable('batch')
    probe, seen, moved = Probe(), {}, []
    device = make_device()
    move = device.batch_to_device
    device.batch_to_device = lambda batch: (moved.append(1), move(batch))[1]  # a transfer counter on the instance

    def read(state: Any) -> None:
        bound = seen['trainer']._train_data_spec
        seen['copies'] = type(copy.copy(bound)), type(bound.__reduce_ex__(2)[1][0])  # pickled: the DataSpec
        if FAMILY is Family.HOST:
            calls, moves = len(probe.calls), len(moved)
            bound.device_transforms([torch.zeros(2, 4), torch.zeros(2)])
            seen['by hand'] = (len(probe.calls) - calls, len(moved) - moves)

    fit, _ = trainer(device, train_dataloader=Registered(loader(16, 8), device_transforms=probe), max_duration='1ep')
    fit.state.callbacks.append(_callback(batch_end=read))
    seen['trainer'] = fit
    fit.fit()
    assert Base.registry == {'Registered': Registered}
    assert [call.placement for call in probe.calls if call.size == 8] == ['device', 'device']  # by hand: of 2
    assert seen['copies'] == (Registered, Registered)
    assert seen.get('by hand', (1, 0)) == (1, 0)

    def again(state: Any) -> None:
        if not seen.get('nested'):
            seen['nested'] = True
            fit.eval(eval_dataloader=_spec(Probe(), dataloader=loader(16, 8)), subset_num_batches=2)

    fit.state.callbacks.append(_callback(eval_end=again))
    moves = len(moved)
    fit.eval(eval_dataloader=_spec(Probe(), dataloader=loader(16, 8)), subset_num_batches=2)
    assert len(moved) - moves == 4, 'the eval inside an eval did not move its batches'
    compatshim.disable()


@pytest.mark.skipif(FAMILY is not Family.HOST, reason='0.25–0.26: stage microbatch arms the loop frame')
def test_an_armed_step_transforms_each_microbatch_its_split_returned_once() -> None:
    """0.25–0.26 at stage microbatch: the transform follows the move of each microbatch the step's split returned,
    once: not a callback's move of the moved microbatch at ``BEFORE_FORWARD``, and also where the split returns the
    whole batch as its one microbatch (a batch that cannot be split)."""

    def again(state: Any) -> None:
        state.batch = state.device.batch_to_device(state.batch)  # 'make sure it is on the device'

    compatshim.enable('microbatch')
    probe = Probe()
    fit, _ = trainer(
        make_device(), train_dataloader=_spec(probe, dataloader=loader(16, 8)), max_duration='1ep',
        device_train_microbatch_size=4, callbacks=[_callback(before_forward=again)],
    )  # fmt: skip
    fit.fit()
    assert [(call.placement, call.size) for call in probe.calls] == [('device', 4)] * 4
    probe = Probe()
    whole = _spec(probe, dataloader=loader(16, 8), split_batch=lambda batch, size: [batch])
    trainer(make_device(), train_dataloader=whole, max_duration='1ep', device_train_microbatch_size=4)[0].fit()
    assert [(call.placement, call.size) for call in probe.calls] == [('device', 8)] * 2
    compatshim.disable()
