"""The one measuring engine of both benches (docs/harness.md, docs/pipeline.md): :func:`measure` checks every leg on
an observable device (:func:`check`), then times the legs a :class:`Schedule` selects in rounds of windows on
Composer's own device (:func:`time_rounds`), inside what :func:`open_session` fixes. Imports torch.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import dataclasses
import gc
import importlib
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, TextIO

import torch

from compatshim._version import __version__
from compatshim.bench.metrics import LEGS, Leg, Pair
from compatshim.bench.results import Cause, LegResult, Missing, now
from compatshim.bench.work import COUNTING, Generators, WorkCounter, compiled, generators_kept, held_by, seed_all
from compatshim.config import settings
from compatshim.config.support import UNAFFECTED_FAMILY, family_of, installed
from compatshim.devices.accelerator import Accelerator
from compatshim.errors import CompatShimWarning, ConfigurationError
from compatshim.observe.placement import Placement
from compatshim.observe.recorder import Tap, tensors
from compatshim.shim import api as shim
from compatshim.shim import notes

__all__ = [
    'SIZES', 'VERSION', 'Pipeline', 'Schedule', 'Session', 'Size', 'Timing', 'measure', 'open_session', 'time_rounds'
]  # fmt: skip

#: The version of what a leg measures (engine, workloads, probes): a baseline of another is *not comparable*. 4: one
#: engine for both benches.
VERSION = 4
#: Untimed steps per leg for placement, calls and bytes.
CHECK_STEPS = 2


@dataclasses.dataclass(frozen=True)
class Size:
    """Steps per window, timed rounds; the reference workloads' batch, microbatch, image side, blur (0: a pipeline's
    own)."""

    name: str
    steps: int
    rounds: int
    batch: int = 0
    microbatch: int = 0
    image: int = 0
    blur: int = 0


#: ``tiny``/``cpu``/``gpu``: the reference workload (tests, 2 cores, an accelerator); ``quick``/``default``: a pipeline.
SIZES: dict[str, Size] = {
    size.name: size
    for size in (
        Size('tiny', steps=2, rounds=3, batch=8, microbatch=4, image=16, blur=3),
        Size('cpu', steps=12, rounds=16, batch=32, microbatch=16, image=64, blur=15),
        Size('gpu', steps=20, rounds=14, batch=256, microbatch=64, image=224, blur=31),
        Size('quick', steps=4, rounds=3),
        Size('default', steps=20, rounds=8),
    )
}


@dataclasses.dataclass
class Pipeline:
    """A pipeline as the engine runs it: ``dataloader`` (a host ``DataLoader``, or any iterable of batches),
    ``transform`` (the device transform), and optionally ``model`` (a ``ComposerModel``, copied per leg; without one,
    a model that only consumes the batch), ``microbatch_size`` and ``get_num_samples_in_batch``."""

    dataloader: Any
    transform: Callable[[Any], Any]
    model: Any = None
    microbatch_size: Optional[int] = None
    get_num_samples_in_batch: Optional[Callable[[Any], int]] = None


def first_line(exc: BaseException) -> str:
    """An exception as one line of at most 200 characters."""
    line = f'{type(exc).__name__}: ' + (str(exc).strip().splitlines() or [''])[0]
    return line if len(line) <= 200 else line[:197] + '...'


class Source:
    """One iterator over a dataloader, shared by the legs that draw from it, started over when it runs out."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._iterator: Optional[Iterator[Any]] = None

    def next(self) -> Any:
        for _ in range(2):
            if self._iterator is None:  # never its truth: a DataLoader's iterator has a __len__ that may raise
                self._iterator = iter(self.loader)
            try:
                return next(self._iterator)
            except StopIteration:
                self._iterator = None
        raise ValueError('the dataloader yields no batch')


@dataclasses.dataclass
class Windows:
    """An epoch of ``steps`` batches from ``source``, continuing where the last one stopped."""

    source: Source
    steps: int

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Any]:
        return (self.source.next() for _ in range(self.steps))


def _consumer() -> Any:
    """A ComposerModel that only consumes the batch."""
    from composer.models import ComposerModel

    class Consumer(ComposerModel):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(()))

        def forward(self, batch: Any) -> torch.Tensor:
            touched = [t.reshape(-1)[:1].float().sum() for t in tensors(batch)]
            return self.weight + 0 * (sum(touched) if touched else 0)

        def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            return outputs

    return Consumer()


def samples_in(pipeline: Pipeline, batch: Any) -> int:
    """Samples in ``batch``, as Composer (or the pipeline's ``get_num_samples_in_batch``) counts them."""
    from composer.core import DataSpec

    count = pipeline.get_num_samples_in_batch or DataSpec(Windows(Source([batch]), 1)).get_num_samples_in_batch
    return int(count(batch))


def _trainer(leg: Leg, pipeline: Pipeline, loader: Any, device: Any, samples: int, monitor: Any, fn: Any) -> Any:
    """A Trainer for ``leg``, its DataSpec built with the shim in the leg's state (DataSpecs convert when built)."""
    from composer import Trainer
    from composer.core import DataSpec
    from composer.optim import DecoupledSGDW

    arguments: dict[str, Any] = {} if leg.argument is None else {leg.argument: fn}
    if pipeline.get_num_samples_in_batch is not None:
        arguments['get_num_samples_in_batch'] = pipeline.get_num_samples_in_batch
    with shim.switched(leg.stage is not None, leg.stage or None):
        if leg.stage and shim.status().stage:  # on (the kill switch leaves plain device_transforms)
            arguments['data_transfer_stage'] = leg.stage
        spec = DataSpec(loader, **arguments)
    if not leg.stage:  # Composer's own, also while the shim is on for the others
        notes.leave_to_composer(spec)
    model = copy.deepcopy(pipeline.model) if pipeline.model is not None else _consumer()
    return Trainer(
        model=model,
        train_dataloader=spec,
        optimizers=DecoupledSGDW(model.parameters(), lr=1e-3),
        device=device,
        device_train_microbatch_size=pipeline.microbatch_size or samples,
        callbacks=[monitor],
        precision='fp32',
        seed=17,
        progress_bar=False,
        log_to_console=False,
    )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The monitor's warnings (the bench reports them per leg) and Composer's microbatch advice, silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', CompatShimWarning)
        warnings.filterwarnings('ignore', message='.*device_train_microbatch_size.*')
        yield


def check(
    session: Session, pipeline: Pipeline, names: list[str], loader: Callable[[Leg], Any], samples: int
) -> dict[str, LegResult]:
    """Every leg in ``names``: :data:`CHECK_STEPS` untimed steps on the observable device, and what the monitor saw
    (or why it cannot run). Each leg starts from one random state, seeded here: work that depends on draws counts
    alike in every run, whatever the run drew before (an import: coolname draws ~800 numbers as Composer loads)."""
    from compatshim.monitor import TransformMonitor

    family, out, traced = family_of(session.composer), {}, compiled(pipeline.transform)
    seed_all()
    start = Generators(held_by(pipeline.transform))
    for name in names:
        leg = LEGS[name]
        absent = leg.absent_on(family)
        if absent:
            out[name] = LegResult(leg.description, Missing(Cause.NOT_HERE, absent))
            continue
        counter = WorkCounter(pipeline.transform)
        monitor, tap = TransformMonitor(), Tap(session.on.following(counter, traced))
        with quiet():
            try:
                device = session.on.observable_device()
                trainer = _trainer(leg, pipeline, loader(leg), device, samples, monitor, tap)
            except TypeError as exc:  # 0.29+: DataSpec(device_transforms=...) without the shim
                out[name] = LegResult(leg.description, Missing(Cause.REJECTED, first_line(exc)))
                continue
            try:  # the shim on, as in the timed rounds; the generators put back after the Trainer seeded
                start.put_back()
                with shim.switched(True):
                    trainer.fit(duration=f'{CHECK_STEPS}ba')
            except Exception as exc:  # noqa: BLE001 - the model fails on what it gets: the leg's finding
                out[name] = LegResult(leg.description, Missing(Cause.FAILED, first_line(exc)), tap.window.where)
                continue
            finally:
                trainer.close()
        summary = monitor.summaries[-1]
        seen = summary.transforms.get(leg.argument or '')
        out[name] = LegResult(
            leg.description,
            placement=Placement.NO_TRANSFORM if seen is None else seen.where,
            calls_per_step=0.0 if seen is None else seen.calls_per_step,
            h2d_bytes_per_step=int(summary.bytes_per_step),
            h2d_bytes_by_dtype=summary.bytes_by_dtype,
            monitor=summary.text,
            work=counter.work() if seen is not None else None,
            work_failed=counter.failed or '',
        )
    return out


@dataclasses.dataclass
class Timing:
    """A leg being timed: its Trainer and monitor, what its windows measured."""

    leg: Leg
    trainer: Any
    monitor: Any
    windows: list[float] = dataclasses.field(default_factory=list)
    samples: list[int] = dataclasses.field(default_factory=list)
    summaries: list[Any] = dataclasses.field(default_factory=list)
    round_s: list[float] = dataclasses.field(default_factory=list)
    beside: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    failed: str = ''

    def result(self, checked: LegResult) -> LegResult:
        if self.failed:
            return dataclasses.replace(checked, missing=Missing(Cause.FAILED, self.failed))
        argument = self.leg.argument or ''
        seen = [(w, s.transforms[argument]) for w, s in zip(self.windows, self.summaries) if argument in s.transforms]
        return dataclasses.replace(
            checked,
            beside=self.beside,
            round_s=self.round_s,
            samples_per_s=[n / s for n, s in zip(self.samples, self.windows) if s > 0],
            transform_ms=_median(t.ms_per_step for _, t in seen),
            transform_share=_median(t.ms_in_all / (w * 1e3) for w, t in seen if t.ms_in_all is not None and w > 0),
            wait_ms=_median(s.wait_ms_per_step for s in self.summaries),
            wait_share=_median(s.wait_share for s in self.summaries),
        )


def _median(values: Iterator[Optional[float]]) -> Optional[float]:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


@dataclasses.dataclass
class Session:
    """One bench run: its accelerator, Composer, size, progress lines, what :func:`pinned` fixed."""

    on: Accelerator
    composer: str
    size: Size
    say: Callable[[str], None]
    fixed: dict[str, Any]
    started: float

    def fields(self, **keys: Any) -> dict[str, Any]:
        return {
            'family': getattr(family_of(self.composer), 'value', UNAFFECTED_FAMILY),
            'fingerprint': fingerprint(self.on, self.size, self.fixed, **keys),
            'measured_at': now(),
            'elapsed_s': time.perf_counter() - self.started,
        }


@contextlib.contextmanager
def open_session(on: Accelerator, name: str, size: Size, out: Optional[TextIO]) -> Iterator[Session]:
    """A bench run on ``on`` at ``size``, inside :func:`pinned` with every generator seeded (and put back after), its
    progress lines for ``name`` to ``out`` (``None``: silent). ``ValueError``: it cannot run here (a setting that is
    not allowed, no such device, no Composer); ``RuntimeError``: the shim is enabled (the bench switches it per leg)."""
    problems, _ = settings.check_environment()
    if problems:
        raise ConfigurationError(settings.one_message(problems))
    if on.absent():
        raise ValueError(f'--device {on.name}, but {on.absent()}')
    composer = installed('mosaicml')
    if composer is None:
        raise ValueError('Composer is not installed here (pip install mosaicml)')
    importlib.import_module('composer.trainer')  # before the clock starts, whether something imported it or not
    started = time.perf_counter()  # what a run "measured": the same span in a --save, a --compare, a report's bench
    if shim.status().patches:
        raise RuntimeError('disable the shim first; the bench turns it on and off per leg')

    def say(message: str) -> None:
        if out is not None:
            print(f'{name}: {message} ({time.perf_counter() - started:.0f} s)', file=out, flush=True)

    with pinned(on) as fixed, generators_kept():  # a shuffling dataloader gives every run the same batches
        seed_all()
        yield Session(on, composer, size, say, fixed, started)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The checked legs that ``timed`` selects get windows, each of ``pairs`` back to back; ``after_round(round)``
    runs after each round's windows (the probes)."""

    pairs: Sequence[Pair] = ()
    timed: Callable[[LegResult], bool] = lambda measured: True
    after_round: Optional[Callable[[int], None]] = None

    def groups(self, names: list[str], round_: int) -> list[list[str]]:
        """One round's windows: each pair back to back, its order alternating by round, other legs alone, shuffled."""
        pairs = self.pairs
        groups = [[p.leg, p.partner] if (round_ + i) % 2 else [p.partner, p.leg] for i, p in enumerate(pairs)]
        groups += [[name] for name in names if not any(name in (p.leg, p.partner) for p in pairs)]
        return random.Random(round_).sample(groups, len(groups))


def measure(
    session: Session,
    pipeline: Pipeline,
    schedule: Schedule,
    samples: int,
    source: Optional[Source] = None,
    ceiling: Optional[tuple[list[Any], list[Any]]] = None,
    shim_transform: Optional[Callable[[Any], Any]] = None,
) -> dict[str, LegResult]:
    """Every leg of ``pipeline`` (the ceiling with ``ceiling``: its batches transformed, on the observable device and
    on Composer's), checked, then timed as ``schedule`` says; ``shim_transform``: what the shim's legs run in their
    windows instead (a planted slowdown). The only way a bench measures."""
    from compatshim.monitor import TransformMonitor

    shared, size = source or Source(pipeline.dataloader), session.size
    names = [name for name, leg in LEGS.items() if leg.argument or ceiling is not None]
    first = [shared.next() for _ in range(CHECK_STEPS)]  # every leg checks the same batches, a copy each

    def checked_epoch(leg: Leg) -> Windows:
        return Windows(Source(_copied(first) if leg.argument or ceiling is None else ceiling[0]), CHECK_STEPS)

    checked = check(session, pipeline, names, checked_epoch, samples)
    if 'ceiling' in checked and not checked['ceiling'].available:
        raise ValueError(
            'the ceiling leg (your model on batches already transformed, as every leg feeds it) raised '
            f'{checked["ceiling"].reason}'
        )
    timings = {}
    for name in (name for name in names if checked[name].available and schedule.timed(checked[name])):
        leg, monitor, device = LEGS[name], TransformMonitor(), session.on.composer_device()
        fn = shim_transform if shim_transform is not None and leg.stage else pipeline.transform
        loader = Windows(shared if leg.argument or ceiling is None else Source(ceiling[1]), size.steps)
        timings[name] = Timing(leg, _trainer(leg, pipeline, loader, device, samples, monitor, fn), monitor)
    if timings:
        session.say(f'{len(timings)} legs timed: {size.rounds} rounds of {size.steps} steps after a warm-up round')
        time_rounds(session, timings, schedule)
    return {name: timings[name].result(measured) if name in timings else measured for name, measured in checked.items()}


def _copied(batches: list[Any]) -> list[Any]:
    """A copy of ``batches`` a leg may change in place (as they are where one cannot be copied)."""
    try:
        return copy.deepcopy(batches)
    except Exception:  # noqa: BLE001 - a batch that holds what cannot be copied (a handle)
        return list(batches)


def _window(timing: Timing, accelerator: Accelerator, clock: Callable[[], float]) -> float:
    """One window on ``clock``, the device synchronised at both edges, the collector paused."""
    gc.collect()
    gc.disable()
    try:
        accelerator.synchronize()
        start, samples = clock(), int(timing.trainer.state.timestamp.sample)
        timing.trainer.fit(duration='1ep')
        accelerator.synchronize()
        elapsed = clock() - start
    finally:
        gc.enable()
    timing.samples.append(int(timing.trainer.state.timestamp.sample) - samples)
    timing.summaries.append(timing.monitor.summaries[-1])
    return elapsed


def time_rounds(session: Session, timings: dict[str, Timing], schedule: Schedule) -> None:
    """A warm-up round (a leg that fails there is marked failed and left out), then the timed rounds."""
    clock, rounds = session.on.clock(), session.size.rounds
    pairs = [pair for pair in schedule.pairs if pair.leg in timings and pair.partner in timings]
    for pair in pairs:
        timings[pair.leg].beside[pair.partner] = []
    timed = dataclasses.replace(schedule, pairs=pairs)
    # The shim stays on (toggling it skews the next window); legs without it hold Composer's own DataSpecs. Frozen out
    # of the collector, the collection before each window takes a millisecond instead of 0.2 s.
    try:
        with shim.switched(True):
            gc.collect()
            gc.freeze()
            try:
                with quiet():
                    for round_ in range(rounds + 1):
                        _round(timings, timed, session.on, clock, round_)
                        session.say(f'round {round_}/{rounds}' + (' (warm-up)' if not round_ else ''))
            finally:
                gc.unfreeze()
    finally:
        for timing in timings.values():
            timing.trainer.close()


def _round(
    timings: dict[str, Timing], schedule: Schedule, accelerator: Accelerator, clock: Callable[[], float], round_: int
) -> None:
    spent: dict[str, list[float]] = {name: [] for name in timings}
    for group in schedule.groups([name for name, timing in timings.items() if not timing.failed], round_):
        took: dict[str, float] = {}
        for name in group:
            try:
                took[name] = _window(timings[name], accelerator, clock)
            except Exception as exc:
                if round_:
                    raise
                timings[name].failed = first_line(exc)
        for pair in schedule.pairs:  # under the partner's name: a leg's partners never mix
            if round_ and pair.leg in took and pair.partner in took:
                timings[pair.leg].beside[pair.partner].append(took[pair.partner])
        for name, seconds in took.items():
            spent[name].append(seconds)
    if schedule.after_round is not None:
        schedule.after_round(round_)
    for timing in timings.values():
        if not round_:
            timing.windows, timing.samples, timing.summaries = [], [], []
        elif spent[timing.leg.name]:
            timing.windows += spent[timing.leg.name]
            timing.round_s.append(statistics.mean(spent[timing.leg.name]))


@contextlib.contextmanager
def pinned(accelerator: Accelerator) -> Iterator[dict[str, Any]]:
    """What every bench fixes and puts back after; yields what it fixed. torch's threads (one on the host: a thread
    per core spins while another process has it, 658, 81 and 660 samples/s in three rounds); glibc's malloc thresholds
    (raised as a process frees large blocks: one window page-faulted a fresh mapping, the next reused the heap)."""
    before = torch.get_num_threads()
    if accelerator.threads:
        torch.set_num_threads(accelerator.threads)
    try:
        yield {'torch_threads': torch.get_num_threads(), 'allocator': _pin_allocator()}
    finally:
        torch.set_num_threads(before)


def _pin_allocator() -> str:
    if not sys.platform.startswith('linux'):
        return 'default'
    try:
        libc = ctypes.CDLL('libc.so.6')
    except OSError:
        return 'default'
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's mallopt parameters
    if libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 128 << 20):
        return 'glibc: mmap threshold 32 MiB, trim threshold 128 MiB'
    return 'default'


def _cpu_model() -> str:
    try:
        with open('/proc/cpuinfo') as info:
            return next(line.split(':', 1)[1].strip() for line in info if line.startswith('model name'))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _git_commit() -> Optional[str]:
    try:
        found = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None if found.returncode == 0 else None


def workload_keys(device: str, of: Size) -> dict[str, Any]:
    """What a fingerprint says was measured (with a bench's own keys, what a baseline must match)."""
    return {'device': device, 'size': dataclasses.asdict(of), 'workload_version': VERSION, 'work_counting': COUNTING}


def fingerprint(accelerator: Accelerator, of: Size, fixed: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The machine and software a result was measured on: reported, but for :func:`workload_keys` and ``fields``."""
    return {
        'cpu_model': _cpu_model(),
        'cpu_count': os.cpu_count(),
        **accelerator.hardware(),
        **fixed,
        'python': platform.python_version(),
        'torch': torch.__version__,
        'composer': installed('mosaicml'),
        'compatshim': __version__,
        'git_commit': _git_commit(),
        **workload_keys(accelerator.name, of),
        **fields,
    }
