"""The probes: compatshim's own cost per batch, the shim's hook path and the in-run monitor's, each against the direct
path it stands in for.

A timed window cannot resolve a few microseconds inside a step of milliseconds. A *probe* calls one of compatshim's
paths ``calls`` times, then the direct path as many times (or the other way round, alternating from sample to sample),
on the accelerator's clock; the reference bench samples every probe in every round, so each sample and the round's
step are measured together. Both paths use a small batch and a transform that returns its input:

* ``hook-<stage>``: the hooks the shim installs on a real Composer ``DataSpec``, called as the trainer calls them for
  one batch of one microbatch inside a loop frame on the trainer's own ``Device`` (the batch-level hook, the trainer's
  move, and on 0.27+ the microbatch-level hook), against ``transform(move(batch))`` on a plain device: what 0.24.1 did.
* ``monitor``: :class:`~compatshim.monitor.TransformMonitor` on a real Trainer's state and logger, every event Composer
  sends a callback in one train step (:data:`STEP_EVENTS`), the transform through its tap and the move through its byte
  counter, against the transform and the move alone.

:func:`planted_hook_delay` adds a busy-wait to the shim's hooks themselves (a planted regression, to check the gate).
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
#: The events Composer runs for every callback in one train step of one microbatch, in order.
STEP_EVENTS = tuple(
    'before_dataloader after_dataloader batch_start before_train_batch before_forward after_forward before_loss '
    'after_loss before_backward after_backward after_train_batch batch_end batch_checkpoint'.split()
)


def _same(batch: Any) -> Any:
    """The probes' transform: returns the batch it was given (the shim's check still runs)."""
    return batch


class Probe:
    """One of compatshim's paths (``path``) and the direct path (``direct``), one call each, sampled on ``on``'s clock,
    ``calls`` calls of each per sample, inside ``frame`` (the hook path runs in a trainer's loop frame)."""

    def __init__(
        self,
        name: str,
        on: Accelerator,
        path: Callable[[], Any],
        direct: Callable[[], Any],
        frame: Callable[[], Any] = contextlib.nullcontext,
        close: Optional[Callable[[], None]] = None,
    ) -> None:
        self.name, self.on, self.path, self.direct, self._frame = name, on, path, direct, frame
        self.calls, self._close, self._taken = CALLS[name.partition('-')[0]], close, 0

    def sample(self) -> tuple[float, float]:
        """Seconds of ``calls`` calls of the path and of the direct path, back to back (which goes first alternates
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

    def close(self) -> None:
        if self._close is not None:
            self._close()


def make_probe(
    name: str, on: Accelerator, transform: Callable[[Any], Any] = _same, make_device: Optional[Callable[[], Any]] = None
) -> Probe:
    """The probe ``name`` (``hook-batch``, ``hook-microbatch`` or ``monitor``) on ``on``, both paths calling
    ``transform``, on devices from ``make_device`` (default: Composer's own for ``on``). A hook probe needs the shim
    enabled when it is made and while it is sampled."""
    from composer.core import DataSpec

    make = make_device or on.composer_device
    batch, device, plain = [torch.rand(4, 3, 8, 8), torch.randint(0, 10, (4,))], make(), make()

    def direct() -> Any:
        return transform(plain.batch_to_device(batch))

    if name == 'monitor':
        return _monitor_probe(on, batch, device, direct, transform)
    if name not in ('hook-batch', 'hook-microbatch'):
        raise ValueError(f'no probe {name!r}; choose hook-batch, hook-microbatch or monitor')
    from compatshim import _loop_frames
    from compatshim._transforms import BatchHook

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4)))
    spec = DataSpec(loader, device_transforms=transform, data_transfer_stage=name.partition('-')[2])
    hooked = [n for n in ('batch_transforms', 'device_transforms') if isinstance(getattr(spec, n, None), BatchHook)]
    if not hooked:
        raise RuntimeError('compatshim bench: the shim installed no hook on the DataSpec (is it enabled here?)')
    batch_hook = getattr(spec, hooked[0])
    after = spec.microbatch_transforms if hooked[0] == 'batch_transforms' else _same

    # The hook runs before the trainer's move is looked up, as in the trainer: on 0.25–0.26 at stage microbatch the
    # batch hook arms the loop frame, which puts the move-then-transform on the device instance (never on ``plain``).
    def path() -> Any:
        hooked = batch_hook(batch)
        return after(device.batch_to_device(hooked))

    return Probe(name, on, path, direct, lambda: _loop_frames.loop_frame(device, 'train'))


def _monitor_probe(on: Accelerator, batch: Any, device: Any, direct: Callable[[], Any], transform: Any) -> Probe:
    import inspect

    from composer import Trainer
    from composer.core import DataSpec, Event
    from composer.models import ComposerClassifier

    from compatshim.monitor import TransformMonitor

    monitor = TransformMonitor()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*batch), batch_size=4)
    # The argument Composer itself calls at batch level (built with the shim off: Composer's own).
    parameters = inspect.signature(DataSpec.__init__).parameters
    argument = 'batch_transforms' if 'batch_transforms' in parameters else 'device_transforms'
    spec = DataSpec(loader, **{argument: transform})
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
    state, logger, events = trainer.state, trainer.logger, [Event(name) for name in STEP_EVENTS]
    state.set_dataloader(spec.dataloader, 'train')
    monitor.run_event(Event.FIT_START, state, logger)  # the monitor puts its tap on the DataSpec

    def path() -> Any:  # as Composer calls the batch-level transform: through the DataSpec's attribute (now tapped)
        for event in events:
            monitor.run_event(event, state, logger)
        return getattr(spec, argument)(device.batch_to_device(batch))

    return Probe('monitor', on, path, direct, close=trainer.close)


@contextlib.contextmanager
def planted_hook_delay(microseconds: float) -> Iterator[None]:
    """Make every call of the shim's DataSpec hooks ``microseconds`` slower (busy-wait) while the block runs."""
    from compatshim._transforms import BatchHook, MicrobatchHook

    if not microseconds:
        yield
        return

    def slowed(original: Callable[..., Any]) -> Callable[..., Any]:
        def __call__(self: Any, batch: Any) -> Any:
            end = time.perf_counter() + microseconds * 1e-6
            while time.perf_counter() < end:
                pass
            return original(self, batch)

        return __call__

    swaps = [_patching.swap(cls, '__call__', slowed) for cls in (BatchHook, MicrobatchHook)]
    try:
        yield
    finally:
        for done in reversed(swaps):
            done.undo()
