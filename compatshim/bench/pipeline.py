"""``compatshim bench --pipeline MODULE:CALLABLE`` (docs/pipeline.md): every leg of this release, each timed beside
the ``ceiling`` (:func:`bench_pipeline`), and the whole gate for the CLI and the pytest fixture (:func:`gate_pipeline`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any, Callable, Optional, TextIO

from compatshim import _exits
from compatshim.bench import engine, gate, metrics, report, rule
from compatshim.bench.engine import CHECK_STEPS, SIZES, Pipeline, Schedule, Size, Source, first_line
from compatshim.bench.results import PIPELINE_DIR, PipelineResult, Store, UnreadableResult, known
from compatshim.bench.rule import comparable, counted_apart, unsteady, verdicts
from compatshim.bench.work import generators_kept, held_by
from compatshim.devices.accelerator import Accelerator, accelerator
from compatshim.shim import api as shim
from compatshim.shim.notes import transform_name

__all__ = [
    'Baselines', 'Gated', 'Pipeline', 'PipelineError', 'as_pipeline', 'bench_pipeline', 'gate_pipeline',
    'load', 'pipeline_text', 'verdicts'
]  # fmt: skip

FIELDS = tuple(field.name for field in dataclasses.fields(Pipeline))


def _is_model(value: Any) -> bool:
    from composer.models import ComposerModel

    return isinstance(value, ComposerModel)


class PipelineError(ValueError):
    """``--pipeline`` names no pipeline, or one that cannot run: the message says what."""


def as_pipeline(made: Any, name: str) -> Pipeline:
    """``made`` (what ``name`` returned) as a :class:`Pipeline`, or a :class:`PipelineError` saying what is wrong."""
    if isinstance(made, Mapping):
        unknown = sorted(set(made) - set(FIELDS))
        missing = [field for field in ('dataloader', 'transform') if field not in made]
        if unknown or missing:
            wrong = f'unknown keys {unknown}' if unknown else f'no {" and no ".join(repr(m) for m in missing)}'
            raise PipelineError(
                f'{name}() returned a mapping with {wrong}; a pipeline mapping needs dataloader and transform, and may '
                f'have {", ".join(FIELDS[2:])}'
            )
        made = Pipeline(**made)
    if not isinstance(made, Pipeline):
        raise PipelineError(
            f'{name}() returned {type(made).__name__}, not a compatshim.bench.Pipeline or a mapping with dataloader '
            'and transform'
        )
    user: dict[str, Any] = vars(made)  # the user's values, whatever the annotations say
    checks: dict[str, tuple[Callable[[Any], bool], str]] = {
        'dataloader': (lambda v: hasattr(v, '__iter__'), 'not an iterable of batches'),
        'transform': (callable, 'not a callable'),
        'model': (lambda v: v is None or _is_model(v), 'not a ComposerModel'),
        'microbatch_size': (
            lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
            'not an int >= 1',
        ),
        'get_num_samples_in_batch': (lambda v: v is None or callable(v), 'not a callable'),
    }
    shown = {field: type(value).__name__ for field, value in user.items()}
    shown['microbatch_size'] = repr(user['microbatch_size'])
    problems = [f'{field} is {shown[field]}, {wrong}' for field, (ok, wrong) in checks.items() if not ok(user[field])]
    if problems:
        raise PipelineError(f'{name}(): ' + '; '.join(problems))
    return made


def load(spec: str) -> Pipeline:
    """Import ``MODULE:CALLABLE`` (the current directory first on the path) and call it; :class:`PipelineError`, one
    line, where that fails."""
    module_name, sep, attribute = spec.partition(':')
    if not sep or not module_name or not attribute:
        raise PipelineError(f'--pipeline {spec!r} is not MODULE:CALLABLE (e.g. my_project.bench:pipeline)')
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises is the message
        raise PipelineError(f'cannot import {module_name!r}: {first_line(exc)}') from None
    for part in attribute.split('.'):
        if not hasattr(target, part):
            raise PipelineError(f'{module_name!r} has no {attribute!r}')
        target = getattr(target, part)
    if not callable(target):
        raise PipelineError(f'{spec} is {type(target).__name__}, not a callable that returns a pipeline')
    try:
        made = target()
    except Exception as exc:  # noqa: BLE001
        raise PipelineError(f'{spec}() raised {first_line(exc)}') from None
    return as_pipeline(made, spec)


def size_of(name: str, steps: Optional[int] = None, rounds: Optional[int] = None) -> Size:
    """The size ``name`` (``quick`` or ``default``), with ``steps`` or ``rounds`` instead of its own if given."""
    if name not in ('quick', 'default'):
        raise ValueError(f'unknown size {name!r}; choose one of quick, default')
    for what, value in (('steps', steps), ('rounds', rounds)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f'{what} must be an int >= 1, got {value!r}')
    return dataclasses.replace(SIZES[name], steps=steps or SIZES[name].steps, rounds=rounds or SIZES[name].rounds)


def _raised(name: str, exc: BaseException) -> PipelineError:
    return PipelineError(f'{name}: the pipeline raised {first_line(exc)}')


def _samples(name: str, pipeline: Pipeline, batch: Any) -> int:
    try:
        return engine.samples_in(pipeline, batch)
    except Exception as exc:  # noqa: BLE001 - the user's batch or counter: said in one line
        raise _raised(name, exc) from None


def _keys(name: str, samples: int, pipeline: Pipeline) -> dict[str, Any]:
    return {'pipeline': name, 'samples_per_step': samples, 'microbatch_size': pipeline.microbatch_size or samples}


def bench_pipeline(
    name: str, pipeline: Pipeline, on: Accelerator, size: Optional[Size] = None, progress: Optional[TextIO] = None
) -> PipelineResult:
    """Measure every leg of ``pipeline`` at ``size`` (default: ``default``). ``ValueError`` (:class:`PipelineError`
    for the pipeline itself): the run cannot be made; ``RuntimeError``: the shim is enabled."""
    size = size or size_of('default')
    held = generators_kept(held_by(pipeline.transform))  # the transform's own, as they were: each bench starts alike
    with engine.open_session(on, name, size, progress) as session, held:
        source, moving = Source(pipeline.dataloader), session.on.composer_device()
        try:  # the ceiling's batches: the transform tried on each before any leg runs
            batches, ceiling = [source.next() for _ in range(size.steps)], []
            for batch in batches:
                moved = moving.batch_to_device(batch)
                ceiling.append(pipeline.transform(moved))
                if ceiling[-1] is None:  # any structure is the model's business; None is no batch
                    raise PipelineError(
                        f'{name}: its transform {transform_name(pipeline.transform)!r} returned None. It must return '
                        'the batch it was given, transformed (of any structure its model takes).'
                    )
        except PipelineError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's dataloader or transform: said in one line
            raise _raised(name, exc) from None
        samples = _samples(name, pipeline, batches[0])
        observed = [session.on.observable_device().batch_to_device(batch) for batch in ceiling[:CHECK_STEPS]]
        schedule = Schedule([metrics.Pair(name, 'ceiling') for name in metrics.LEGS if name != 'ceiling'])
        try:
            legs = engine.measure(session, pipeline, schedule, samples, source, (observed, ceiling))
        except ValueError as exc:
            raise PipelineError(str(exc)) from None
        result = PipelineResult(**session.fields(**_keys(name, samples, pipeline)), legs=legs)
    result.verdicts = verdicts(result)
    return result


def refuse_unlike(
    name: str, pipeline: Pipeline, baseline: PipelineResult, baseline_name: str, device: str, size: Size
) -> None:
    """Refuse, before anything is measured, a baseline unlike the run asked for (one batch is read to count)."""
    try:
        batch = next(iter(pipeline.dataloader))
    except Exception as exc:  # noqa: BLE001 - the user's dataloader: said in one line
        raise _raised(name, exc) from None
    planned = {**engine.workload_keys(device, size), **_keys(name, _samples(name, pipeline, batch), pipeline)}
    unlike = comparable(planned, baseline.fingerprint, metrics.PIPELINE_COMPARABLE_BY)
    unlike = unlike or counted_apart(planned['work_counting'], baseline.work_counting)
    if unlike:
        raise PipelineError(
            f'the baseline {baseline_name!r} is not comparable: {unlike}; save a new one with --save {baseline_name}'
        )


def pipeline_text(result: PipelineResult, wall_s: Optional[float] = None) -> str:
    """The leg table, then the verdicts; ``wall_s``: the seconds the command took."""
    head = (
        f'compatshim bench --pipeline {result.pipeline} (Composer {result.composer}, torch {result.torch}, '
        f'{result.fingerprint["samples_per_step"]} samples/step, {report.seconds(result, wall_s)})'
    )
    return report.bench_text(result, head, ['  verdicts:', *(f'    {verdict}' for verdict in result.verdicts)])


def unsteady_pairs(result: PipelineResult) -> list[str]:
    """What a saved baseline's unsteady pairs mean for the compares against it (none: every pair held)."""
    gated = [m for m in metrics.pipeline_metrics(result.legs) if m.kind is rule.BESIDE]
    shaky = [f'{m.id}: its ratio {why}' for m in gated for why in [unsteady(m.read(result))] if why]
    if not shaky or result.fingerprint['size']['rounds'] < rule.VERDICT_ROUNDS:
        return []
    return [
        f"unsteady: {'; '.join(shaky)}. Compares against this baseline judge these pairs' work, calls, bytes and "
        'placement exactly, and not their timing; saved again in steadier rounds (or with more --rounds), it gates '
        'their timing too'
    ]


@dataclasses.dataclass
class Gated:
    """What :func:`gate_pipeline` did: the result, the exit code, and the lines that say it."""

    result: PipelineResult
    code: int
    lines: list[str]


@dataclasses.dataclass(frozen=True)
class Baselines:
    """What the pipeline gate does with saved results: compare with the baseline ``compare``, save as ``save`` (unless
    the comparison failed), both in ``directory`` (default: ``.compatshim/benchmarks``)."""

    compare: Optional[str] = None
    save: Optional[str] = None
    directory: Any = None

    def store(self) -> Store:
        store = Store(self.directory if self.directory is not None else PIPELINE_DIR, PipelineResult)
        for given in (self.save, self.compare):
            if given is not None:
                store.path(given)
        return store

    def baseline(self, store: Store) -> Optional[PipelineResult]:
        """The baseline to compare with (``None``: none asked for); ``ValueError``: none, or unreadable."""
        if self.compare is None:
            return None
        try:
            baseline: Optional[PipelineResult] = store.load(self.compare)
        except UnreadableResult as exc:
            where = store.path(self.compare).as_posix()
            raise ValueError(f'{where} cannot be used: {exc}; save it again with --save {self.compare}') from None
        if baseline is None:
            raise ValueError(store.absent(self.compare))
        return baseline

    def size(self, store: Store, baseline: PipelineResult) -> Size:
        """The size ``baseline`` was measured at (``ValueError``: not one)."""
        try:
            size = Size(**known(Size, baseline.fingerprint['size']))
            size_of(size.name, size.steps, size.rounds)  # the checks of a size asked for
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f'{store.path(str(self.compare)).as_posix()} cannot be used: its size is not one ({first_line(exc)}); '
                f'save it again with --save {self.compare}'
            ) from None
        return size


def gate_pipeline(
    pipeline: Any,
    name: Optional[str] = None,
    *,
    device: str = 'cpu',
    size: Optional[Size] = None,
    baselines: Baselines = Baselines(),
    progress: Optional[TextIO] = None,
) -> Gated:
    """The pipeline gate: every input checked and an unlike baseline refused before anything is measured
    (``ValueError``/:class:`PipelineError`, one line); then measure, compare with ``baselines.compare``, and save as
    ``baselines.save`` unless the comparison failed. ``pipeline``: ``MODULE:CALLABLE``, a :class:`Pipeline` or a
    mapping of its fields; ``size``: default the baseline's when comparing, else ``default``."""
    store = baselines.store()
    on = accelerator(device)
    baseline = baselines.baseline(store)
    if size is None and baseline is not None:
        size = baselines.size(store, baseline)
    size = size or size_of('default')
    name = name or (pipeline if isinstance(pipeline, str) else 'pipeline')
    made = load(pipeline) if isinstance(pipeline, str) else as_pipeline(pipeline, name)
    if baseline is not None and baselines.compare is not None:
        refuse_unlike(name, made, baseline, baselines.compare, device, size)
    with shim.switched(False):  # off while it measures, as it was after
        result = bench_pipeline(name, made, on, size, progress)
    lines: list[str] = []
    code = _exits.OK
    if baseline is not None and baselines.compare is not None:
        code, lines = gate.compare(result, baseline, baselines.compare)
    if baselines.save and code == _exits.OK:
        lines.append(f'saved {store.save(result, baselines.save, replace=True).as_posix()}')
        lines += unsteady_pairs(result)
    elif baselines.save:
        lines.append(f'not saved as {baselines.save!r}: the comparison did not pass')
    return Gated(result, code, lines)
