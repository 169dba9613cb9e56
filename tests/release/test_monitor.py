"""The in-run monitor (``compatshim.monitor.TransformMonitor``) on the real Trainer of each release.

What Composer's ``InMemoryLogger`` receives in train, two evaluators and predict: where ``device_transforms`` ran,
its calls per step, its time, the bytes that crossed to the device. With the shim (both stages) it says *device*;
the control without the shim must fail on every affected release (strict xfail), and a second test pins what the
monitor says there instead (host on 0.25–0.26, never called on 0.27–0.28), with its warning and its strict error.
Then the places a run goes: ``'auto'`` microbatching with out-of-memory retries, a checkpoint saved and resumed,
``fit()`` twice, a DataSpec built before the monitor, and no read of device data per step.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from conftest import COMPOSER, DEVICE, FAMILY, IS_AFFECTED, LEGS, NEEDS_PATCH, make_device
from workload import OOMRecorder, Probe, any_batch_model, loader, trainer

import compatshim
from compatshim.config.support import Family

pytestmark = pytest.mark.device

#: What the monitor says of ``device_transforms`` without the shim, per family: train, eval, predict.
WITHOUT_SHIM = {
    None: ('device', 'device', 'device'),
    Family.HOST: ('host', 'host', 'device'),
    Family.DROPPED: ('never called', 'never called', 'never called'),
}
needs_dataspec_keyword = pytest.mark.skipif(
    FAMILY is Family.REJECTED, reason=f'Composer {COMPOSER} rejects device_transforms without the shim (TypeError)'
)


@pytest.fixture(autouse=True)
def _unwatched_after() -> Iterator[None]:
    """Each test leaves DataSpec.__init__ as it found it (the monitor's watch lives for the process otherwise)."""
    yield
    from compatshim.monitor import unwatch

    unwatch()


def _logged(logger: Any, key: str) -> list[Any]:
    return [value for _, value in logger.data.get(key, [])]


def _run(**trainer_kwargs: Any) -> tuple[Any, Any, Any]:
    """fit (4 steps, microbatches of 4, evaluators ``a`` and ``b``) and predict, with a monitor and InMemoryLogger."""
    from composer.core import DataSpec, Evaluator
    from composer.loggers import InMemoryLogger

    from compatshim.monitor import TransformMonitor

    monitor, logger = TransformMonitor(**trainer_kwargs.pop('monitor', {})), InMemoryLogger()
    evaluators = [
        Evaluator(label=label, dataloader=DataSpec(loader(n, bs), device_transforms=Probe()), metric_names=[])
        for label, n, bs in (('a', 16, 8), ('b', 8, 4))
    ]
    t, _ = trainer(
        make_device(),
        train_dataloader=DataSpec(loader(32), device_transforms=Probe()),
        eval_dataloader=evaluators,
        max_duration='4ba',
        eval_interval='4ba',
        device_train_microbatch_size=4,
        callbacks=[monitor],
        loggers=[logger],
        **trainer_kwargs,
    )
    t.fit()
    t.predict(DataSpec(loader(16), device_transforms=Probe()))
    return monitor, logger, t


def _where(logger: Any, label: str) -> str:
    """Where the logged metrics put ``device_transforms`` over a loop: device, host, mixed, never called."""
    calls = _logged(logger, f'data/{label}/device_transforms/calls')
    on = _logged(logger, f'data/{label}/device_transforms/on_device')
    if not any(calls):
        return 'never called'
    return 'device' if set(on) == {1.0} else 'host' if set(on) == {0.0} else 'mixed'


@pytest.mark.python
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_metrics_in_train_two_evaluators_and_predict(leg: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        monitor, logger, _ = _run()
    ours = [str(w.message) for w in caught if issubclass(w.category, compatshim.CompatShimWarning)]
    assert ours == [], 'with the shim working, the monitor warns of nothing'
    steps = {'train': 4, 'a': 2, 'b': 2, 'predict': 2}
    for label, n in steps.items():
        assert _logged(logger, f'data/{label}/device_transforms/calls') == [1] * n, label
        assert _where(logger, label) == 'device', label
        assert all(b > 0 for b in _logged(logger, f'data/{label}/bytes_to_device')), label
        assert _logged(logger, f'data/{label}/bytes_to_device/float32'), label
        assert len(_logged(logger, f'data/{label}/device_transforms/time_ms')) == n, label
    assert [s.label for s in monitor.summaries] == ['a', 'b', 'train', 'predict']
    for summary in monitor.summaries:
        transform = summary.transforms['device_transforms']
        assert (transform.where, transform.calls_per_step, transform.stage) == ('device', 1, 'batch'), summary.line
        assert summary.steps == steps[summary.label] and summary.bytes_per_step > 0
        assert f"'{summary.label}'" in summary.line and 'on the device, 1 call/step' in summary.line
        assert _logged(logger, f'data/{summary.label}/device_transforms/total_calls') == [steps[summary.label]]
        assert _logged(logger, f'data/{summary.label}/device_transforms/median_calls') == [1]
        assert _logged(logger, f'data/{summary.label}/steps') == [steps[summary.label]]


@pytest.mark.python
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_dataspecs_over_one_dataloader_are_told_apart(leg: str) -> None:
    """Train, evaluators and predict over one DataLoader object, each loop with its own DataSpec: each is judged by the
    DataSpec it runs, not by the last one built over the dataloader (fit, predict, fit again, an eval() of a new
    DataSpec beside the Trainer's evaluator, a predict of the evaluator's DataSpec)."""
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor

    shared, monitor = loader(16), TransformMonitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        evaluator = DataSpec(shared, device_transforms=Probe())
        t, _ = trainer(
            make_device(),
            train_dataloader=DataSpec(shared, device_transforms=Probe()),
            eval_dataloader=evaluator,
            eval_interval='2ba',
            max_duration='2ba',
            callbacks=[monitor],
        )
        t.fit()
        t.predict(DataSpec(shared, device_transforms=Probe()))
        t.fit(duration='2ba')
        t.eval(eval_dataloader=DataSpec(shared, device_transforms=Probe()))
        t.predict(evaluator)
    assert [str(w.message) for w in caught if issubclass(w.category, compatshim.CompatShimWarning)] == []
    where = [(s.label, s.transforms['device_transforms'].where, s.steps) for s in monitor.summaries]
    labels = ['eval', 'train', 'predict', 'eval', 'train', 'eval', 'predict']  # fit, predict, fit, eval, predict
    assert where == [(label, 'device', 2) for label in labels], where


@pytest.mark.python
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_copied_or_unpickled_dataspec_is_seen_as_the_original(leg: str) -> None:
    """DataSpecs copy (deep and shallow) and pickle with their transforms (docs/stages.md): the monitor sees a copy's as
    it sees the original's. (A note the shim did not place is dropped from a pickle, so that unpickling never needs
    compatshim: pickles are checked where the shim converts the DataSpec.)"""
    import copy
    import pickle

    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor, watch

    watch()  # as importing the monitor does
    built = DataSpec(loader(16), device_transforms=Probe())
    copies = [copy.deepcopy(built), copy.copy(built)]
    copies += [pickle.loads(pickle.dumps(built))] if compatshim.status().patches else []
    for spec in copies:
        monitor = TransformMonitor()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            trainer(make_device(), train_dataloader=spec, max_duration='2ba', callbacks=[monitor])[0].fit()
        assert [str(w.message) for w in caught if issubclass(w.category, compatshim.CompatShimWarning)] == []
        assert monitor.summaries[0].transforms['device_transforms'].where == 'device'


def test_a_pickled_dataspec_never_needs_compatshim(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of compatshim's is kept in a DataSpec: one the watch noted, or one built under the shim with a
    transform and a stage, unpickles where compatshim is not installed (the note is a frozenset of names)."""
    import pickle

    from composer.core import DataSpec

    from compatshim.monitor import watch

    watch()
    given = {} if FAMILY is Family.REJECTED else {'device_transforms': Probe()}
    pickles = [pickle.dumps(DataSpec(loader(8), **given))]  # noted by the watch
    with compatshim.enabled() if IS_AFFECTED else contextlib.nullcontext():
        stage = {'data_transfer_stage': 'microbatch'} if IS_AFFECTED else {}
        pickles.append(pickle.dumps(DataSpec(loader(8), device_transforms=Probe(), **stage)))  # built by the shim
    for name in [name for name in sys.modules if name == 'compatshim' or name.startswith('compatshim.')]:
        monkeypatch.setitem(sys.modules, name, None)  # as where compatshim is not installed
    found = [pickle.loads(one) for one in pickles]
    assert vars(found[0])['_compatshim_note'] == (frozenset(given) if FAMILY is Family.DROPPED else frozenset())
    assert isinstance(vars(found[1])['_compatshim_note'], frozenset) and isinstance(found[1].device_transforms, Probe)


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_fit_that_raised_leaves_no_dataspec_behind(leg: str) -> None:
    """A loop that raises never reaches its end event: the next fit, over a new DataSpec, is judged by that one."""
    from composer import Callback
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor

    class Boom(Callback):  # type: ignore[misc]
        def batch_end(self, state: Any, logger: Any) -> None:
            if int(state.timestamp.batch) == 1:
                raise RuntimeError('boom')

    monitor = TransformMonitor()
    t, _ = trainer(
        make_device(), train_dataloader=DataSpec(loader(16), device_transforms=Probe()), callbacks=[monitor, Boom()]
    )
    with pytest.raises(RuntimeError, match='boom'):
        t.fit(duration='2ba')
    t.fit(train_dataloader=DataSpec(loader(16), device_transforms=Probe()), duration='3ba')
    seen = monitor.summaries[-1].transforms['device_transforms']
    assert (seen.where, seen.calls_per_step) == ('device', 1), monitor.summaries[-1].line


def test_a_predict_that_raised_leaves_no_steps_behind() -> None:
    """The steps a loop counted before it raised are not the next loop's (an outside trial saw 2 + 2 = 4)."""
    from composer import Callback
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor

    class Boom(Callback):  # type: ignore[misc]
        def predict_batch_end(self, state: Any, logger: Any) -> None:
            raise RuntimeError('boom')

    if IS_AFFECTED:
        compatshim.enable()
    monitor = TransformMonitor()
    t, _ = trainer(make_device(), callbacks=[monitor, Boom()])
    with pytest.raises(RuntimeError, match='boom'):
        t.predict(DataSpec(loader(16), device_transforms=Probe()))
    t.state.callbacks.remove(next(cb for cb in t.state.callbacks if isinstance(cb, Boom)))
    t.predict(DataSpec(loader(16), device_transforms=Probe()), subset_num_batches=2)
    (summary,) = monitor.summaries
    assert (summary.label, summary.steps, summary.steps_in_all) == ('predict', 2, 3), summary.line


def test_a_noted_dataspec_lives_no_longer_than_its_users_hold_it() -> None:
    """What the watch and the shim note of a DataSpec does not keep it (nor its dataloader and data) alive."""
    import gc
    import weakref

    from composer.core import DataSpec

    from compatshim.monitor import watch

    watch()  # the watch notes every DataSpec built from now on

    refs = []
    for shim in (False, IS_AFFECTED):  # the shim's note holds its hooks, which hold Composer's own bound transforms
        with compatshim.enabled() if shim else contextlib.nullcontext():
            argument = 'batch_transforms' if FAMILY is Family.REJECTED and not shim else 'device_transforms'
            refs += [weakref.ref(DataSpec(loader(8), **{argument: lambda batch: batch})) for _ in range(20)]
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 0


@NEEDS_PATCH
@pytest.mark.stage('microbatch')
@pytest.mark.parametrize('leg', [pytest.param('shim', id='shim')], indirect=True)
def test_stage_microbatch_calls_per_microbatch(leg: str) -> None:
    """Stage microbatch: one call per microbatch (32 samples, microbatches of 4, batches of 8: 2 per step)."""
    monitor, logger, _ = _run()
    assert _logged(logger, 'data/train/device_transforms/calls') == [2] * 4
    assert _where(logger, 'train') == 'device'
    train = next(s for s in monitor.summaries if s.label == 'train').transforms['device_transforms']
    assert (train.calls_per_step, train.stage) == (2, 'microbatch')


@needs_dataspec_keyword
def test_without_the_shim_it_says_where_composer_ran_it_and_warns_once_per_dataspec() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        monitor, logger, _ = _run()
    found = {s.label: s.transforms['device_transforms'].where for s in monitor.summaries}
    train, evaluation, predict = WITHOUT_SHIM[FAMILY]
    assert found == {'train': train, 'a': evaluation, 'b': evaluation, 'predict': predict}
    assert (_where(logger, 'train'), _where(logger, 'a'), _where(logger, 'predict')) == (train, evaluation, predict)
    ours = [str(w.message) for w in caught if issubclass(w.category, compatshim.CompatShimWarning)]
    if FAMILY is None:
        assert ours == []
        return
    bad = [label for label, where in found.items() if where != 'device']
    assert len(ours) == len(bad), ours  # one per DataSpec that is not on the device
    for message in ours:
        assert 'DataSpec(dataloader=DataLoader over TensorDataset)' in message and f'Composer {COMPOSER}' in message
        assert 'compatshim.enable()' in message and 'compatshim run' in message
        assert ('never called' in message) == (FAMILY is Family.DROPPED)


@pytest.mark.skipif(FAMILY is None, reason=f'Composer {COMPOSER} is unaffected: strict never fires here')
@needs_dataspec_keyword
def test_strict_fails_the_first_step_whose_transform_is_not_on_the_device() -> None:
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor

    probe, monitor = Probe(), TransformMonitor(strict=True)  # first: a DataSpec built before it is not watched
    t, _ = trainer(
        make_device(),
        train_dataloader=DataSpec(loader(32), device_transforms=probe),
        max_duration='4ba',
        callbacks=[monitor],
    )
    with pytest.raises(compatshim.TransformPlacementError, match=f"in 'train'.*Composer {COMPOSER}"):
        t.fit()
    assert len(probe.calls) == (1 if FAMILY is Family.HOST else 0), 'strict stops at the first step'


def _recipe_run(strict: bool, loop: str) -> tuple[list[str], list[int], Optional[Exception]]:
    """The canonical uint8 pipeline (uint8 images, normalised by ``device_transforms``, a model that fails on an
    unnormalised batch) in one loop (``fit``, ``eval`` or ``predict``), without the shim, under a monitor: the
    monitor's warnings, for each forward how many of them had been given when it began, and the error the run ended
    with (the monitor's, strict; or the model's, on the raw uint8 batch)."""
    from composer import Trainer
    from composer.core import DataSpec

    from compatshim.bench.engine import SIZES
    from compatshim.bench.workload import RecipeTransform, recipe_loader, recipe_model
    from compatshim.monitor import TransformMonitor

    size, model, monitor = SIZES['tiny'], recipe_model(), TransformMonitor(strict=strict)
    caught: list[Any] = []

    def ours() -> list[str]:
        return [str(w.message) for w in caught if issubclass(w.category, compatshim.CompatShimWarning)]

    forwards: list[int] = []
    model.net.register_forward_pre_hook(lambda module, inputs: forwards.append(len(ours())))

    def spec() -> Any:
        return DataSpec(recipe_loader(size), device_transforms=RecipeTransform())

    t = Trainer(
        model=model,
        device=make_device(),
        train_dataloader=spec(),
        max_duration='1ba',
        callbacks=[monitor],
        precision='fp32',
        progress_bar=False,
    )
    run = {'fit': t.fit, 'eval': lambda: t.eval(eval_dataloader=spec()), 'predict': lambda: t.predict(spec())}[loop]
    error: Optional[Exception] = None
    with warnings.catch_warnings(record=True) as recording:
        warnings.simplefilter('always')
        caught = recording
        try:
            run()
        except RuntimeError as exc:
            error = exc
    return ours(), forwards, error


WITHOUT_A_RUN = pytest.mark.skipif(
    FAMILY not in (Family.HOST, Family.DROPPED),
    reason=f'Composer {COMPOSER}: without the shim the run is on the device (0.24) or never starts (0.29+)',
)


@WITHOUT_A_RUN
def test_a_dropped_or_host_transform_is_said_before_the_first_forward() -> None:
    """On 0.27–0.28 the dropped normalisation makes the first forward fail on the raw uint8 batch: the monitor has said
    "never called" (naming the DataSpec and the fix) when the loop started. On 0.25–0.26 it says "on the host" right
    after the first call, before the model sees the batch. Strict: its error instead, before any forward."""
    said, forwards, error = _recipe_run(strict=False, loop='fit')
    assert len(said) == 1, said
    assert 'DataSpec(dataloader=DataLoader over TensorDataset)' in said[0] and 'compatshim.enable()' in said[0]
    if FAMILY is Family.DROPPED:
        assert "device_transforms is never called in 'train'" in said[0]
        assert 'unsigned char' in str(error), 'the run dies on the raw uint8 batch, after the warning'
    else:
        assert "device_transforms saw its batch on the host in 'train'" in said[0] and error is None
    assert forwards and forwards[0] == 1, 'the warning was given before the first forward began'
    said, forwards, error = _recipe_run(strict=True, loop='fit')
    assert isinstance(error, compatshim.TransformPlacementError) and "in 'train'" in str(error)
    assert forwards == [], 'strict stops the run before the model gets the batch'


@WITHOUT_A_RUN
@pytest.mark.parametrize('loop', ['eval', 'predict'])
def test_an_evaluator_and_predict_say_it_at_their_start_too(loop: str) -> None:
    """Eval and predict of the same uint8 pipeline, strict: the monitor's error comes at their start (dropped) or right
    after their first transform call (host), before any forward. (Predict moves the whole batch first on 0.25–0.26:
    it runs on the device there, and nothing is said.)"""
    said, forwards, error = _recipe_run(strict=True, loop=loop)
    if FAMILY is Family.HOST and loop == 'predict':
        assert (said, error) == ([], None) and forwards
        return
    assert isinstance(error, compatshim.TransformPlacementError) and f"in '{loop}'" in str(error), error
    assert forwards == [], 'the monitor spoke before the model got the batch'


@NEEDS_PATCH
def test_strict_passes_with_the_shim() -> None:
    compatshim.enable()
    monitor, _, _ = _run(monitor={'strict': True})
    assert {s.transforms['device_transforms'].where for s in monitor.summaries} == {'device'}


@pytest.mark.skipif(DEVICE == 'mps', reason="Composer allows device_train_microbatch_size='auto' on GPU devices only")
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_auto_microbatching_with_oom_retries(leg: str) -> None:
    """``'auto'``: the first step fails twice with out-of-memory; stage batch still calls the transform once a step."""
    from composer.core import DataSpec
    from composer.loggers import InMemoryLogger

    from compatshim.monitor import TransformMonitor

    logger, recorder, monitor = InMemoryLogger(), OOMRecorder(oom_above=2), TransformMonitor()
    t, _ = trainer(
        make_device(auto_microbatching=True),
        recorder,
        train_dataloader=DataSpec(loader(16), device_transforms=Probe()),
        max_duration='2ba',
        device_train_microbatch_size='auto',
        callbacks=[monitor],
        loggers=[logger],
    )
    t.fit()
    assert recorder.ooms == 2
    assert _logged(logger, 'data/train/device_transforms/calls') == [1, 1]
    assert _where(logger, 'train') == 'device'


class _FakeClock:
    """A clock that moves only when the test says so: the monitor's wall clock (injected), and ``time`` for the taps
    and the device's moves of :mod:`compatshim.observe.recorder`."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.now


def test_the_wait_for_data_is_the_fetch_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``wait_ms`` is the dataloader's fetch: a collate that takes 50 ms counts; a batch-level transform that takes
    200 ms does not, nor the device's 10 ms move of each batch tensor (under the shim at stage batch, and on 0.24, the
    whole batch is moved before it reaches the trainer); ``wait_share`` is that over the step. On a fake clock."""
    from composer.core import DataSpec
    from composer.loggers import InMemoryLogger

    from compatshim.monitor import TransformMonitor
    from compatshim.observe import recorder as _recorder
    from compatshim.observe.steps import Steps

    clock = _FakeClock()
    monkeypatch.setattr(_recorder, 'time', clock)  # the wall time inside the taps and the moves
    device = make_device()
    move = device.tensor_to_device

    def slow_move(tensor: torch.Tensor) -> torch.Tensor:
        from compatshim.testing import is_on_device

        if not is_on_device(tensor) and tensor.numel() >= 8:  # a batch tensor, not Composer's one-element flags
            clock.now += 0.010
        return move(tensor)

    device.tensor_to_device = slow_move

    def collate(samples: list[Any]) -> Any:
        clock.now += 0.050
        return torch.utils.data.default_collate(samples)

    class Slow(Probe):
        def __call__(self, batch: Any) -> Any:
            clock.now += 0.200
            return super().__call__(batch)

    if IS_AFFECTED:
        compatshim.enable()
    given = FAMILY is not Family.REJECTED or IS_AFFECTED  # 0.29+ takes device_transforms only through the shim
    monitor, logger = TransformMonitor(), InMemoryLogger()
    monitor._steps = Steps(clock=clock.perf_counter)  # the step's wall clock, injected
    t, _ = trainer(
        device,
        train_dataloader=DataSpec(loader(24, collate_fn=collate), device_transforms=Slow()),
        eval_dataloader=DataSpec(loader(16, collate_fn=collate), device_transforms=Slow()),
        max_duration='3ba',
        eval_interval='3ba',
        callbacks=[monitor],
        loggers=[logger],
    )
    assert given
    t.fit()
    step = 0.050 + 0.200 + 0.020  # the fetch, the transform, the move of x and y
    for label, steps in (('train', 3), ('eval', 2)):
        assert _logged(logger, f'data/{label}/wait_ms') == pytest.approx([50.0] * steps), label
        assert _logged(logger, f'data/{label}/wait_share') == pytest.approx([0.050 / step] * steps), label
        summary = next(s for s in monitor.summaries if s.label == label)
        assert summary.wait_ms_per_step == pytest.approx(50.0) and 'waited 50 ms/step for data (19% of a step)' in (
            summary.text
        )


@needs_dataspec_keyword
def test_resume_from_a_checkpoint_keeps_counting(tmp_path: Path) -> None:
    """The monitor's totals travel in the checkpoint: a run resumed at step 2 of 4 says 4 steps with the runs before."""
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor

    if IS_AFFECTED:
        compatshim.enable()

    def fit(**kwargs: Any) -> TransformMonitor:
        monitor = TransformMonitor()
        t, _ = trainer(
            make_device(),
            train_dataloader=DataSpec(loader(32), device_transforms=Probe()),
            callbacks=[monitor],
            save_folder=str(tmp_path),
            save_filename='ep{epoch}-ba{batch}.pt',
            save_interval='2ba',
            **kwargs,
        )
        t.fit()
        t.close()
        return monitor

    first = fit(max_duration='2ba')
    resumed = fit(max_duration='4ba', load_path=str(tmp_path / 'ep0-ba2.pt'))
    (one,), (two,) = first.summaries, resumed.summaries
    assert (one.steps, one.steps_in_all) == (2, 2)
    assert (two.steps, two.steps_in_all) == (2, 4), two.line
    assert '(4 over all its runs and any it resumed)' in two.line
    assert two.transforms['device_transforms'].where == 'device'


@needs_dataspec_keyword
def test_fit_twice_gives_a_summary_each() -> None:
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor

    if IS_AFFECTED:
        compatshim.enable()
    monitor = TransformMonitor()
    t, _ = trainer(make_device(), train_dataloader=DataSpec(loader(32), device_transforms=Probe()), callbacks=[monitor])
    t.fit(duration='2ba')
    t.fit(duration='2ba')
    assert [(s.label, s.steps, s.steps_in_all) for s in monitor.summaries] == [('train', 2, 2), ('train', 2, 4)]


def test_a_loop_no_frame_names_is_said_to_be_unseen_for_that_reason() -> None:
    """A monitor whose watch was undone before the loop ran (no loop frame names the DataSpec, as for a subclass's own
    loop): it says why it cannot see the transforms, never that the release drops them; strict refuses the run."""
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor, unwatch, watch

    monitor, strict = TransformMonitor(), TransformMonitor(strict=True)
    unwatch()
    try:
        t, _ = trainer(make_device(), train_dataloader=DataSpec(loader(16)), max_duration='2ba', callbacks=[monitor])
        with pytest.warns(
            compatshim.CompatShimWarning, match="'train' dataloader: its loop is not one of the Trainer"
        ) as said:
            t.fit()
        assert not [w for w in said if 'drops' in str(w.message)]
        assert monitor.summaries[0].transforms == {} and monitor.summaries[0].bytes_per_step > 0
        t, _ = trainer(make_device(), train_dataloader=DataSpec(loader(16)), max_duration='2ba', callbacks=[strict])
        with pytest.raises(compatshim.TransformPlacementError, match="its loop is not one of the Trainer's own"):
            t.fit()
    finally:
        watch()


@needs_dataspec_keyword
def test_a_dataspec_built_before_the_monitor() -> None:
    """Without the shim the monitor taps the trainer's reads, so it sees a DataSpec built before it was imported —
    except on 0.27–0.28, where such a DataSpec kept no trace of the argument Composer dropped: it says so, once."""
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor, unwatch

    unwatch()
    spec = DataSpec(loader(16), device_transforms=Probe())
    monitor = TransformMonitor()
    t, _ = trainer(make_device(), train_dataloader=spec, max_duration='2ba', callbacks=[monitor])
    if FAMILY is not Family.DROPPED:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            t.fit()
        seen = monitor.summaries[0].transforms['device_transforms']
        assert seen.calls == 2 and seen.where == ('device' if FAMILY is None else 'host'), monitor.summaries[0].line
        assert not [w for w in caught if 'cannot see' in str(w.message)]
        return
    with pytest.warns(compatshim.CompatShimWarning, match="cannot see the transforms of the 'train' dataloader"):
        t.fit()
    assert monitor.summaries[0].transforms == {} and monitor.summaries[0].bytes_per_step > 0
    strict = TransformMonitor(strict=True)
    t, _ = trainer(make_device(), train_dataloader=spec, max_duration='2ba', callbacks=[strict])
    with pytest.raises(compatshim.TransformPlacementError, match='strict: a transform it cannot see is not verified'):
        t.fit()


def test_no_read_of_device_data_and_no_synchronize_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spy on every way the host waits for the device: the monitor adds none of them to a run.

    The fake accelerator is given an event clock, as cuda and mps have, of spy events, so the monitor times its
    transform with device events here too: ``torch.cuda.synchronize``/``torch.mps.synchronize`` and event waits must
    never be called; reads of device data (``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``) must be as many with
    the monitor as without it.
    """
    from compatshim import testing
    from compatshim.devices.accelerator import ACCELERATORS

    waits: list[str] = []
    for owner, name in ((torch.cuda, 'synchronize'), (torch.cuda.Event, 'synchronize'), (torch.cuda.Event, 'wait')):
        monkeypatch.setattr(owner, name, lambda *a, _n=name, **k: waits.append(_n))
    if getattr(torch, 'mps', None) is not None:
        monkeypatch.setattr(torch.mps, 'synchronize', lambda *a, **k: waits.append('mps.synchronize'), raising=False)

    class SpyEvent:
        """A device timing event that has always completed, and says so when it is waited on."""

        made = 0

        def __init__(self) -> None:
            SpyEvent.made += 1

        def record(self) -> None:
            pass

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            waits.append('event.synchronize')

        def wait(self, *args: Any) -> None:
            waits.append('event.wait')

        def elapsed_time(self, end: Any) -> float:
            return 1.0

    monkeypatch.setattr(ACCELERATORS['cpu'], 'event', lambda: SpyEvent)
    reads: list[str] = []
    reading = {torch.Tensor.item, torch.Tensor.cpu, torch.Tensor.tolist, torch.Tensor.numpy}
    original = testing.FakeAcceleratorTensor.__torch_function__.__func__  # type: ignore[attr-defined]

    def spy(cls: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in reading:
            reads.append(func.__name__)
        return original(cls, func, types, args, kwargs)

    monkeypatch.setattr(testing.FakeAcceleratorTensor, '__torch_function__', classmethod(spy))
    if IS_AFFECTED:
        compatshim.enable()

    def fit(monitored: bool) -> int:
        from composer.core import DataSpec

        from compatshim.monitor import TransformMonitor

        before = len(reads)
        callbacks = [TransformMonitor()] if monitored else []
        t, _ = trainer(
            make_device(),
            train_dataloader=DataSpec(loader(32), device_transforms=Probe()),
            max_duration='4ba',
            callbacks=callbacks,
        )
        t.fit()
        return len(reads) - before

    assert fit(monitored=True) == fit(monitored=False)
    assert SpyEvent.made >= 2 * 4, 'the monitor timed the transform with device events (two per step)'
    assert waits == []


@pytest.mark.runs_in('family')
def test_the_placement_policy_alone() -> None:
    """What is said of a misplaced device_transforms, from what was seen alone (no run, no environment, no shim)."""
    from collections import Counter

    from compatshim.observe.placement import Placement
    from compatshim.observe.steps import early_problem, placement_warning

    def said(where: str, composer: str, kill_switch: bool = False, shim_on: bool = False) -> str:
        return placement_warning(where, 'DataSpec(dataloader=L)', 'a', composer, kill_switch, shim_on)

    spec, enable = (
        "compatshim: DataSpec(dataloader=L)'s device_transforms",
        'Add `import compatshim; compatshim.enable()`',
    )
    assert said(Placement.NEVER_CALLED, '0.28.0').startswith(
        f"{spec} is never called in 'a': Composer 0.28.0 drops it. {enable} at the top of the training script"
    )
    assert said(Placement.HOST, '0.26.1').startswith(
        f"{spec} saw its batch on the host in 'a' (Composer 0.26.1), not on the device. {enable}"
    )
    assert said('mixed', '0.26.1', kill_switch=True).endswith(
        "on the mixed in 'a' (Composer 0.26.1), not on the device. COMPATSHIM_DISABLE is set, so the shim patches "
        'nothing: unset it.'
    )
    assert said('host', '0.26.1', shim_on=True).endswith('built before compatshim.enable(): build it after.')
    assert said('host', '0.24.1', shim_on=True).endswith('on the device itself: please report this run.')
    assert 'outside the support table' in said('host', '0.33.0') and 'allow_untested=True' in said('host', '0.33.0')
    assert early_problem(Counter({Placement.DEVICE: 1, Placement.HOST: 1, Placement.MIXED: 1})) is Placement.HOST
    assert early_problem(Counter({Placement.DEVICE: 1, Placement.MIXED: 1})) is Placement.MIXED
    assert early_problem(Counter({Placement.DEVICE: 2})) is None


@pytest.mark.runs_in('family')
def test_device_time_is_read_a_step_late_without_waiting() -> None:
    """The event clock (cuda, mps) with a faithful fake event: ``collect`` asks ``query()`` only, so an unfinished
    pair stays pending, and only the final collect at the end of a loop waits (once)."""
    from compatshim.observe.recorder import Tap, Window, _EventClock

    waited: list[int] = []

    class Event:
        made: list[Any] = []

        def __init__(self) -> None:
            self.polls, self.t = 0, 0.0
            Event.made.append(self)

        def record(self) -> None:
            self.t = len(Event.made) * 1.5  # ms

        def query(self) -> bool:
            self.polls += 1
            return self.polls > 1  # finished by the second look: one step late

        def synchronize(self) -> None:
            waited.append(1)

        def elapsed_time(self, end: Any) -> float:
            return end.t - self.t

    clock = _EventClock(Event)
    tap = Tap(lambda batch: batch, clock)
    tap.take(1)
    tap(torch.zeros(2))
    first = tap.take(2)
    assert isinstance(first, Window) and first.calls == 1 and first.timed_later == 1 and first.seconds == 0
    assert clock.collect() == []  # step 1's events are not done when step 1 ends: nothing waits
    tap(torch.zeros(2))
    tap.take(3)
    assert clock.collect() == [(1, 0.0015)]  # read at the end of step 2, belonging to step 1
    assert waited == []
    assert clock.collect(final=True) == [(2, 0.0015)] and waited == [1]


@pytest.mark.runs_in('family')
def test_device_time_is_logged_at_the_step_it_belongs_to() -> None:
    """On cuda/mps a transform's time comes from events read a step or more later; the monitor logs it with the step
    number of the step it measured, which a destination (WandB, MLflow, ...) receives, never anything else."""
    from composer.core import DataSpec
    from composer.loggers import LoggerDestination

    from compatshim.monitor import TransformMonitor
    from compatshim.observe.recorder import _EventClock

    class Event:  # finished by its second query: read one step late, as on a busy GPU
        def __init__(self) -> None:
            self.polls = 0

        def record(self) -> None:
            pass

        def query(self) -> bool:
            self.polls += 1
            return self.polls > 1

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: Any) -> float:
            return 2.0

    class EventMonitor(TransformMonitor):
        def init(self, state: Any, logger: Any) -> None:
            super().init(state, logger)
            self._steps.transform_clock = _EventClock(Event)

    class Steps(LoggerDestination):
        def __init__(self) -> None:
            self.seen: dict[str, list[Any]] = {}

        def log_metrics(self, metrics: dict[str, Any], step: Optional[int] = None) -> None:
            for key in metrics:
                self.seen.setdefault(key, []).append(step)

    steps, monitor = Steps(), EventMonitor()  # the monitor first: it must see the DataSpec built
    with compatshim.enabled('batch'):
        t, _ = trainer(
            make_device(),
            train_dataloader=DataSpec(loader(32), device_transforms=Probe()),
            max_duration='4ba',
            callbacks=[monitor],
            loggers=[steps],
        )
        t.fit()
    calls, timed = steps.seen['data/train/device_transforms/calls'], steps.seen['data/train/device_transforms/time_ms']
    assert len(calls) == 4 and len(timed) == 4, (calls, timed)
    assert sorted(timed) == sorted(calls), f'time logged at steps {timed}, its steps were {calls}'
    assert all(isinstance(step, int) for step in timed), timed


@pytest.mark.parametrize('shim', [True, False], ids=['shim', 'no-shim'])
def test_the_run_records_compatshim_as_hyperparameters(shim: bool, tmp_path: Path) -> None:
    """Once per run, through Composer's loggers: compatshim's version, the release, family, verdict, stage, what is
    patched and by what, in the real ``InMemoryLogger`` (``hyperparameters``) and ``FileLogger`` (its text file), with
    the shim on and off: a reader of two runs can tell which one had it."""
    from composer.core import DataSpec
    from composer.loggers import FileLogger, InMemoryLogger

    from compatshim.monitor import TransformMonitor

    if shim:
        compatshim.enable()
    else:
        compatshim.disable()
    memory, path = InMemoryLogger(), tmp_path / 'run.log'
    argument = 'device_transforms' if shim or FAMILY is not Family.REJECTED else 'batch_transforms'
    t, _ = trainer(
        make_device(),
        train_dataloader=DataSpec(loader(8), **{argument: Probe()}),
        max_duration='1ba',
        callbacks=[TransformMonitor(strict=shim)],
        loggers=[memory, FileLogger(filename=str(path), flush_interval=1)],
    )
    t.close()
    found = {k: v for k, v in memory.hyperparameters.items() if k.startswith('compatshim/')}
    patched = shim and IS_AFFECTED
    assert found['compatshim/version'] == compatshim.__version__ and found['compatshim/composer'] == COMPOSER
    assert found['compatshim/family'] == (FAMILY.value if FAMILY else 'none')
    expected = 'patched' if patched else 'affected' if IS_AFFECTED else 'unaffected'
    assert found['compatshim/verdict'] == expected
    assert found['compatshim/stage'] == ('batch' if patched else 'off')
    if patched:
        assert 'DataSpec' in found['compatshim/patched'], found
    else:
        assert found['compatshim/patched'] == 'nothing', found
    assert found['compatshim/enabled_by'] == ('compatshim.enable()' if patched else 'nothing')
    assert found['compatshim/monitor_strict'] is shim
    text = path.read_text()
    for key, value in found.items():
        assert f'[hyperparameter]: {key}: ' in text and str(value) in text, key


@pytest.mark.parametrize('shim', [pytest.param(True, id='shim', marks=NEEDS_PATCH), pytest.param(False, id='no-shim')])
def test_on_plain_device_cpu_it_claims_no_placement_and_no_bytes(shim: bool) -> None:
    """Composer's own ``DeviceCPU`` (the default on a machine without a GPU): host and device are one, so where a
    transform ran and what crossed to the device cannot be observed; the monitor says so, logs neither, and never
    says the shim failed. A transform never called is still said (0.27–0.28 without the shim)."""
    from composer.core import DataSpec
    from composer.devices import DeviceCPU
    from composer.loggers import InMemoryLogger

    from compatshim.monitor import TransformMonitor

    if shim:
        compatshim.enable()
    if FAMILY is Family.REJECTED and not shim:
        pytest.skip(f'Composer {COMPOSER} rejects device_transforms without the shim (TypeError)')
    monitor, logger = TransformMonitor(), InMemoryLogger()
    spec = DataSpec(loader(16), device_transforms=Probe())
    t, _ = trainer(
        DeviceCPU(), train_dataloader=spec, max_duration='2ba', callbacks=[monitor], loggers=[logger],
        device_train_microbatch_size=4,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        t.fit()
    said = [str(w.message) for w in caught if issubclass(w.category, compatshim.CompatShimWarning)]
    line = monitor.summaries[-1].line
    assert 'not observable' in line and 'bytes/step' not in line, line
    assert 'on the host' not in line and 'on the device' not in line, line
    assert not [key for key in logger.data if 'bytes_to_device' in key or key.endswith('/on_device')]
    if FAMILY is Family.DROPPED and not shim:
        assert 'device_transforms never called (dropped by Composer)' in line, line
        assert any('is never called' in message for message in said), said
    else:
        assert 'device_transforms called, 1 call/step' in line, line
        assert said == [], said


#: A detection-style batch: per sample an image, its boxes (float16) and their labels (int64), as a list of dicts.
DETECTION_SAMPLES = 24


def _detection_batch(samples: int, seed: int) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        {
            'image': torch.rand(4, generator=gen),
            'boxes': torch.rand(1 + i % 3, 4, generator=gen).half(),
            'labels': torch.randint(0, 5, (1 + i % 3,), generator=gen),
        }
        for i in range(samples)
    ]


def _by_hand(batch: list[dict[str, torch.Tensor]]) -> dict[str, int]:
    """The bytes of a host batch, by dtype, counted by hand."""
    counted: dict[str, int] = {}
    for sample in batch:
        for tensor in sample.values():
            name = str(tensor.dtype).replace('torch.', '')
            counted[name] = counted.get(name, 0) + tensor.numel() * tensor.element_size()
    return counted


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_many_tensor_batch_is_counted_exactly(leg: str) -> None:
    """A list of 24 per-sample dicts (72 tensors, three dtypes) per step: the bytes by dtype of each step are the hand
    count of its batch, the transform is called once per step and every call is on the device."""
    from composer import Callback, Trainer
    from composer.core import DataSpec
    from composer.loggers import InMemoryLogger

    from compatshim.monitor import TransformMonitor
    from compatshim.observe.recorder import is_on_device

    batches = [_detection_batch(DETECTION_SAMPLES, seed) for seed in range(3)]
    seen: list[bool] = []

    def transform(batch: Any) -> Any:
        seen.append(all(is_on_device(t) for sample in batch for t in sample.values()))
        return batch

    class CountedByHand(type(make_device())):  # type: ignore[misc]
        """Every host tensor the trainer moves in a step (its batch, and Composer's own counts and loss), by dtype."""

        counted: dict[str, int] = {}
        steps: list[dict[str, int]] = []

        def tensor_to_device(self, tensor: torch.Tensor) -> torch.Tensor:
            if not getattr(type(tensor), '_compatshim_on_accelerator', False) and tensor.device.type == 'cpu':
                name = str(tensor.dtype).replace('torch.', '')
                self.counted[name] = self.counted.get(name, 0) + tensor.numel() * tensor.element_size()
            return super().tensor_to_device(tensor)

    class Steps(Callback):  # the monitor's step: from BEFORE_DATALOADER to BATCH_END
        def before_dataloader(self, state: Any, logger: Any) -> None:
            CountedByHand.counted = {}

        def batch_end(self, state: Any, logger: Any) -> None:
            CountedByHand.steps.append(CountedByHand.counted)

    def split(batch: list[Any], size: int) -> list[list[Any]]:
        return [batch[i : i + size] for i in range(0, len(batch), size)]

    model = any_batch_model(lambda batch: torch.stack([sample['image'] for sample in batch]))
    spec = DataSpec(batches, device_transforms=transform, get_num_samples_in_batch=len, split_batch=split)
    logger = InMemoryLogger()
    Trainer(
        model=model, train_dataloader=spec, device=CountedByHand(), max_duration='3ba',
        device_train_microbatch_size=DETECTION_SAMPLES, callbacks=[TransformMonitor(), Steps()], loggers=[logger],
        progress_bar=False, precision='fp32',
    ).fit()  # fmt: skip
    assert seen == [True] * 3, 'the transform did not run once per step on the device'
    assert _logged(logger, 'data/train/device_transforms/calls') == [1, 1, 1]
    assert _logged(logger, 'data/train/device_transforms/on_device') == [1.0, 1.0, 1.0]
    by_hand = CountedByHand.steps
    for batch, step in zip(batches, by_hand):
        assert all(step.get(dtype, 0) >= n for dtype, n in _by_hand(batch).items()), 'the batch did not cross'
    for dtype in ('float32', 'float16', 'int64'):
        assert _logged(logger, f'data/train/bytes_to_device/{dtype}') == [step[dtype] for step in by_hand], dtype
    assert _logged(logger, 'data/train/bytes_to_device') == [sum(step.values()) for step in by_hand]


def test_placement_is_read_from_the_move_only_where_the_move_is_composers_own() -> None:
    """The byte counter reads a moved batch's placement from the tensors Composer's own walk returned; a Device whose
    ``batch_to_device`` is its own (here: one that leaves the labels on the host) is walked, and so is any other batch
    (one rebuilt from the moved one)."""
    from compatshim.observe.recorder import MoveCounter

    class LeavesLabels(type(make_device())):  # type: ignore[misc]
        def batch_to_device(self, batch: Any) -> Any:
            return [{**s, 'image': self.tensor_to_device(s['image'])} for s in batch]

    batch = _detection_batch(DETECTION_SAMPLES, 0)
    device = make_device()
    counter = MoveCounter().install(device)
    moved = device.batch_to_device(batch)
    assert counter.placement(moved) == 'device'
    moved[0]['mask'] = torch.ones(2)  # a transform after the first changes the moved batch in place
    assert counter.placement(moved) == 'mixed', 'the move is read once: the next transform on that batch walks it'
    moved[0].pop('mask')
    assert counter.take() == dict(sorted(_by_hand(batch).items(), key=lambda kv: -kv[1]))
    assert counter.placement(moved) == 'device', 'after a take, the walk'
    text = [collections.UserString('a sentence'), bytearray(b'raw'), 'plain', moved[0]['labels']]
    assert counter.placement(text) == 'device', 'text of any kind is a leaf (each item of a UserString is one)'
    changed = [{'image': batch[0]['image']}, *device.batch_to_device(batch)[1:]]
    assert counter.placement(changed) == 'mixed', 'another batch: walked'
    counter.remove()
    assert 'batch_to_device' not in vars(device) and 'tensor_to_device' not in vars(device)
    own = LeavesLabels()
    counter = MoveCounter().install(own)
    assert counter.placement(own.batch_to_device(batch)) == 'mixed'
    assert counter.placement(own.batch_to_device([])) == 'empty'
    counter.remove()


def test_tensor_subclasses_and_a_partly_moved_batch_are_counted_exactly() -> None:
    """The counter reads a move's tensors in C passes, past a subclass's ``__torch_function__`` (torchvision's
    tv_tensors): bytes by dtype and placement as a hand count says, a tensor already on the device counted as no byte,
    and a tensor moved on its own (outside a batch's move) counted too."""
    from torchvision import tv_tensors

    from compatshim.observe.recorder import MoveCounter

    device = make_device()
    batch = _detection_batch(DETECTION_SAMPLES, 1)
    for sample in batch:
        sample['image'] = tv_tensors.Image(sample['image'].reshape(1, 2, 2))
        sample['boxes'] = tv_tensors.BoundingBoxes(sample['boxes'], format='XYXY', canvas_size=(8, 8))
    counter = MoveCounter().install(device)
    moved = device.batch_to_device(batch)
    assert counter.placement(moved) == 'device'
    partly = [{**moved[0], 'labels': batch[0]['labels']}, *batch[1:]]  # the first sample's image and boxes moved
    device.batch_to_device(partly)
    device.tensor_to_device(torch.ones(3, dtype=torch.float64))
    host = [{'labels': batch[0]['labels']}, *batch[1:]]
    by_hand = sum((collections.Counter(_by_hand(b)) for b in (batch, host)), collections.Counter(float64=24))
    assert counter.take() == dict(sorted(by_hand.items(), key=lambda kv: -kv[1]))
    counter.remove()
