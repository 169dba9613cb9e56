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
from compatshim.bench import engine, gate, metrics, report, results, rule
from compatshim.bench.engine import CHECK_STEPS, SIZES, Pipeline, Schedule, Size, Source, first_line
from compatshim.bench.results import PIPELINE_DIR, Cause, PipelineResult, Store, UnreadableResult, comparable, known
from compatshim.bench.rule import verdicts
from compatshim.bench.work import generators_kept, held_by
from compatshim.devices.accelerator import Accelerator, accelerator
from compatshim.shim import api as shim
from compatshim.shim.notes import transform_name
from compatshim.shim.registry import STATE

__all__ = [
    'Baselines', 'Gated', 'Pipeline', 'PipelineError', 'as_pipeline', 'bench_pipeline', 'compare', 'gate_pipeline',
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
    unlike = unlike or results.counted_apart(planned['work_counting'], baseline.work_counting)
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


def compare(result: PipelineResult, baseline: PipelineResult, name: str) -> tuple[int, list[str]]:
    """``result`` judged against its baseline ``name``: the exit code and the lines that say it. A leg new, or gone
    with its release, is reported, not judged; one that ran then and fails now is a regression; the shim's legs that
    ran before are always judged (gone now: their placement says so); timings only from :data:`rule.VERDICT_ROUNDS`
    rounds."""
    ran, ran_before = (({n for n, measured in r.legs.items() if measured.available}) for r in (result, baseline))
    relied_on = {name for name in ran_before if name in metrics.LEGS and metrics.LEGS[name].stage}
    judged_legs = [leg for leg in result.legs if leg in (ran & ran_before) | relied_on]
    timed = min(r.fingerprint['size']['rounds'] for r in (result, baseline)) >= rule.VERDICT_ROUNDS
    judged_metrics = [m for m in metrics.pipeline_metrics(judged_legs) if timed or m.kind is not rule.BESIDE]
    judged = gate.gate(result, baseline, judged_metrics, metrics.PIPELINE_COMPARABLE_BY)
    if judged.unlike:
        return judged.code, [f'NOT COMPARABLE with {name!r}: {judged.unlike}; save a new baseline with --save {name}']
    then, what, gone = baseline.composer, result.pipeline, sorted(ran_before - ran - relied_on)

    def why(r: PipelineResult, name: str) -> str:
        return f'Composer {r.composer}: ' + (r.legs[name].reason if name in r.legs else 'no such leg')

    def fails(name: str) -> bool:
        missing = result.legs[name].missing if name in result.legs else None
        return missing is not None and missing.cause is Cause.FAILED

    judged.judgements += [rule.Judgement(f'{leg}: runs', rule.Outcome.REGRESSION, f'ran in the baseline; now '
                                         f'{why(result, leg)}') for leg in gone if fails(leg)]  # fmt: skip
    lines = [f'NEW {what} {name}: runs now; in the baseline, {why(baseline, name)} (reported, not judged)'
             for name in sorted(ran - ran_before - relied_on)]  # fmt: skip
    lines += [f'GONE {what} {name}: ran in the baseline; now, {why(result, name)} (reported, not judged)'
              for name in gone if not fails(name)]  # fmt: skip
    never = [leg for leg in result.legs if leg not in ran | ran_before]
    lines += [f'FAILS {what} {leg}: now, {why(result, leg)}; in the baseline, {why(baseline, leg)} (reported, not '
              'judged)' for leg in never if fails(leg)]  # fmt: skip
    lines += judged.lines(what)
    work = {j.metric.split(':')[0]: j.outcome for j in judged.judgements if j.metric.endswith('work per call')}
    if set(work.values()) - {rule.Outcome.OK} and 'work rule' not in STATE.warned:  # once a process (a fixture's
        STATE.warned.add('work rule')  # session compares many times)
        lines.append(f'work: {rule.WORK_RULE}')
    lines += timing_sight(result, baseline, work, judged.judgements) if timed else []
    outcomes = [j.outcome for j in judged.judgements]
    worse, unsure = outcomes.count(rule.Outcome.REGRESSION), outcomes.count(rule.Outcome.INCONCLUSIVE)
    said = [f'{worse} worsened' if worse else 'no regression among what was judged' if unsure else 'nothing worsened']
    said += [f'{unsure} inconclusive, which decide{"s" if unsure == 1 else ""} nothing'] if unsure else []
    over = [f'{baseline.measured_at}, Composer {then}', f'legs judged: {", ".join(judged_legs)}']
    over += [f'not measured in either run: {", ".join(never)}'] if never else []
    over += [] if timed else [f'timings not gated: fewer than {rule.VERDICT_ROUNDS} rounds']
    lines.append(f'compared with {name!r} ({"; ".join(over)}): {"; ".join(said)}')
    return judged.code, lines


def timing_sight(
    result: PipelineResult, baseline: PipelineResult, work: dict[str, rule.Outcome], judged: list[rule.Judgement]
) -> list[str]:
    """The transform's time per call now and then, and how much slower it must get for the timing gate to see it (its
    share of a step sets that; ``judged``: whether it could here); what the counts see of it (``work``: by leg)."""
    name = next((n for n in ('shim-batch', 'native-microbatch', 'unpatched') if n in result.legs), '')
    now, before = result.legs.get(name), baseline.legs.get(name)
    if now is None or before is None or not (now.transform_ms and before.transform_ms and now.transform_share):
        return []
    per_call = [m.transform_ms / max(m.calls_per_step, 1) for m in (now, before) if m.transform_ms is not None]
    step_change = 1 / (1 - (rule.BESIDE.min_effect or 0)) - 1  # a step this much longer: the minimum effect
    slower = 1 + step_change / now.transform_share
    alike = (result.torch, result.composer) == (baseline.torch, baseline.composer)
    unjudged = any(j.metric == f'{name}/ceiling' and j.reason.startswith('not judged') for j in judged)
    sight = f'the timing gate sees it from about {slower:.1f}x slower' + (' (not in this run)' if unjudged else '')
    if now.work is None or not alike or work.get(name) in (None, rule.Outcome.INCONCLUSIVE):
        counted = f'{sight}, and only the timing gate: its work was not judged here'
    elif now.work.outside:
        outside = now.work.outside_text()
        counted = f'its work in torch is counted exactly; outside torch (through {outside}) only {sight}'
    else:
        counted = f'{sight}; the work counts see any growth'
    return [
        f'{name}: the transform {per_call[0]:.3g} ms per call, {per_call[1]:.3g} ms in the baseline '
        f'({per_call[0] / per_call[1] - 1:+.0%}); it is {now.transform_share:.0%} of a step: {counted}'
    ]


def unsteady_pairs(result: PipelineResult) -> list[str]:
    """What a saved baseline's unsteady pairs mean for the compares against it (none: every pair held)."""
    gated = [m for m in metrics.pipeline_metrics(result.legs) if m.kind is rule.BESIDE]
    shaky = [f'{m.id}: its ratio {why}' for m in gated for why in [results.unsteady(m.read(result))] if why]
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
        code, lines = compare(result, baseline, baselines.compare)
    if baselines.save and code == _exits.OK:
        lines.append(f'saved {store.save(result, baselines.save, replace=True).as_posix()}')
        lines += unsteady_pairs(result)
    elif baselines.save:
        lines.append(f'not saved as {baselines.save!r}: the comparison did not pass')
    return Gated(result, code, lines)
