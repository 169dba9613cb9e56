"""``compatshim bench``: one release measured on the built-in reference pipelines by the engine, with the probes.

The ``augment`` pipeline (:mod:`~compatshim.bench.workload`) is checked and timed, the legs of each gated same-run
ratio back to back; the ``recipe`` pipeline is checked: what crosses to the device per leg. A window cannot resolve a
few microseconds inside a step of milliseconds, so after each round's windows every *probe* takes
:data:`PROBE_SAMPLES` samples on the same clock: one of compatshim's paths called :data:`CALLS` times, then the direct
path it stands in for as many times (which goes first alternates), both on a small batch with a transform that returns
it:

* ``hook-<stage>``: the hooks the shim installs on a real ``DataSpec``, called as the trainer calls them for one batch
  of one microbatch in a loop frame on the trainer's own ``Device`` (the batch-level hook, the move, on 0.27+ the
  microbatch-level hook), against ``transform(move(batch))`` on a plain device: what 0.24.1 did;
* ``monitor``: :class:`~compatshim.monitor.TransformMonitor` on a real Trainer's state and logger, every event of one
  train step (:data:`STEP_EVENTS`), the transform through its tap and the move through its byte counter, against the
  transform and the move alone.

Each runs on the workload's image batch and, as ``<probe>@<samples>``, on detection-style batches
(:data:`~compatshim.bench.metrics.SAMPLES`: a list of per-sample dicts, three tensors a sample), one sample a round,
its calls fewer as its batch holds more tensors (:func:`calls`). On the largest, the monitor also runs, as
``monitor@<samples>/<idiom>``, each transform idiom users write (:data:`~compatshim.bench.metrics.IDIOMS`,
:func:`transform_of`): the move, and the same idiom in both paths, in the same rounds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import sys
import time
import types
from collections.abc import Iterator
from typing import Any, Callable, Optional, TextIO

import torch

from compatshim.bench import engine, workload
from compatshim.bench.engine import SIZES, Schedule
from compatshim.bench.metrics import METRICS, PROBES, pairs, tensors_of
from compatshim.bench.results import BenchResult, Overheads
from compatshim.config.settings import BENCH_SIZES
from compatshim.config.support import TESTED_RELEASES, family_of, installed
from compatshim.devices.accelerator import Accelerator, accelerator
from compatshim.shim import api as shim
from compatshim.shim import data_spec, loops, notes, patching

__all__ = [
    'CALLS',
    'PROBE_SAMPLES',
    'Probe',
    'batch_of',
    'bench_reference',
    'calls',
    'env_name',
    'make_probe',
    'planted_hook_delay',
    'planted_tensor_delay',
    'samples_per_round',
    'transform_of',
]

#: Samples each overhead probe takes per round (after the round's windows) on the image batch; on a detection-style
#: batch one (its calls take longer, and the same rounds hold more of them).
PROBE_SAMPLES = 3
#: Calls per path per sample on the image batch (two tensors): the hook path, the monitor's step.
CALLS = {'hook': 2000, 'monitor': 500}
#: The fewest calls per path per sample, whatever the batch.
MIN_CALLS = 16


def calls(name: str) -> int:
    """Calls per path per sample of probe ``name``: :data:`CALLS` on the image batch, as many tensors moved on a
    larger one (at least :data:`MIN_CALLS`)."""
    return max(MIN_CALLS, CALLS[name.partition('-')[0].partition('@')[0]] * 2 // tensors_of(name))


def samples_per_round(name: str) -> int:
    """The samples probe ``name`` takes each round."""
    return PROBE_SAMPLES if '@' not in name else 1


def batch_of(name: str) -> Any:
    """The batch probe ``name`` runs on: the image batch (4 images of 3x8x8, their labels), or a detection-style batch
    of ``<samples>`` per-sample dicts (a 3x8x8 image, two boxes, their labels); with an idiom (``/<idiom>``) the images
    are uint8, as a detection loader gives them, and for ``v2`` image and boxes are torchvision's tv_tensors."""
    samples, _, idiom = name.partition('@')[2].partition('/')
    gen = torch.Generator().manual_seed(0)
    if not samples:
        return [torch.rand(4, 3, 8, 8, generator=gen), torch.randint(0, 10, (4,), generator=gen)]
    batch = [
        {'image': torch.randint(0, 256, (3, 8, 8), generator=gen, dtype=torch.uint8) if idiom else
         torch.rand(3, 8, 8, generator=gen), 'boxes': torch.rand(2, 4, generator=gen),
         'labels': torch.randint(0, 5, (2,), generator=gen)}
        for _ in range(int(samples))
    ]  # fmt: skip
    if idiom == 'v2':
        from torchvision import tv_tensors  # type: ignore[import-not-found]

        for sample in batch:
            sample['image'] = tv_tensors.Image(sample['image'])
            sample['boxes'] = tv_tensors.BoundingBoxes(sample['boxes'] * 8, format='XYXY', canvas_size=(8, 8))
    return batch


def _in_place(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The idiom that keeps its containers: each sample's image, as floats in [0, 1], put back in its own dict."""
    for sample in batch:
        sample['image'] = sample['image'].float().div_(255)
    return batch


def _rebuilt(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The idiom that builds new containers: a new dict per sample, around the image as floats in [0, 1]."""
    return [{'image': s['image'].float().div_(255), 'boxes': s['boxes'], 'labels': s['labels']} for s in batch]


def _v2() -> Callable[[Any], Any]:
    """The torchvision v2 idiom: ``ToDtype`` of the images to floats in [0, 1], the rest passed through (v2 flattens
    the batch and builds every container again)."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2  # type: ignore[import-not-found]

    return v2.ToDtype({tv_tensors.Image: torch.float32, 'others': None}, scale=True)  # type: ignore[no-any-return]


def transform_of(name: str) -> Callable[[Any], Any]:
    """The transform probe ``name`` runs (its idiom's; without one, a transform that returns its batch)."""
    idiom = name.partition('@')[2].partition('/')[2]
    return _v2() if idiom == 'v2' else {'in-place': _in_place, 'rebuilt': _rebuilt}.get(idiom, _same)


#: The events Composer runs for every callback in one train step of one microbatch, in order.
STEP_EVENTS = tuple(
    'before_dataloader after_dataloader batch_start before_train_batch before_forward after_forward before_loss '
    'after_loss before_backward after_backward after_train_batch batch_end batch_checkpoint'.split()
)


def env_name(device: str) -> str:
    """The matrix env this process is: the support-table row of the installed Composer/torch/Python, plus the device."""
    composer, torch_version = installed('mosaicml') or '?', torch.__version__.split('+')[0]
    python = f'{sys.version_info.major}.{sys.version_info.minor}'
    row = next(
        (r for r in TESTED_RELEASES if (r.composer, r.torch, r.python) == (composer, torch_version, python)), None
    )
    return row.on(device) if row is not None else f'composer{composer}-torch{torch_version}-{device}'


def bench_reference(
    device: str = 'cpu',
    size_name: str = 'cpu',
    *,
    plant_slowdown: float = 0.0,
    plant_hook_us: float = 0.0,
    plant_work: bool = False,
    plant_tensor_us: float = 0.0,
    progress: Optional[TextIO] = None,
) -> BenchResult:
    """Measure every leg of this release (docs/harness.md) on ``device`` at ``size_name`` (one of
    :data:`~compatshim.config.settings.BENCH_SIZES`). ``plant_slowdown``: the shim legs' transform made this fraction
    slower; ``plant_hook_us``: every call of the shim's hooks this many µs slower; ``plant_work``: both workloads'
    transforms one op heavier over a tenth of each batch; ``plant_tensor_us``: the monitor's byte counter this many µs
    slower per tensor moved (planted regressions, to check the gate; 0 to measure)."""
    if size_name not in BENCH_SIZES:
        raise ValueError(f'unknown size {size_name!r}; choose one of {", ".join(BENCH_SIZES)}')
    plants = {'plant_slowdown': (plant_slowdown, 10, ''), 'plant_hook_us': (plant_hook_us, 100_000, ' µs')}
    for what, (value, most, unit) in {**plants, 'plant_tensor_us': (plant_tensor_us, 1000, ' µs')}.items():
        if not 0.0 <= value <= most:
            raise ValueError(f'{what} must be between 0 and {most}{unit}, got {value}')
    size, env = SIZES[size_name], env_name(device)
    delays = planted_hook_delay(plant_hook_us), planted_tensor_delay(plant_tensor_us)
    with engine.open_session(accelerator(device), env, size, progress) as session, delays[0], delays[1]:
        with shim.switched(True):
            patched = list(shim.status().patches)  # what enable() patches here (nothing on an unaffected release)
        augment, recipe = (workload.pipeline(name, size) for name in ('augment', 'recipe'))
        if plant_work:
            augment, recipe = (dataclasses.replace(p, transform=_Heavier(p.transform)) for p in (augment, recipe))
        recipe_legs = engine.measure(session, recipe, Schedule(timed=lambda measured: False), size.batch)  # checked
        slower = _Planted(augment.transform, plant_slowdown, session.on) if plant_slowdown else None
        overheads = {name: Overheads(calls(name)) for name in PROBES}
        with _probes(session.on, family_of(session.composer) is not None) as probes:

            def sample(round_: int) -> None:
                for taken in range(PROBE_SAMPLES):
                    for probe in (probe for probe in probes if taken < samples_per_round(probe.name)):
                        path_s, direct_s = probe.sample()
                        if round_:
                            overheads[probe.name].add(path_s, direct_s, round_)

            # A leg that never calls the transform does other work: not timed.
            schedule = Schedule(pairs(METRICS), timed=lambda measured: measured.calls_per_step > 0, after_round=sample)
            legs = engine.measure(session, augment, schedule, size.batch, shim_transform=slower)
        fields = session.fields()
    return BenchResult(
        **fields,
        legs=legs,
        env=env,
        recipe=recipe_legs,
        overheads={name: found for name, found in overheads.items() if found.path_s},
        patched_by_enable=patched,
        planted_slowdown=plant_slowdown,
        planted_hook_us=plant_hook_us,
        planted_work=plant_work,
        planted_tensor_us=plant_tensor_us,
    )


class _Heavier:
    """The transform, then one more op over a tenth of the batch's first tensor (about 10% more work, on purpose)."""

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform

    def __call__(self, batch: Any) -> Any:
        out = self.transform(batch)
        first = out[0] if isinstance(out, (list, tuple)) else out
        first[: max(1, len(first) // 10)].mul_(1.0)
        return out


class _Planted:
    """The transform, made ``fraction`` slower: after each call it spins for that share of the call's time, on the
    clock the windows are timed with (a planted regression)."""

    def __init__(self, fn: Any, fraction: float, on: Accelerator) -> None:
        self.fn, self.fraction, self.on, self.clock = fn, fraction, on, on.clock()

    def __call__(self, batch: Any) -> Any:
        start = self.clock()
        out = self.fn(batch)
        self.on.synchronize()
        end = self.clock() + self.fraction * (self.clock() - start)
        while self.clock() < end:
            pass
        return out


@contextlib.contextmanager
def planted_hook_delay(microseconds: float) -> Iterator[None]:
    """Make every call of the shim's DataSpec hooks ``microseconds`` slower (busy-wait) while the block runs."""
    from compatshim.shim.hooks import BatchHook, MicrobatchHook

    def slowed(original: Callable[..., Any]) -> Callable[..., Any]:
        def __call__(self: Any, batch: Any) -> Any:
            end = time.perf_counter() + microseconds * 1e-6
            while time.perf_counter() < end:
                pass
            return original(self, batch)

        return __call__

    swaps = [patching.swap(cls, '__call__', slowed) for cls in (BatchHook, MicrobatchHook)] if microseconds else []
    try:
        yield
    finally:
        for done in reversed(swaps):
            done.undo()


@contextlib.contextmanager
def planted_tensor_delay(microseconds: float) -> Iterator[None]:
    """Make the monitor's byte counter ``microseconds`` slower per tensor moved (busy-wait) on every device it is
    installed on while the block runs."""
    from compatshim.observe.recorder import MoveCounter

    def slowed(install: Callable[..., Any]) -> Callable[..., Any]:
        def planted(self: Any, device: Any) -> Any:
            installed = install(self, device)

            def delayed(count: Callable[[Any], Any]) -> Callable[[Any], Any]:
                def tensor_to_device(tensor: Any) -> Any:
                    end = time.perf_counter() + microseconds * 1e-6
                    while time.perf_counter() < end:
                        pass
                    return count(tensor)

                return tensor_to_device

            patching.swap(device, 'tensor_to_device', delayed)  # the probe's device, dropped after the run
            return installed

        return planted

    swap = patching.swap(MoveCounter, 'install', slowed) if microseconds else None
    try:
        yield
    finally:
        if swap is not None:
            swap.undo()


class Probe:
    """One of compatshim's paths (``path``) and the direct path (``direct``), one call each, sampled on ``on``'s clock,
    :func:`calls` calls of each per sample, inside ``frame``."""

    def __init__(
        self,
        name: str,
        on: Accelerator,
        path: Callable[[], Any],
        direct: Callable[[], Any],
        frame: Callable[[], Any] = contextlib.nullcontext,
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.name, self.on, self.path, self.direct, self._frame, self.close = name, on, path, direct, frame, close
        self.calls, self._taken = calls(name), 0

    def sample(self) -> tuple[float, float]:
        """Seconds of :attr:`calls` calls of the path and of the direct path, back to back (which goes first alternates
        from sample to sample), the collector paused as in a timed window."""
        self._taken += 1
        gc.collect()
        gc.disable()
        try:
            with self._frame():
                if self._taken % 2:
                    return self._time(self.path), self._time(self.direct)
                direct_s = self._time(self.direct)
                return self._time(self.path), direct_s
        finally:
            gc.enable()

    def _time(self, fn: Callable[[], Any]) -> float:
        clock = self.on.clock()
        self.on.synchronize()
        start = clock()
        for _ in range(self.calls):
            fn()
        self.on.synchronize()
        return clock() - start


def _same(batch: Any) -> Any:
    return batch


@contextlib.contextmanager
def _probes(on: Accelerator, affected: bool) -> Iterator[list[Probe]]:
    """The probes of this release (no hook probe where the shim patches nothing), closed after the block: the hook
    probes built with the shim on, the monitor's with it off (its DataSpec is Composer's own), as the legs are; the
    monitor's probes share one Trainer."""
    probes: list[Probe] = []
    watched: dict[str, Any] = {}
    try:
        for name in (name for name in PROBES if affected or not name.startswith('hook')):
            with shim.switched(name.startswith('hook')):
                probes.append(make_probe(name, on, shared=watched))
        yield probes
    finally:
        for probe in probes:
            probe.close()


def make_probe(
    name: str,
    on: Accelerator,
    transform: Optional[Callable[[Any], Any]] = None,
    make_device: Optional[Callable[[], Any]] = None,
    shared: Optional[dict[str, Any]] = None,
) -> Probe:
    """The probe ``name`` (``hook-batch``, ``hook-microbatch`` or ``monitor``, each optionally ``@<samples>``:
    :func:`batch_of`; the monitor's also ``/<idiom>``) on ``on``, both paths calling ``transform`` (default: the probe's
    own, :func:`transform_of`), on devices from ``make_device`` (default: Composer's own for ``on``). A hook probe needs
    the shim enabled when it is made and while it is sampled. Monitor probes of one transform given the same ``shared``
    dict share one Trainer (closed with the last of them)."""
    from composer.core import DataSpec

    path_name = name.partition('@')[0]
    if path_name not in ('hook-batch', 'hook-microbatch', 'monitor') or name not in (path_name, *PROBES):
        raise ValueError(f'no probe {name!r}; choose one of {", ".join(PROBES)}')
    make = make_device or on.composer_device
    batch, plain = batch_of(name), make()
    transform = transform_of(name) if transform is None else transform

    def direct() -> Any:
        return transform(plain.batch_to_device(batch))

    if path_name == 'monitor':
        return _monitor_probe(name, on, batch, make, direct, transform, {} if shared is None else shared)
    device = make()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4)))
    spec = DataSpec(loader, device_transforms=transform, data_transfer_stage=path_name.partition('-')[2])
    if not shim.status().stage:
        raise RuntimeError('compatshim bench: a hook probe needs the shim enabled here')
    # The DataSpec as the trainer reads it at every batch, through the loop frame's view of it (the trainer's
    # binding, with the shim on): 0.25-0.26 call device_transforms, 0.27+ batch_transforms and then
    # microbatch_transforms; and both count and split the batch.
    host = 'batch_transforms' not in vars(spec)
    hook = 'device_transforms' if host else 'batch_transforms'
    state = types.SimpleNamespace(batch=None)  # the trainer's state.batch, as its loop assigns it
    bound: list[Any] = []

    @contextlib.contextmanager
    def frame() -> Iterator[None]:
        with loops.loop_frame(device, 'train', state, spec, view=data_spec.view_of) as opened:
            bound[:] = [opened, opened.view]
            yield

    # The hook runs before the trainer's move is looked up (two statements), as in the trainer: on 0.25–0.26 at stage
    # microbatch the batch hook arms the loop frame, which puts the move-then-transform on the device instance.
    def path() -> Any:
        opened, view = bound
        state.batch = batch
        state.batch = getattr(view, hook)(state.batch)
        for reader in ('get_num_samples_in_batch', 'get_num_tokens_in_batch', 'split_batch'):
            getattr(view, reader)
        opened.split_ids = frozenset((id(state.batch),))  # the trainer's split: the batch is the one microbatch
        state.batch = device.batch_to_device(state.batch)
        return state.batch if host else view.microbatch_transforms(state.batch)

    return Probe(name, on, path, direct, frame)


def _monitor_probe(
    name: str,
    on: Accelerator,
    batch: Any,
    make: Callable[[], Any],
    direct: Callable[[], Any],
    transform: Any,
    shared: dict[str, Any],
) -> Probe:
    from composer.core import Event

    shared = shared.setdefault(name.partition('/')[2], {})  # one Trainer per idiom: its DataSpec holds the transform
    if 'trainer' not in shared:
        shared.update(_monitored_trainer(make(), transform), users=0)
    shared['users'] += 1
    trainer, monitor, spec, argument = shared['trainer'], shared['monitor'], shared['spec'], shared['argument']
    device = trainer.state.device
    state, logger, events = trainer.state, trainer.logger, [Event(name) for name in STEP_EVENTS]

    bound: list[Any] = []

    @contextlib.contextmanager
    def frame() -> Iterator[None]:  # a train loop over the DataSpec, driven from here, read as the trainer reads it
        with loops.loop_frame(device, 'train', state, spec, view=data_spec.view_of) as opened:
            bound[:] = [opened.view]
            yield

    def path() -> Any:  # as Composer's trainer calls the batch-level transform: read through the view, and the tap
        for event in events:
            monitor.run_event(event, state, logger)
        return getattr(bound[0], argument)(device.batch_to_device(batch))

    def close() -> None:
        shared['users'] -= 1
        if not shared['users']:
            trainer.close()

    return Probe(name, on, path, direct, frame, close=close)


def _monitored_trainer(device: Any, transform: Any) -> dict[str, Any]:
    """A real Trainer on ``device`` with a :class:`~compatshim.monitor.TransformMonitor` that has tapped the
    DataSpec's transform, as at the start of a fit; that monitor, that DataSpec and the argument it was given."""
    from composer import Trainer
    from composer.core import DataSpec, Event
    from composer.models import ComposerClassifier

    from compatshim.monitor import TransformMonitor

    monitor = TransformMonitor()
    images = batch_of('monitor')
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*images), batch_size=4)
    # The argument Composer itself calls at batch level (built with the shim off: Composer's own).
    parameters = inspect.signature(DataSpec.__init__).parameters
    argument = 'batch_transforms' if 'batch_transforms' in parameters else 'device_transforms'
    spec = DataSpec(loader, **{argument: transform})
    notes.leave_to_composer(spec)  # sampled while the shim is on for the legs: Composer's own, as a leg without it
    model = ComposerClassifier(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 10)), num_classes=10)
    trainer = Trainer(
        model=model,
        train_dataloader=spec,
        device=device,
        callbacks=[monitor],
        max_duration='1ba',
        progress_bar=False,
        log_to_console=False,
    )
    trainer.state.set_dataloader(spec.dataloader, 'train')
    with loops.loop_frame(device, 'train', trainer.state, spec):
        monitor.run_event(Event.FIT_START, trainer.state, trainer.logger)  # the monitor puts its tap on the DataSpec
    return {'trainer': trainer, 'monitor': monitor, 'spec': spec, 'argument': argument}
