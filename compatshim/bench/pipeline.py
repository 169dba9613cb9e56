"""``compatshim bench --pipeline MODULE:CALLABLE``: your own pipeline, measured with and without the shim.

The callable (from your code; the current directory is on the path) returns a :class:`Pipeline` — or a plain mapping
of the same fields, so that your module need not import compatshim: ``dataloader`` (your host ``DataLoader``, or any
iterable of batches), ``transform`` (your device transform), and optionally ``model`` (your ``ComposerModel``; without
one, a model that only consumes the batch, so a step is fetch → move → transform), ``microbatch_size`` and
``get_num_samples_in_batch``.

Each *leg* is a real Composer ``Trainer`` over the same batches, differing in how the transform is passed, with a
``TransformMonitor`` (where the transform ran, its calls, its time, the bytes moved, the wait for data):

* ``unpatched``: ``DataSpec(device_transforms=fn)`` without the shim — what this release does with it (on the device up
  to 0.24, on the host on 0.25–0.26, never called on 0.27–0.28, a ``TypeError`` from 0.29, said as such);
* ``native-batch`` and ``native-microbatch`` (0.27+): Composer's own ``batch_transforms`` (host) and
  ``microbatch_transforms`` (device, per microbatch), what a user would migrate to;
* ``shim-batch`` and ``shim-microbatch``: the shim at each stage (where it patches);
* ``ceiling``: the same steps on batches already transformed and on the device — what a step would cost if data were
  free.

A window is one epoch of ``steps`` batches (your dataloader seen as windows of that length, each continuing where the
last stopped); in every round each leg takes one window and the ceiling one beside it (which first, shuffled), after a
warm-up round. Windows are timed on the host's wall clock, the device synchronised only at their edges: your
dataloader's workers and its waits are wall time. Placement, calls and bytes come from the monitor; every gated timing
is a leg against the ceiling of the same rounds (:func:`compatshim.bench.metrics.pipeline_metrics`), so a faster or
slower runner moves none of them.
"""

from __future__ import annotations

import copy
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
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional, TextIO, cast

import torch

import compatshim
from compatshim import _exits
from compatshim._support import DEVICES, UNAFFECTED_FAMILY, Family, family_of, installed
from compatshim._transforms import RESULT_RULE, result_problem
from compatshim.bench import judge, metrics, timing
from compatshim.bench.results import LegResult, PipelineResult, now, quartiles

__all__ = [
    'SIZES',
    'check_counts',
    'WAIT_LIMIT',
    'Pipeline',
    'PipelineError',
    'as_pipeline',
    'compare',
    'load',
    'measure',
    'text',
]

#: Steps per window and timed rounds (after one warm-up round), by size: ``quick`` runs in seconds (3 rounds can never
#: make a timing significant: only placement, calls and bytes gate there); ``default`` gates timings too. Longer windows
#: average out a noisy machine (this one's CPU time for the same 10 steps varied from 23 to 56 ms between windows).
SIZES: dict[str, tuple[int, int]] = {'quick': (4, 3), 'default': (20, 8)}
#: The share of a step spent waiting for data above which a run is input-bound (the PyTorch profiler's TensorBoard
#: plugin advises more dataloader workers above 5%).
WAIT_LIMIT = 0.05


class PipelineError(ValueError):
    """``--pipeline`` names something that is not a pipeline: the message says what, in one line."""


@dataclasses.dataclass
class Pipeline:
    """Your pipeline, as ``compatshim bench --pipeline`` runs it (see the module docstring for each field)."""

    dataloader: Any
    transform: Callable[[Any], Any]
    model: Any = None
    microbatch_size: Optional[int] = None
    get_num_samples_in_batch: Optional[Callable[[Any], int]] = None


FIELDS = tuple(field.name for field in dataclasses.fields(Pipeline))


def as_pipeline(made: Any, name: str) -> Pipeline:
    """``made`` (what ``name`` returned) as a :class:`Pipeline`, or a :class:`PipelineError` saying what is wrong."""
    if isinstance(made, Mapping):
        unknown = sorted(set(made) - set(FIELDS))
        missing = [field for field in ('dataloader', 'transform') if field not in made]
        if unknown or missing:
            wrong = f'unknown keys {unknown}' if unknown else f'no {" and no ".join(repr(m) for m in missing)}'
            optional = ', '.join(f for f in FIELDS if f not in ('dataloader', 'transform'))
            raise PipelineError(
                f'{name}() returned a mapping with {wrong}; a pipeline mapping needs dataloader and transform, and may '
                f'have {optional}'
            )
        made = Pipeline(**made)
    if not isinstance(made, Pipeline):
        raise PipelineError(
            f'{name}() returned {type(made).__name__}, not a compatshim.bench.Pipeline or a mapping with dataloader '
            'and transform'
        )
    problems = []
    # The fields come from the user's callable (a plain mapping, as often as not): whatever their annotations say.
    loader, transform = cast(Any, made.dataloader), cast(Any, made.transform)
    count = cast(Any, made.get_num_samples_in_batch)
    if not hasattr(loader, '__iter__'):
        problems.append(f'dataloader is {type(loader).__name__}, not an iterable of batches')
    if not callable(transform):
        problems.append(f'transform is {type(transform).__name__}, not a callable')
    if made.model is not None:
        from composer.models import ComposerModel

        if not isinstance(made.model, ComposerModel):
            problems.append(f'model is {type(made.model).__name__}, not a ComposerModel')
    size = made.microbatch_size
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        problems.append(f'microbatch_size is {size!r}, not an int >= 1')
    if count is not None and not callable(count):
        problems.append('get_num_samples_in_batch is not a callable')
    if problems:
        raise PipelineError(f'{name}(): ' + '; '.join(problems))
    return made


def load(spec: str) -> Pipeline:
    """Import ``MODULE:CALLABLE`` (the current directory first on the path) and call it.

    Raises:
        PipelineError: Not of that form, the module fails to import, it has no such callable, the call fails, or it
            returns no pipeline: one line, naming what is wrong.
    """
    module_name, sep, attribute = spec.partition(':')
    if not sep or not module_name or not attribute:
        raise PipelineError(f'--pipeline {spec!r} is not MODULE:CALLABLE (e.g. my_project.bench:pipeline)')
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises is the message
        raise PipelineError(f'cannot import {module_name!r}: {type(exc).__name__}: {_first_line(exc)}') from None
    for part in attribute.split('.'):
        if not hasattr(target, part):
            raise PipelineError(f'{module_name!r} has no {attribute!r}')
        target = getattr(target, part)
    if not callable(target):
        raise PipelineError(f'{spec} is {type(target).__name__}, not a callable that returns a pipeline')
    try:
        made = target()
    except Exception as exc:  # noqa: BLE001
        raise PipelineError(f'{spec}() raised {type(exc).__name__}: {_first_line(exc)}') from None
    return as_pipeline(made, spec)


def _raised(name: str, exc: BaseException) -> PipelineError:
    """The user's dataloader or transform raised ``exc``: said in one line."""
    return PipelineError(f'{name}: the pipeline raised {type(exc).__name__}: {_first_line(exc)}')


def _first_line(exc: BaseException) -> str:
    line = (str(exc).strip().splitlines() or [''])[0]
    return line if len(line) <= 200 else line[:197] + '...'


# --- the legs ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Leg:
    """One way of passing the transform: as the DataSpec argument ``argument`` (``None``: no transform, the ceiling),
    with the shim at ``stage`` (``None``: off)."""

    name: str
    description: str
    argument: Optional[str]
    stage: Optional[str] = None
    reason: str = ''  # why it does not run on this release


def _legs(composer: str) -> list[_Leg]:
    family = family_of(composer)
    native = family in (Family.DROPPED, Family.REJECTED)
    legs = [
        _Leg('unpatched', 'device_transforms=fn, no shim', 'device_transforms'),
        _Leg(
            'native-batch',
            'batch_transforms=fn, no shim (host)',
            'batch_transforms',
            reason='' if native else 'batch_transforms exists from Composer 0.27.0',
        ),
        _Leg(
            'native-microbatch',
            'microbatch_transforms=fn, no shim (device, per microbatch)',
            'microbatch_transforms',
            reason='' if native else 'microbatch_transforms exists from Composer 0.27.0',
        ),
    ]
    for stage in ('batch', 'microbatch'):
        reason = '' if family is not None else 'this release runs device_transforms on the device itself: no shim'
        described = f'device_transforms=fn, enable(stage="{stage}")'
        legs.append(_Leg(f'shim-{stage}', described, 'device_transforms', stage, reason))
    return [*legs, _Leg('ceiling', 'batches already transformed and on the device (data for free)', None)]


class _Source:
    """One iterator over your dataloader, shared by every leg (one set of workers), started over when it runs out."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._iterator: Optional[Iterator[Any]] = None

    def next(self) -> Any:
        for _ in range(2):
            if self._iterator is None:
                self._iterator = iter(self.loader)
            try:
                return next(self._iterator)
            except StopIteration:
                self._iterator = None
        raise PipelineError('the dataloader yields no batch')


class _Windows:
    """An epoch of ``steps`` batches from the source: what one window's ``fit(duration='1ep')`` trains on."""

    def __init__(self, source: _Source, steps: int) -> None:
        self.source, self.steps = source, steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.steps):
            yield self.source.next()


class _Replay:
    """The ceiling's epoch: the same stored batches, already transformed and on the device, every window."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)


def _consumer() -> Any:
    """A ComposerModel that only consumes the batch (one parameter, a loss that reads one element of each tensor)."""
    from composer.models import ComposerModel

    class Consumer(ComposerModel):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(()))

        def forward(self, batch: Any) -> torch.Tensor:
            touched = [t.reshape(-1)[:1].float().sum() for t in _tensors(batch)]
            return self.weight + 0 * (sum(touched) if touched else 0)

        def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            return outputs

    return Consumer()


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        return [t for v in batch.values() for t in _tensors(v)]
    if isinstance(batch, (list, tuple)):
        return [t for v in batch for t in _tensors(v)]
    return []


@dataclasses.dataclass
class _Run:
    """A leg's Trainer and what its windows measured."""

    leg: _Leg
    trainer: Any
    monitor: Any
    windows: list[float] = dataclasses.field(default_factory=list)
    samples: list[int] = dataclasses.field(default_factory=list)
    per_round: list[float] = dataclasses.field(default_factory=list)
    #: Per round, the ceiling's window taken right beside this leg's (what its ratio to the ceiling pairs).
    beside: list[float] = dataclasses.field(default_factory=list)
    summaries: list[Any] = dataclasses.field(default_factory=list)
    failed: str = ''


def _trainer(leg: _Leg, pipeline: Pipeline, loader: Any, device: Any, samples: int, monitor: Any) -> Any:
    from composer import Trainer
    from composer.core import DataSpec
    from composer.optim import DecoupledSGDW

    compatshim.enable(stage=leg.stage) if leg.stage else compatshim.disable()
    arguments: dict[str, Any] = {} if leg.argument is None else {leg.argument: pipeline.transform}
    if leg.stage and compatshim.status().stage:  # the shim is on (the kill switch leaves plain device_transforms)
        arguments['data_transfer_stage'] = leg.stage
    if pipeline.get_num_samples_in_batch is not None:
        arguments['get_num_samples_in_batch'] = pipeline.get_num_samples_in_batch
    try:
        spec = DataSpec(loader, **arguments)
    finally:
        compatshim.disable()
    model = copy.deepcopy(pipeline.model) if pipeline.model is not None else _consumer()
    return Trainer(
        model=model,
        train_dataloader=spec,
        optimizers=DecoupledSGDW(model.parameters(), lr=1e-6),
        device=device,
        device_train_microbatch_size=pipeline.microbatch_size or samples,
        callbacks=[monitor],
        seed=17,
        progress_bar=False,
        log_to_console=False,
    )


def _window(run: _Run, device_kind: str) -> float:
    """One window of ``run``'s leg, on the bench's clock (:func:`compatshim.bench.timing.clock`), the device
    synchronised at both edges."""
    clock = timing.clock(device_kind)
    gc.collect()
    gc.disable()
    try:
        timing.synchronize(device_kind)
        start, samples = clock(), int(run.trainer.state.timestamp.sample)
        run.trainer.fit(duration='1ep')
        timing.synchronize(device_kind)
        elapsed = clock() - start
    finally:
        gc.enable()
    run.samples.append(int(run.trainer.state.timestamp.sample) - samples)
    run.summaries.append(run.monitor.summaries[-1])
    return elapsed


# --- measure ----------------------------------------------------------------------------------------------------------


def measure(
    name: str,
    pipeline: Pipeline,
    device_kind: str = 'cpu',
    size: str = 'default',
    progress: Optional[TextIO] = None,
    steps: Optional[int] = None,
    rounds: Optional[int] = None,
) -> PipelineResult:
    """Measure every leg of ``pipeline`` on the installed Composer (see the module docstring), on the CPU fake
    accelerator with torch's threads fixed (:func:`compatshim.bench.timing.pinned_threads`).

    Args:
        name: How results and baselines name the pipeline (``MODULE:CALLABLE``).
        pipeline: What to run.
        device_kind: ``cpu`` (the fake accelerator), ``cuda`` or ``mps``.
        size: A key of :data:`SIZES`: steps per window and rounds.
        progress: Where to print a line per round (``None``: silent).
        steps: Steps per window instead of the size's.
        rounds: Timed rounds instead of the size's (5 at least for a timing to be able to gate).

    Raises:
        ValueError: An unknown device or size, a device that is absent, steps or rounds below 1.
        RuntimeError: The shim is enabled in this process (the bench turns it on and off per leg).
    """

    if device_kind not in DEVICES:
        raise ValueError(f'unknown device {device_kind!r}; choose one of {", ".join(DEVICES)}')
    if not timing.present(device_kind):
        raise ValueError(f'--device {device_kind}, but torch sees no {device_kind} device')
    composer = installed('mosaicml')
    if composer is None:
        raise ValueError('Composer (mosaicml) is not installed')
    if compatshim.status().patches:
        raise RuntimeError('disable the shim first; the bench turns it on and off per leg')
    steps, rounds = check_counts(size, steps, rounds)
    with timing.pinned_threads(device_kind) as threads:
        return _measure(name, pipeline, device_kind, size, progress, steps, rounds, composer, threads)


def _measure(
    name: str,
    pipeline: Pipeline,
    device_kind: str,
    size: str,
    progress: Optional[TextIO],
    steps: int,
    rounds: int,
    composer: str,
    threads: int,
) -> PipelineResult:
    from compatshim.monitor import TransformMonitor
    from compatshim.testing import observable_device

    allocator = timing.pin_allocator()
    started = time.perf_counter()

    def say(message: str) -> None:
        if progress is not None:
            print(f'{name}: {message} ({time.perf_counter() - started:.0f} s)', file=progress, flush=True)

    source = _Source(pipeline.dataloader)
    first = source.next()
    samples = _samples(pipeline, first)
    device = observable_device(device_kind)
    try:
        batches = [first, *(source.next() for _ in range(steps - 1))]
        ceiling_batches = []
        for batch in batches:  # the ceiling's batches: every leg's transform is tried here, before any leg runs
            moved = device.batch_to_device(batch)
            ceiling_batches.append(pipeline.transform(moved))
            problem = result_problem(pipeline.transform, moved, ceiling_batches[-1])
            if problem is not None:
                raise PipelineError(f'{name}: its transform {problem}. {RESULT_RULE}')
    except PipelineError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's dataloader or transform: said in one line
        raise _raised(name, exc) from None
    runs: list[_Run] = []
    results: dict[str, LegResult] = {}
    with warnings.catch_warnings():  # what the monitor would warn of, the bench reports per leg
        warnings.simplefilter('ignore', compatshim.CompatShimWarning)
        warnings.filterwarnings('ignore', message='.*device_train_microbatch_size.*')
        for leg in _legs(composer):
            if leg.reason:
                results[leg.name] = LegResult(leg.description, available=False, reason=leg.reason)
                continue
            loader = _Replay(ceiling_batches) if leg.argument is None else _Windows(source, steps)
            monitor = TransformMonitor()
            try:
                trainer = _trainer(leg, pipeline, loader, observable_device(device_kind), samples, monitor)
            except TypeError as exc:  # 0.29+: DataSpec(device_transforms=...) without the shim
                results[leg.name] = LegResult(leg.description, available=False, reason=f'TypeError: {_first_line(exc)}')
                continue
            runs.append(_Run(leg, trainer, monitor))
        say(f'{len(runs)} legs built; {rounds} rounds of {steps} steps after a warm-up round')
        try:
            _rounds(runs, device_kind, rounds, say)
        finally:
            compatshim.disable()
            for run in runs:
                run.trainer.close()
    for run in runs:
        results[run.leg.name] = _leg_result(run, steps)
    legs = {name: results[name] for name in (leg.name for leg in _legs(composer))}
    result = PipelineResult(
        pipeline=name,
        composer=composer,
        torch=torch.__version__,
        device=device_kind,
        family=getattr(family_of(composer), 'value', UNAFFECTED_FAMILY),
        fingerprint={
            **_fingerprint(name, device_kind, size, steps, rounds, samples, pipeline),
            'allocator': allocator,
            'torch_threads': threads,
        },
        measured_at=now(),
        steps=steps,
        legs=legs,
        elapsed_s=time.perf_counter() - started,
    )
    result.verdicts = verdicts(result)
    return result


def _samples(pipeline: Pipeline, batch: Any) -> int:
    """Samples in ``batch``, as Composer counts them (or as the pipeline's own ``get_num_samples_in_batch`` does)."""
    from composer.core import DataSpec

    count = pipeline.get_num_samples_in_batch or DataSpec(_Replay([batch])).get_num_samples_in_batch
    return int(count(batch))


def refuse_unlike(
    name: str,
    pipeline: Pipeline,
    baseline: PipelineResult,
    baseline_name: str,
    device_kind: str,
    size: str,
    steps: Optional[int] = None,
    rounds: Optional[int] = None,
) -> None:
    """Refuse, before anything is measured, a baseline that cannot be compared with the run asked for: another
    pipeline, size, device, samples per step or microbatch size (one batch of the dataloader is read to count).

    Raises:
        PipelineError: One line naming what differs, and how to save a new baseline.
    """
    steps, rounds = check_counts(size, steps, rounds)
    try:
        samples = _samples(pipeline, next(iter(pipeline.dataloader)))
    except Exception as exc:  # noqa: BLE001 - the user's dataloader: said in one line
        raise _raised(name, exc) from None
    planned = _Planned(_comparable_by(name, device_kind, size, steps, rounds, samples, pipeline))
    unlike = metrics.comparable(planned, baseline, metrics.PIPELINE_COMPARABLE_BY)
    if unlike:
        raise PipelineError(
            f'the baseline {baseline_name!r} is not comparable: {unlike}; save a new one with --save {baseline_name}'
        )


@dataclasses.dataclass(frozen=True)
class _Planned:
    """What a run will measure, known before it runs (the keys a baseline must match)."""

    fingerprint: dict[str, Any]


def check_counts(size: str, steps: Optional[int], rounds: Optional[int]) -> tuple[int, int]:
    """Steps per window and rounds: the size's, unless given.

    Raises:
        ValueError: An unknown size, or steps or rounds that are not an int >= 1.
    """
    if size not in SIZES:
        raise ValueError(f'unknown size {size!r}; choose one of {", ".join(SIZES)}')
    counts = (SIZES[size][0] if steps is None else steps, SIZES[size][1] if rounds is None else rounds)
    for what, value in zip(('steps', 'rounds'), counts):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f'{what} must be an int >= 1, got {value!r}')
    return counts


def _rounds(runs: list[_Run], device_kind: str, rounds: int, say: Callable[[str], None]) -> None:
    """One warm-up round (a leg that fails there is said to, not timed), then ``rounds``: each leg's window with a
    ceiling window right beside it (which first, and the legs' order, shuffled; seeded by the round)."""
    ceiling = next(run for run in runs if run.leg.argument is None)
    timed = [run for run in runs if run is not ceiling]
    # The shim stays on for the whole loop, as in the reference bench: its legs' hooks need it; the other legs hold
    # DataSpecs built while it was off, Composer's own objects. What exists now lives to the end: frozen out of the
    # collector, the collection before each window is quick.
    compatshim.enable()
    gc.collect()
    gc.freeze()
    try:
        for round_ in range(rounds + 1):
            rng = random.Random(round_)
            spent: dict[str, list[float]] = {}
            for run in rng.sample(timed, len(timed)):
                if run.failed:
                    continue
                pair: dict[str, float] = {}
                for one in [run, ceiling] if rng.random() < 0.5 else [ceiling, run]:
                    try:
                        pair[one.leg.name] = _window(one, device_kind)
                    except Exception as exc:  # a leg the release cannot run (the model fails on what it gets)
                        if one is ceiling and not round_:  # the model fails on the transformed batch: every leg would
                            raise PipelineError(
                                f'the ceiling leg (your model on batches already transformed, as every leg feeds it) '
                                f'raised {type(exc).__name__}: {_first_line(exc)}'
                            ) from None
                        if round_ or one is ceiling:
                            raise
                        run.failed = f'fails: {type(exc).__name__}: {_first_line(exc)}'
                        break
                if round_ and len(pair) == 2:
                    run.beside.append(pair[ceiling.leg.name])
                for name, seconds in pair.items():
                    spent.setdefault(name, []).append(seconds)
            if round_:
                for run in runs:
                    times = spent.get(run.leg.name, [])
                    if times:
                        run.windows += times
                        run.per_round.append(sum(times) / len(times))
            else:
                for run in runs:
                    run.samples.clear()
                    run.summaries.clear()
            say(f'round {round_}/{rounds}' + (' (warm-up)' if not round_ else ''))
    finally:
        gc.unfreeze()
        compatshim.disable()


def _leg_result(run: _Run, steps: int) -> LegResult:
    if run.failed:
        return LegResult(run.leg.description, available=False, reason=run.failed)
    argument = run.leg.argument
    seen = [s.transforms[argument] for s in run.summaries if argument in s.transforms] if argument else []
    where = {t.where for t in seen}
    placement = 'no transform' if argument is None else where.pop() if len(where) == 1 else 'mixed' if where else '—'
    calls = statistics.median(t.calls_per_step for t in seen) if seen else 0.0
    coherence = 'coherent' if calls == 1 else 'never called' if not calls else f'{calls:g} calls/step'
    coherence = '' if argument is None else coherence
    last = run.summaries[-1]
    ms = [t.ms_per_step for t in seen if t.ms_per_step is not None]
    shares = [
        found.ms_in_all / (window * 1e3)
        for window, summary in zip(run.windows, run.summaries)
        for found in [summary.transforms.get(argument) if argument else None]
        if found is not None and found.ms_in_all is not None and window > 0
    ]
    waits = [s.wait_ms_per_step for s in run.summaries if s.wait_ms_per_step is not None]
    waited = [s.wait_share for s in run.summaries if s.wait_share is not None]
    return LegResult(
        run.leg.description,
        placement=placement,
        coherence=coherence,
        calls_per_step=calls,
        h2d_bytes_per_step=int(statistics.median(s.bytes_per_step for s in run.summaries)),
        h2d_bytes_by_dtype=last.bytes_by_dtype,
        samples_per_s=[n / s for n, s in zip(run.samples, run.windows)],
        round_s=run.per_round,
        beside_s=run.beside,
        transform_ms=statistics.median(ms) if ms else None,
        wait_ms=statistics.median(waits) if waits else None,
        wait_share=statistics.median(waited) if waited else None,
        transform_share=statistics.median(shares) if shares else None,
        monitor=last.text,
    )


def _git_commit() -> Optional[str]:
    """The commit of the repository the current directory is in (``None``: not one, or no git)."""
    try:
        found = subprocess.run(
            ['git', 'rev-parse', 'HEAD'], capture_output=True, text=True, timeout=10, check=False, cwd=os.getcwd()
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None if found.returncode == 0 else None


def _fingerprint(
    name: str, device_kind: str, size: str, steps: int, rounds: int, samples: int, pipeline: Pipeline
) -> dict[str, Any]:
    accelerator: dict[str, Callable[[], dict[str, Any]]] = {
        'cuda': lambda: {'gpu': torch.cuda.get_device_name(), 'cuda': torch.version.cuda, 'driver': _nvidia_driver()},
        'mps': lambda: {'gpu': f'Apple MPS ({platform.machine()})'},
    }
    gpu = accelerator.get(device_kind, dict)()
    return {
        **_comparable_by(name, device_kind, size, steps, rounds, samples, pipeline),
        'composer': installed('mosaicml'),
        'torch': torch.__version__,
        'python': platform.python_version(),
        'compatshim': compatshim.__version__,
        'git_commit': _git_commit(),
        **gpu,
    }


def _comparable_by(
    name: str, device_kind: str, size: str, steps: int, rounds: int, samples: int, pipeline: Pipeline
) -> dict[str, Any]:
    """The fingerprint's keys a baseline must match (:data:`compatshim.bench.metrics.PIPELINE_COMPARABLE_BY`)."""
    return {
        'pipeline': name,
        'size': {'name': size, 'steps': steps, 'rounds': rounds},
        'device': device_kind,
        'samples_per_step': samples,
        'microbatch_size': pipeline.microbatch_size or samples,
    }


def _nvidia_driver() -> Optional[str]:
    try:
        found = subprocess.run(
            ['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = found.stdout.strip().splitlines() if found.returncode == 0 else []
    return lines[0] if lines else None


# --- what it says -----------------------------------------------------------------------------------------------------


#: A leg whose rounds spread (interquartile range) by more than this share of its median supports no timing verdict.
UNSTABLE = 0.25
#: Rounds below which no timing verdict is given (the rank test of the gate needs as many: 5).
VERDICT_ROUNDS = 5


def _step_ms(result: PipelineResult, name: str) -> list[float]:
    """A leg's step time per round, in ms: the figures of the table."""
    leg = result.legs.get(name)
    return [] if leg is None or not leg.available else [s * 1e3 / result.steps for s in leg.round_s]


def _unstable(result: PipelineResult, name: str) -> str:
    """Why the leg's rounds cannot support a factor ('' when they can)."""
    step = _step_ms(result, name)
    if len(step) < 2:
        return f'{name} has one round'
    q1, median, q3 = quartiles(step)
    spread = (q3 - q1) / median
    if spread > UNSTABLE:
        return (
            f"{name}'s rounds spread by {spread:.0%} of their median ({min(step):.3g} to {max(step):.3g} ms/step): "
            'the machine was busy, or the leg is'
        )
    return ''


def _factor(result: PipelineResult, slow: str, fast: str) -> tuple[Optional[float], str]:
    """How many times as long ``slow``'s step takes as ``fast``'s, from the table's figures (the ratio of the two
    median step times), with the range of the same ratio round by round; or ``None`` and why the samples cannot tell."""
    a, b = _step_ms(result, slow), _step_ms(result, fast)
    if not a or not b:
        return None, ''
    why = _unstable(result, slow) or _unstable(result, fast)
    if why:
        return None, why
    per_round = sorted(x / y for x, y in zip(a, b))
    factor = statistics.median(a) / statistics.median(b)
    if per_round[0] <= 1 <= per_round[-1] and not 0.95 <= factor <= 1.05:
        return None, f'round by round the two legs swap places (x{per_round[0]:.2f} to x{per_round[-1]:.2f})'
    return factor, f'per round x{per_round[0]:.2f} to x{per_round[-1]:.2f}'


def _faster(factor: float, other: str) -> str:
    """A factor against ``other`` as words that never call a slowdown faster."""
    if 0.95 <= factor <= 1.05:
        return f'as fast as {other} (x{factor:.2f})'
    return f'x{factor:.2f} faster than {other}' if factor > 1 else f'x{1 / factor:.2f} slower than {other}'


def verdicts(result: PipelineResult) -> list[str]:
    """The shim's factor on this release, stage batch against microbatch, and whether the run is input-bound: each a
    factor of the table's own figures with its spread, or "cannot tell" where the rounds cannot support one."""
    out = []
    unpatched, shim = result.legs['unpatched'], result.legs['shim-batch']
    if not shim.available:
        out.append(f'the shim: {shim.reason}')
    elif not unpatched.available:
        out.append(f'unpatched cannot run here: {unpatched.reason}')
    elif unpatched.placement == 'never called':
        out.append(
            'unpatched never calls the transform here (Composer drops device_transforms): its steps skip the work '
            'and feed the model raw batches'
        )
    rounds = result.fingerprint['size']['rounds']
    if rounds < VERDICT_ROUNDS:
        out.append(
            f'timing: no verdict from {rounds} rounds (--quick gates placement, calls and bytes only); run with '
            f'{VERDICT_ROUNDS} rounds or more for the factors'
        )
        return out

    def timed(slow: str, fast: str, say: Callable[[float, str], str], about: str) -> None:
        factor, spread = _factor(result, slow, fast)
        if factor is not None:
            out.append(say(factor, spread))
        elif spread:
            out.append(f'{about}: cannot tell — {spread}')

    if shim.available and unpatched.available and unpatched.placement != 'never called':
        timed(
            'unpatched',
            'shim-batch',
            lambda f, spread: (
                f'the shim: a step {_faster(f, "unpatched")} on this release '
                f'(unpatched: {unpatched.placement}; {spread})'
            ),
            'the shim against unpatched',
        )
    if shim.available and result.legs['native-batch'].available:
        timed(
            'native-batch',
            'shim-batch',
            lambda f, spread: (
                'against the workaround batch_transforms=fn (host), the shim: a step '
                f'{_faster(f, "the workaround")} ({spread})'
            ),
            'the shim against batch_transforms',
        )
    mb = result.legs['shim-microbatch']
    if shim.available and mb.available:
        timed(
            'shim-microbatch',
            'shim-batch',
            lambda f, spread: (
                f'stage batch vs microbatch: stage batch is {_faster(f, "stage microbatch")} ({spread}); '
                f'{mb.calls_per_step:g} calls/step instead of {shim.calls_per_step:g} at stage microbatch (batch-level '
                'draws and statistics per microbatch), which holds one microbatch on the device instead of the whole '
                'batch'
            ),
            'stage batch vs microbatch',
        )
    best_name = next(
        (n for n in ('shim-batch', 'native-microbatch', 'unpatched') if result.legs[n].available),
        '',
    )
    best = result.legs.get(best_name)
    if best is not None and best.wait_share is not None:
        bound = best.wait_share > WAIT_LIMIT
        out.append(
            f'input-bound: {"yes" if bound else "no"} — {best.wait_share:.0%} of a {best_name} step waits for data '
            f'(threshold {WAIT_LIMIT:.0%})'
        )
        timed(
            best_name,
            'ceiling',
            lambda f, spread: (
                f'with data for free (the ceiling leg) a step would be {_faster(f, best_name)} ({spread})'
            ),
            'data for free (the ceiling leg)',
        )
    return out


def text(result: PipelineResult) -> str:
    """What a person reads: per leg, then the verdicts."""
    fp = result.fingerprint
    threads = fp.get('torch_threads')
    where = (
        f"the fake accelerator: placement and bytes are real, times are this process's CPU time, torch threads "
        f'{threads} (fixed)'
        if result.device == 'cpu'
        else (fp.get('gpu') or result.device)
    )
    lines = [
        f'compatshim bench --pipeline {result.pipeline} (Composer {result.composer}, torch {result.torch}, '
        f'{result.device}: {where}; {fp["size"]["rounds"]} rounds of {result.steps} steps, '
        f'{fp["samples_per_step"]} samples/step, {result.elapsed_s:.0f} s)',
        f'  {"leg":19}{"step ms":>16}{"samples/s":>16}  {"transform":14}{"calls/step":>11}  {"transform":>9}  '
        f'{"waits for data":>18}  bytes/step to the device',
    ]
    for name, leg in result.legs.items():
        if not leg.available:
            lines.append(f'  {name:19}n/a: {leg.reason}')
            continue
        step = _step_ms(result, name)
        q1, median, q3 = quartiles(step)
        speed = statistics.median(leg.samples_per_s) if leg.samples_per_s else 0.0
        share = '—' if leg.transform_share is None else f'{leg.transform_share:.0%}'
        wait = '—' if leg.wait_ms is None or leg.wait_share is None else f'{leg.wait_ms:.2f} ms ({leg.wait_share:.0%})'
        dtypes = ', '.join(f'{d} {n:,}' for d, n in leg.h2d_bytes_by_dtype.items()) or 'none'
        calls = '—' if name == 'ceiling' else f'{leg.calls_per_step:g}'
        unstable = ' (unstable)' if _unstable(result, name) and len(step) > 1 else ''
        lines.append(
            f'  {name:19}{f"{median:.2f} ± {q3 - q1:.2f}":>16}{speed:>16,.0f}  '
            f'{leg.placement:14}{calls:>11}  {share:>9}  {wait:>18}  {leg.h2d_bytes_per_step:,} ({dtypes}){unstable}'
        )
    lines.append('  verdicts:')
    lines += [f'    {verdict}' for verdict in result.verdicts]
    return '\n'.join(lines)


def compare(result: PipelineResult, baseline: PipelineResult, name: str) -> tuple[int, list[str]]:
    """Judge ``result`` against its baseline ``name`` by the project's rule (:mod:`compatshim.bench.rule`): the exit
    code (1: something worsened; 2: the baseline measured another pipeline, size or device, so nothing could be
    judged; else 0) and the lines that say so (every outcome but ok, then one line of the verdict)."""
    unlike = metrics.comparable(result, baseline, metrics.PIPELINE_COMPARABLE_BY)
    if unlike:
        return _exits.NOT_DONE, [f'NOT COMPARABLE with {name!r}: {unlike}; save a new baseline with --save {name}']
    ran = {leg for leg, found in result.legs.items() if found.available}
    ran_before = {leg for leg, found in baseline.legs.items() if found.available}
    # What the user relies on is always judged: the shim's legs that ran before (gone now: its placement says so).
    relied_on = {leg for leg in ran_before if leg.startswith('shim-')}
    judged = (ran & ran_before) | relied_on
    judgements = judge.judge(result, baseline, metrics.pipeline_metrics(judged), metrics.PIPELINE_COMPARABLE_BY)
    lines = [
        f'NEW {result.pipeline} {leg}: runs on Composer {result.composer}, not on {baseline.composer} (reported, not '
        'judged)'
        for leg in sorted(ran - ran_before - relied_on)
    ] + [
        f'GONE {result.pipeline} {leg}: ran on Composer {baseline.composer}, not on {result.composer} '
        f'({result.legs[leg].reason if leg in result.legs else "no such leg"}; reported, not judged)'
        for leg in sorted(ran_before - ran - relied_on)
    ]
    lines += [j.line(result.pipeline) for j in judgements if j.outcome != 'ok']
    worse = [j for j in judgements if j.outcome == 'regression']
    lines.append(
        f'compared with {name!r} ({baseline.measured_at}, Composer {baseline.composer}): '
        + (f'{len(worse)} worsened' if worse else 'nothing worsened')
    )
    return (_exits.REGRESSION if worse else _exits.OK), lines
