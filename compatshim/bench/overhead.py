"""compatshim's own cost per batch: the shim's hook path and the in-run monitor's, each against the direct path.

The timed legs of :mod:`compatshim.bench.engine` cannot resolve a few microseconds inside a step of milliseconds. A
*probe* calls one of compatshim's paths ``calls`` times, then the direct path it stands in for as many times (or the
other way round, alternating from sample to sample), on the bench's clock; the reference bench takes a few samples of
every probe in every round, so that each sample's two times, and the round's step, are measured together:

* ``hook-<stage>``: the DataSpec hooks the shim installs on a real Composer ``DataSpec``, called as the trainer calls
  them for one batch of one microbatch, inside a loop frame on the trainer's own ``Device`` — the batch-level hook (at
  stage ``batch``: loop frame lookup, the move through the trainer's device, the transform, the result check), the
  trainer's own move (a no-op for a batch already on the device), and on 0.27+ the microbatch-level hook (at stage
  ``microbatch`` the transform runs there, after the move). The direct path is ``transform(move(batch))`` on a plain
  device of the same type: what 0.24.1 did.
* ``monitor``: :class:`~compatshim.monitor.TransformMonitor` on a real Trainer's state and logger: every event Composer
  sends a callback in one train step of one microbatch (:data:`STEP_EVENTS`), the transform through the monitor's tap
  and the move through its byte counter, against the transform and the move alone.

Both use a small batch and a transform that returns its input, so the difference is compatshim's plumbing only. The
difference per call, in µs, as a share of the step of the same round is what the gate holds to a limit; the ratio of
the two times and the µs are reported. :func:`planted_hook_delay` adds a busy-wait to the shim's hooks themselves (a planted regression of the hook
path, for checking that the gate catches one).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from compatshim import _patching

if TYPE_CHECKING:
    from compatshim._accelerator import Accelerator

__all__ = ['CALLS', 'STEP_EVENTS', 'Probe', 'make_probe', 'planted_hook_delay']

#: Calls per path per sample: the hook path, the monitor's step.
CALLS = {'hook': 2000, 'monitor': 500}


class _Same:
    """The transform of the probes: returns the batch it was given (the shim's check still runs)."""

    def __call__(self, batch: Any) -> Any:
        return batch


def _batch() -> list[torch.Tensor]:
    return [torch.rand(4, 3, 8, 8), torch.randint(0, 10, (4,))]


class Probe:
    """One of compatshim's paths and the direct path it stands in for, sampled on demand.

    Args:
        name: Its name (``compatshim.bench.metrics.PROBES``).
        on: What it runs on: its samples wait for that device at their edges, on the bench's clock for it.
        calls: Calls of each path per sample.
        path: One call of compatshim's path.
        direct: One call of the direct path.
        frame: Entered around each sample (the hook path runs inside a trainer's loop frame).
        close: Called once, by :meth:`close`.
    """

    def __init__(
        self,
        name: str,
        on: Accelerator,
        calls: int,
        path: Callable[[], Any],
        direct: Callable[[], Any],
        frame: Callable[[], Any] = contextlib.nullcontext,
        close: Optional[Callable[[], None]] = None,
    ) -> None:
        self.name, self.on, self.calls, self.path, self.direct = name, on, calls, path, direct
        self._frame, self._close, self._taken = frame, close, 0

    def sample(self) -> tuple[float, float]:
        """Seconds of ``calls`` calls of the path and of the direct path, back to back (the first of the two alternates
        from sample to sample), the collector paused as in a timed window."""
        first_path = self._taken % 2 == 0
        self._taken += 1
        gc.collect()
        gc.disable()
        try:
            with self._frame():
                if first_path:
                    path_s = self._time(self.path)
                    direct_s = self._time(self.direct)
                else:
                    direct_s = self._time(self.direct)
                    path_s = self._time(self.path)
        finally:
            gc.enable()
        return path_s, direct_s

    def _time(self, fn: Callable[[], Any]) -> float:
        clock = self.on.clock()
        self.on.synchronize()
        start = clock()
        for _ in range(self.calls):
            fn()
        self.on.synchronize()
        return clock() - start

    def close(self) -> None:
        if self._close is not None:
            self._close()


def make_probe(
    name: str,
    on: Accelerator,
    transform: Optional[Callable[[Any], Any]] = None,
    make_device: Optional[Callable[[], Any]] = None,
) -> Probe:
    """The probe called ``name`` (``hook-batch``, ``hook-microbatch`` or ``monitor``) on ``on``, both paths
    calling ``transform`` (default: one that returns its input), on Composer devices from ``make_device`` (default:
    Composer's own for ``on``). A hook probe needs the shim enabled when it is made and while it is
    sampled."""
    transform = _Same() if transform is None else transform
    make = make_device or on.composer_device
    if name == 'monitor':
        return _monitor_probe(on, make, transform)
    path, _, stage = name.partition('-')
    if path != 'hook' or stage not in ('batch', 'microbatch'):
        raise ValueError(f'no probe {name!r}; choose hook-batch, hook-microbatch or monitor')
    return _hook_probe(name, stage, on, make, transform)


def _hook_probe(
    name: str, stage: str, on: Accelerator, make_device: Callable[[], Any], transform: Callable[[Any], Any]
) -> Probe:
    from composer.core import DataSpec

    from compatshim import _loop_frames
    from compatshim._transforms import BatchHook

    batch, device, plain = _batch(), make_device(), make_device()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4)))
    data_spec = DataSpec(loader, device_transforms=transform, data_transfer_stage=stage)
    names = [n for n in ('batch_transforms', 'device_transforms') if isinstance(getattr(data_spec, n, None), BatchHook)]
    if not names:
        raise RuntimeError('compatshim bench: the shim installed no hook on the DataSpec (is it enabled here?)')
    batch_hook = getattr(data_spec, names[0])
    microbatch_hook = data_spec.microbatch_transforms if names[0] == 'batch_transforms' else None

    # The trainer's move is looked up on every call, as the trainer does: on 0.25–0.26 at stage microbatch the batch
    # hook arms the loop frame, which puts the move-then-transform on the device instance (never on ``plain``).
    # The hook runs before the move is looked up, as in the trainer (arming replaces the device's move).
    if microbatch_hook is None:

        def path() -> Any:
            hooked = batch_hook(batch)
            return device.batch_to_device(hooked)
    else:
        mb_hook = microbatch_hook

        def path() -> Any:
            hooked = batch_hook(batch)
            return mb_hook(device.batch_to_device(hooked))

    def direct() -> Any:
        return transform(plain.batch_to_device(batch))

    def frame() -> Any:
        return _loop_frames.loop_frame(device, 'train')

    return Probe(name, on, CALLS['hook'], path, direct, frame)


#: The events Composer runs for every callback in one train step of one microbatch, in order.
STEP_EVENTS = (
    'before_dataloader',
    'after_dataloader',
    'batch_start',
    'before_train_batch',
    'before_forward',
    'after_forward',
    'before_loss',
    'after_loss',
    'before_backward',
    'after_backward',
    'after_train_batch',
    'batch_end',
    'batch_checkpoint',
)


def _monitor_probe(on: Accelerator, make_device: Callable[[], Any], transform: Callable[[Any], Any]) -> Probe:
    from composer import Trainer
    from composer.core import DataSpec, Event
    from composer.models import ComposerClassifier

    from compatshim.monitor import TransformMonitor

    batch, device, plain = _batch(), make_device(), make_device()
    monitor = TransformMonitor()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*batch), batch_size=4)
    argument = _host_transform_argument()
    data_spec = DataSpec(loader, **{argument: transform})
    model = ComposerClassifier(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 10)), num_classes=10)
    trainer = Trainer(
        model=model,
        train_dataloader=data_spec,
        device=device,
        callbacks=[monitor],
        max_duration='1ba',
        progress_bar=False,
        log_to_console=False,
    )
    state, logger, events = trainer.state, trainer.logger, [Event(name) for name in STEP_EVENTS]
    state.set_dataloader(data_spec.dataloader, 'train')
    monitor.run_event(Event.FIT_START, state, logger)  # the monitor puts its tap on the DataSpec

    def path() -> Any:  # as Composer calls the batch-level transform: through the DataSpec's attribute (now tapped)
        for event in events:
            monitor.run_event(event, state, logger)
        return getattr(data_spec, argument)(device.batch_to_device(batch))

    def direct() -> Any:
        return transform(plain.batch_to_device(batch))

    return Probe('monitor', on, CALLS['monitor'], path, direct, close=trainer.close)


def _host_transform_argument() -> str:
    """The DataSpec argument Composer itself calls at batch level: ``batch_transforms`` (0.27+), else
    ``device_transforms`` (built with the shim off, Composer's own)."""
    import inspect

    from composer.core import DataSpec

    return (
        'batch_transforms'
        if 'batch_transforms' in inspect.signature(DataSpec.__init__).parameters
        else 'device_transforms'
    )


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@contextlib.contextmanager
def planted_hook_delay(microseconds: float) -> Iterator[None]:
    """Make every call of the shim's DataSpec hooks ``microseconds`` slower (busy-wait) while the block runs."""
    from compatshim._transforms import BatchHook, MicrobatchHook

    if not microseconds:
        yield
        return

    def slowed(original: Callable[..., Any]) -> Callable[..., Any]:
        def __call__(self: Any, batch: Any) -> Any:
            _busy_wait(microseconds * 1e-6)
            return original(self, batch)

        return __call__

    swaps = [_patching.swap(cls, '__call__', slowed) for cls in (BatchHook, MicrobatchHook)]
    try:
        yield
    finally:
        for done in reversed(swaps):
            done.undo()
