"""compatshim's own cost per batch, to the microsecond: the shim's hook path, and the in-run monitor's.

The timed legs of :mod:`compatshim.bench.measure` cannot resolve a few microseconds inside a step of milliseconds. This
micro-benchmark takes the DataSpec hooks the shim installs on a real Composer ``DataSpec`` and calls them as the
trainer does for one batch of one microbatch, inside a loop frame on the trainer's own ``Device``:

* **shim path**: the batch-level hook (at stage ``batch``: loop frame lookup, the move through the trainer's device,
  the transform, the result check), the trainer's own move (a no-op for a batch already on the device), and on 0.27+
  the microbatch-level hook (at stage ``microbatch`` the transform runs there, after the move);
* **direct path**: ``transform(device.batch_to_device(batch))``, what 0.24.1 did.

On a small batch with a transform that returns its input, so the difference is the shim's plumbing only. The two paths
alternate, ``calls`` calls per sample, for ``samples`` pairs; each sample's overhead is (shim − direct) / calls, in
microseconds per batch. :func:`planted_hook_delay` adds a busy-wait to the shim's hooks themselves (a planted
regression of the hook path, for checking that the gate catches one).

:func:`monitor_overhead_us` does the same for :class:`~compatshim.monitor.TransformMonitor` on a real Trainer's state
and logger: every event Composer sends a callback in one train step of one microbatch (:data:`STEP_EVENTS`), the
transform through the monitor's tap and the move through its byte counter, against the transform and the move alone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Callable, Optional

import torch

__all__ = ['CALLS', 'SAMPLES', 'STEP_EVENTS', 'hook_overhead_us', 'monitor_overhead_us', 'planted_hook_delay']

#: Calls per path per sample, and samples (pairs) per stage.
CALLS = 2000
SAMPLES = 25


class _Same:
    """The transform of the micro-benchmark: returns the batch it was given (the shim's check still runs)."""

    def __call__(self, batch: Any) -> Any:
        return batch


def _hooks(data_spec: Any) -> tuple[Callable[[Any], Any], Optional[Callable[[Any], Any]]]:
    """The batch-level hook and (0.27+) the microbatch-level hook the trainer calls on ``data_spec``."""
    from compatshim._transforms import BatchHook

    for name in ('batch_transforms', 'device_transforms'):  # 0.27+ / 0.25–0.26
        hook = getattr(data_spec, name, None)
        if isinstance(hook, BatchHook):
            return hook, (data_spec.microbatch_transforms if name == 'batch_transforms' else None)
    raise RuntimeError('compatshim bench: the shim installed no hook on the DataSpec (is this release affected?)')


def _alternate(
    path: Callable[[], Any],
    direct: Callable[[], Any],
    calls: int,
    samples: int,
    sync: Callable[[], None],
    clock: Callable[[], float],
) -> list[float]:
    """Warm both up, then ``samples`` times: ``calls`` of ``path``, ``calls`` of ``direct``; µs per call of the path
    beyond the direct one, one value per sample."""
    for _ in range(max(1, calls // 10)):
        path()
        direct()
    out = []
    for _ in range(samples):
        path_s = _time(path, calls, sync, clock)
        direct_s = _time(direct, calls, sync, clock)
        out.append((path_s - direct_s) / calls * 1e6)
    return out


def _time(fn: Callable[[], Any], calls: int, sync: Callable[[], None], clock: Callable[[], float]) -> float:
    sync()
    start = clock()
    for _ in range(calls):
        fn()
    sync()
    return clock() - start


def hook_overhead_us(
    device: Any,
    sync: Callable[[], None],
    stage: str,
    calls: int = CALLS,
    samples: int = SAMPLES,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Microseconds per batch that the shim's hook path spends beyond the direct path, one value per sample.

    Args:
        device: The trainer's Composer ``Device`` (``DeviceCPU`` on cpu).
        sync: Waits for the device (a no-op on cpu).
        stage: ``batch`` or ``microbatch``. The shim must be disabled when this is called; it is enabled at
            ``stage`` for the measurement and disabled again.
        calls: Calls per path per sample.
        samples: Number of samples.
        clock: What the calls are timed with (the bench passes this process's CPU time on cpu).
    """
    from composer.core import DataSpec

    import compatshim
    from compatshim import _loop_frames

    batch = [torch.rand(4, 3, 8, 8), torch.randint(0, 10, (4,))]
    transform = _Same()
    compatshim.enable(stage=stage)
    try:
        data_spec = DataSpec(
            torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4))), device_transforms=transform
        )
        batch_hook, microbatch_hook = _hooks(data_spec)

        def direct() -> Any:
            return transform(device.batch_to_device(batch))

        # The trainer's move is looked up on every call, as the trainer does: on 0.25–0.26 at stage microbatch the
        # batch hook arms the loop frame, which puts the move-then-transform on the device instance.
        with _loop_frames.loop_frame(device, 'train'):
            if microbatch_hook is None:

                def shim() -> Any:
                    return device.batch_to_device(batch_hook(batch))
            else:
                mb_hook = microbatch_hook

                def shim() -> Any:
                    return mb_hook(device.batch_to_device(batch_hook(batch)))

            return _alternate(shim, direct, calls, samples, sync, clock)
    finally:
        compatshim.disable()


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


def monitor_overhead_us(
    device: Any,
    sync: Callable[[], None],
    calls: int = CALLS // 4,
    samples: int = SAMPLES,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Microseconds per train step that the in-run monitor adds, one value per sample (see the module docstring).

    Args:
        device: The trainer's Composer ``Device`` (``DeviceCPU`` on cpu); the monitor counts its moves.
        sync: Waits for the device (a no-op on cpu).
        calls: Steps per path per sample.
        samples: Number of samples.
        clock: What the steps are timed with.
    """
    from composer import Trainer
    from composer.core import DataSpec, Event
    from composer.models import ComposerClassifier

    from compatshim.monitor import TransformMonitor

    batch = [torch.rand(4, 3, 8, 8), torch.randint(0, 10, (4,))]
    transform = _Same()
    monitor = TransformMonitor()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*batch), batch_size=4)
    data_spec = DataSpec(loader, **{_host_transform_argument(): transform})
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
    try:
        state, logger, events = trainer.state, trainer.logger, [Event(name) for name in STEP_EVENTS]
        state.set_dataloader(data_spec.dataloader, 'train')
        monitor.run_event(Event.BEFORE_DATALOADER, state, logger)  # the monitor puts its tap on the DataSpec
        tapped = next(t.tap for t in monitor._watched[id(data_spec)].targets if t.tap is not None)
        plain = type(device)()

        def monitored() -> Any:
            for event in events:
                monitor.run_event(event, state, logger)
            return tapped(device.batch_to_device(batch))

        def direct() -> Any:
            return transform(plain.batch_to_device(batch))

        return _alternate(monitored, direct, calls, samples, sync, clock)
    finally:
        trainer.close()


def _host_transform_argument() -> str:
    """The DataSpec argument Composer itself calls at batch level: ``batch_transforms`` (0.27+), else
    ``device_transforms`` (the shim is off here)."""
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
    saved = {cls: cls.__dict__['__call__'] for cls in (BatchHook, MicrobatchHook)}

    def slowed(original: Callable[..., Any]) -> Callable[..., Any]:
        def __call__(self: Any, batch: Any) -> Any:
            _busy_wait(microseconds * 1e-6)
            return original(self, batch)

        return __call__

    for cls, original in saved.items():
        cls.__call__ = slowed(original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, original in saved.items():
            cls.__call__ = original  # type: ignore[method-assign]
