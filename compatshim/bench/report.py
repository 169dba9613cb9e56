"""What people read: the text a bench prints (:func:`bench_text`) and the report of judged results (:func:`write`;
docs/harness.md). Every number comes from the registry, shown by its kind. Imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from compatshim.bench import rule
from compatshim.bench.gate import Judged
from compatshim.bench.metrics import COSTS, DETECTION_COSTS, GROWTH, METRICS, REFERENCE_LEGS, SAMPLES, Gate, Metric
from compatshim.bench.results import SCHEMA, BenchResult, Cause, LegResult, PathLike, Result
from compatshim.bench.rule import quartiles, spread
from compatshim.config.support import split_env
from compatshim.devices.accelerator import accelerator
from compatshim.observe.placement import Placement

__all__ = ['CHARTS', 'legs_table', 'markdown', 'plain_words', 'reference_lines', 'bench_text', 'seconds', 'write']

#: The chart files :func:`write` draws.
CHARTS: tuple[str, ...] = ('ratios.png', 'bytes.png', 'throughput.png')


def plain_words(measured: LegResult) -> str:
    """What plain ``DataSpec(device_transforms=fn)`` does without the shim, in words."""
    main = next(iter(measured.h2d_bytes_by_dtype), 'nothing')
    crossed = f'{main} images cross ({measured.h2d_bytes_per_step} bytes/step)'
    cause = measured.missing.cause if measured.missing else None
    if cause is Cause.REJECTED:
        return f'rejected: DataSpec(device_transforms=...) raises {measured.reason}'
    if cause is Cause.FAILED:
        ran = 'the transform never ran' if measured.placement is Placement.NEVER_CALLED else 'the transform ran'
        return f'silently dropped: {ran}, the model got the raw batch and training fails ({measured.reason})'
    if measured.placement is Placement.DEVICE:
        return f'runs on the device, after the move: {crossed}'
    if measured.placement is Placement.HOST:
        return f'runs on the host, before the move: the transformed {crossed}'
    return f'{measured.placement}: the model gets the raw batch'


def legs_table(result: Result) -> list[str]:
    """Per leg: step ms and samples/s (median ± IQR), placement, calls and share of the step, the wait for data and
    the bytes that crossed per step by dtype."""
    lines = [
        f'  {"leg":19}{"step ms":>16}{"samples/s":>16}  {"placement":14}{"calls/step":>11}  {"transform share":>15}  '
        f'{"waits for data":>18}  bytes/step to the device'
    ]
    for name, measured in result.legs.items():
        if not measured.available:
            lines.append(f'  {name:19}n/a: {measured.reason}')
            continue
        speed = f'{statistics.median(measured.samples_per_s):,.0f}' if measured.samples_per_s else 'not timed'
        share = '—' if measured.transform_share is None else f'{measured.transform_share:.0%}'
        waited = measured.wait_ms is not None and measured.wait_share is not None
        wait = f'{measured.wait_ms:.2f} ms ({measured.wait_share:.0%})' if waited else '—'
        dtypes = ', '.join(f'{d} {n:,}' for d, n in measured.h2d_bytes_by_dtype.items()) or 'none'
        calls = '—' if measured.placement is Placement.NO_TRANSFORM else f'{measured.calls_per_step:g}'
        unstable = ' (unstable)' if rule.unsteady(result.step_ms(name)) else ''
        lines.append(
            f'  {name:19}{spread(result.step_ms(name), ".2f"):>16}{speed:>16}  {measured.placement!s:14}{calls:>11}  '
            f'{share:>15}  {wait:>18}  {measured.h2d_bytes_per_step:,} ({dtypes}){unstable}'
        )
    return lines


def seconds(result: Result, wall_s: Optional[float] = None) -> str:
    """The seconds a run measured, and of how many its command took where known."""
    said = f'measured {result.elapsed_s:.0f} s'
    return said if wall_s is None else f'{said} of {max(wall_s, result.elapsed_s):.0f} s'


def bench_text(result: Result, head: str, more: list[str]) -> str:
    """What a bench prints: ``head``, what its figures are, the leg table, then ``more``."""
    fp, host = result.fingerprint, accelerator(result.device).is_host
    where = 'the fake accelerator, placement and bytes real' if host else fp.get('gpu') or result.device
    clock = "this process's CPU time" if host else 'wall time, the device synchronised at the edges of a window'
    threads = f'torch threads {fp.get("torch_threads")}' + (' (fixed)' if host else '')
    rounds = f'{fp["size"]["rounds"]} rounds of {fp["size"]["steps"]} steps'
    figures = f'  {result.device} ({where}); {rounds}; step times are {clock}, {threads}; waits are wall time'
    return '\n'.join([head, figures, *legs_table(result), *work_lines(result), *more])


def work_lines(result: Result) -> list[str]:
    """The transform's work per call in each leg that ran it (empty: no counts)."""
    counted = {name: measured for name, measured in result.legs.items() if measured.work or measured.work_failed}
    if not counted:
        return []
    lines = [f'  work per call (counted, not timed; torch {result.torch}):']
    for name, measured in counted.items():
        if measured.work is None:
            lines.append(f'    {name:19}not counted: {measured.work_failed}')
            continue
        per_step = measured.calls_per_step
        step = f'; x{per_step:g} calls/step' if per_step not in (0, 1) else ''
        lines.append(f'    {name:19}{measured.work.text()}{step}')
    return lines


def reference_lines(result: BenchResult) -> list[str]:
    """Every metric measured here, the monitor's words per leg, what plain device_transforms does."""
    lines = [
        "  ratios: a leg's samples/s over its partner's in the same round, median ± IQR over the rounds; bytes and "
        'placement (recipe): the recipe workload (uint8 images, checked, not timed)'
    ]
    lines += [f'  {m.id:38} {m.show(result)}' for m in METRICS if m.applies(result) and m.read(result)]
    lines += [f'  monitor, {name}: {measured.monitor}' for name, measured in result.legs.items() if measured.monitor]
    return [*lines, f'  {"recipe: plain device_transforms":38} {plain_words(result.recipe["unpatched"])}']


#: The metrics of the headline (with a title), and the other gated ones, summed up in one column.
HEADLINE = [m for m in METRICS if m.title]
CHECKS = [m for m in METRICS if not m.title and m.gate is not Gate.NEVER]


def _cell(judged: Judged, metric: Metric) -> str:
    return f'{metric.show(judged.result)} · {judged.outcome(metric.id)}'


def _bytes_ratio(result: BenchResult) -> str:
    shim, plain = result.recipe['shim-batch'], result.recipe['unpatched']
    ran = plain.available and plain.h2d_bytes_per_step
    return f'{shim.h2d_bytes_per_step / plain.h2d_bytes_per_step:.2f}' if ran else '—'


def markdown(judged: list[Judged], device: str) -> str:
    out = [f'# compatshim regression baseline report ({device})', '']
    if not judged:
        return '\n'.join(out + ['No env produced a result.', ''])
    for section in (_headline, _costs, _recipe, _per_leg, _notable, _machines):
        out += section(judged)
    return '\n'.join(out)


def _headline(judged: list[Judged]) -> list[str]:
    counts = {o: sum(j.outcome is o for r in judged for j in r.judgements) for o in rule.Outcome}
    out = [
        f'Envs: {len(judged)}. Outcomes over all gated metrics: '
        + ', '.join(f'{n} {o}' for o, n in counts.items())
        + f'. **Worst: {rule.worst([j for r in judged for j in r.judgements])}.**',
        '',
        '**The rule** (`compatshim/bench/rule.py`): ' + rule.RULE,
        '',
        'Each metric of the registry (`compatshim/bench/metrics.py`): its median (± IQR) and its outcome (— where '
        'it is not gated on that release or device). Ratios pair two legs of the same round; shares, a path of '
        "compatshim's against a step of the same round, held to a limit. *Checks*: the worst outcome of the placement "
        "and coherence checks. *Throughput vs baseline run*: the shim-batch leg's samples/s against the baseline's "
        'run, which may be another machine or another phase of this one: reported, never judged.',
        '',
        '## Headline per release',
        '',
        '| env | family | ' + ' | '.join(m.title for m in HEADLINE) + ' | checks | recipe bytes shim / plain '
        '| throughput vs baseline run |',
        '|' + '---|' * (len(HEADLINE) + 5),
    ]
    for r in judged:
        res, change = r.result, r.machine_change()
        planted = f' ({res.planted_text})' if res.planted else ''
        checks = rule.worst([j for j in r.judgements if j.metric in {m.id for m in CHECKS}])
        out.append(
            f'| {res.env}{planted} | {res.family} | ' + ' | '.join(_cell(r, m) for m in HEADLINE)
            + f' | {checks} | {_bytes_ratio(res)} | {"—" if change is None else f"{change:+.1%}"} |'
        )  # fmt: skip
    return out


def _costs(judged: list[Judged]) -> list[str]:
    out = [
        '',
        "## compatshim's own cost per batch",
        '',
        "Each probe calls a path of compatshim's and then the direct path it stands in for (the move and the transform "
        'alone), alternating, in every round (`compatshim/bench/reference.py`). Gated: its µs per batch as a share of '
        f'a step of the same round, against a stated limit (a regression: {rule.HOOK_SHARE.sentence}; '
        f'{rule.MONITOR_SHARE.sentence}). Reported: the path over the direct path (×; unlike work, which another '
        'processor moves) and the µs per batch beyond the direct path (an absolute time).',
        '',
        '| env | ' + ' | '.join(f'{name}: share | × | µs' for name, _ in COSTS) + ' |',
        '|' + '---|' * (3 * len(COSTS) + 1),
    ]
    for r in judged:
        cells = [f'{_cell(r, share)} | {ratio.show(r.result)} | {us.show(r.result)}' for _, (share, ratio, us) in COSTS]
        out.append(f'| {r.result.env} | ' + ' | '.join(cells) + ' |')
    n = SAMPLES[-1]
    out += [
        '',
        f'On a detection-style batch ({n} per-sample dicts of an image, its boxes and their labels: {3 * n} tensors), '
        "the same probes, against Composer's own move of that batch (and the transform) in the same rounds. Gated: "
        'the µs beyond it as a share of it, against a stated limit — at most that share of any step, since every step '
        f'moves its batch ({rule.HOOK_BEYOND.sentence}; {rule.MONITOR_BEYOND.sentence}).',
        '',
        '| env | ' + ' | '.join(f'{name}: share of the move | × | µs' for name, _ in DETECTION_COSTS) + ' |',
        '|' + '---|' * (3 * len(DETECTION_COSTS) + 1),
    ]
    for r in judged:
        cells = [
            f'{_cell(r, share)} | {ratio.show(r.result)} | {us.show(r.result)}'
            for _, (share, ratio, us) in DETECTION_COSTS
        ]
        out.append(f'| {r.result.env} | ' + ' | '.join(cells) + ' |')
    out += [
        '',
        'How each grows with the tensors of a batch: µs per batch on detection-style batches, the median of each env, '
        'lowest–highest over the envs (the hook where the shim patches).',
        '',
        '| samples | tensors | the move and the transform | the hook (stage batch) | the monitor | the monitor per '
        "tensor beyond one sample's |",
        '|---|---|---|---|---|---|',
    ]
    first = GROWTH[0][1][2]  # the monitor on one sample: its per-step events, and three tensors
    for samples, (move, hook, monitor) in GROWTH:
        pairs = [(first.read(r.result), monitor.read(r.result)) for r in judged] if samples > GROWTH[0][0] else []
        grown = [(statistics.median(b) - statistics.median(a)) / (3 * samples - 3) for a, b in pairs if a and b]
        out.append(
            f'| {samples} | {3 * samples} | {_over_envs(_medians(judged, move))} | '
            f'{_over_envs(_medians(judged, hook))} | {_over_envs(_medians(judged, monitor))} | '
            f'{_over_envs(grown, ".2f")} |'
        )
    return out


def _medians(judged: list[Judged], metric: Metric) -> list[float]:
    """``metric``'s median in each result that measured it."""
    return [float(statistics.median(found)) for found in (metric.read(r.result) for r in judged) if found]


def _over_envs(values: list[float], digits: str = '.0f') -> str:
    """The lowest and highest of ``values`` (µs), or ``—``."""
    if not values:
        return '—'
    low, high = min(values), max(values)
    return f'{low:{digits}}' if f'{low:{digits}}' == f'{high:{digits}}' else f'{low:{digits}}–{high:{digits}}'


def _recipe(judged: list[Judged]) -> list[str]:
    out = [
        '',
        '## Recipe workload: what crosses to the device',
        '',
        'uint8 NCHW images from the collate; on the device: normalisation (mean/std in 0–255 units) and a batch-level '
        'crop and flip. With the shim (as on 0.24.1) 1 byte per pixel crosses; when the transform runs on the host, '
        'float32: 4 bytes per pixel. Where plain `device_transforms` cannot run (0.27–0.28 drop it, 0.29+ reject it), '
        'the workaround a user would write is `batch_transforms=fn` on the host (the native-batch leg).',
        '',
        '| env | plain `device_transforms` (unpatched), no shim | unpatched KiB/step | native-batch KiB/step '
        '| shim-batch KiB/step |',
        '|---|---|---|---|---|',
    ]
    for r in judged:
        recipe = r.result.recipe
        kib = {
            name: f'{measured.h2d_bytes_per_step / 1024:.1f}' if measured.available else '—'
            for name, measured in recipe.items()
        }
        out.append(
            f'| {r.result.env} | {plain_words(recipe["unpatched"])} | {kib["unpatched"]} '
            f'| {kib["native-batch"]} | {kib["shim-batch"]} |'
        )
    return out


def _per_leg(judged: list[Judged]) -> list[str]:
    out = [
        '',
        '## Per leg (augment workload)',
        '',
        '| env | leg | placement | coherence | calls/step | H→D MiB/step '
        '| samples/s (median ± IQR; cpu: per CPU-second) |',
        '|---|---|---|---|---|---|---|',
    ]
    for r in judged:
        for name, measured in ((n, r.result.legs[n]) for n in REFERENCE_LEGS if n in r.result.legs):
            out.append(
                f'| {r.result.env} | {name} | {measured.placement} | {measured.coherence} '
                f'| {measured.calls_per_step:g} | {measured.h2d_bytes_per_step / 2**20:.1f} '
                f'| {spread(measured.samples_per_s, ".0f")} |'
                if measured.available
                else f'| {r.result.env} | {name} | n/a: {measured.reason} | | | | |'
            )
    return out


def _notable(judged: list[Judged]) -> list[str]:
    notable = [j.line(r.result.env) for r in judged for j in r.judgements if j.outcome is not rule.Outcome.OK]
    return ['', '## Outcomes other than ok', '', *([f'- {line}' for line in notable] or ['None.']), '']


def _machines(judged: list[Judged]) -> list[str]:
    machines: dict[str, list[str]] = {}
    for r in judged:
        fp = r.result.fingerprint
        machine = (
            f'{fp["cpu_model"]}, {fp["cpu_count"]} CPUs, {fp["torch_threads"]} torch thread(s), GPU: '
            f'{fp["gpu"] or "none"}, Python {fp["python"]}, workload size {fp["size"]["name"]}'
        )
        machines.setdefault(machine, []).append(f'{r.result.env} (torch {fp["torch"]}, {r.result.measured_at})')
    return ['## Machine', '', *(f'- {machine}: ' + ', '.join(envs) for machine, envs in machines.items()), '']


@contextlib.contextmanager
def _chart(judged: list[Judged], path: Path, title: str, ylabel: str) -> Iterator[Any]:
    """A chart of one group per env, saved after the block has drawn on its axes."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(judged)), 4.5))
    yield ax
    ax.set_xticks(range(len(judged)))
    ax.set_xticklabels([split_env(r.result.env)[0] for r in judged], rotation=30, ha='right', fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(judged: list[Judged], path: Path, title: str, ylabel: str, values: Any) -> None:
    """Grouped bars, one group per env and one bar per leg: ``values(result, leg) -> (value, error) or None``."""
    width = 0.8 / len(REFERENCE_LEGS)
    with _chart(judged, path, title, ylabel) as ax:
        for i, name in enumerate(REFERENCE_LEGS):
            found = [(x, values(r.result, name)) for x, r in enumerate(judged)]
            bars = [(x + (i - (len(REFERENCE_LEGS) - 1) / 2) * width, *v) for x, v in found if v is not None]
            xs, ys, errors = zip(*bars) if bars else ((), (), ())
            ax.bar(xs, ys, width, yerr=errors, label=name, capsize=2)
        ax.legend(fontsize=8, ncol=len(REFERENCE_LEGS), loc='upper center', bbox_to_anchor=(0.5, -0.3))


def _throughput(result: BenchResult, name: str) -> Optional[tuple[float, float]]:
    measured = result.legs.get(name)
    if measured is None or not measured.samples_per_s:
        return None
    q1, median, q3 = quartiles(measured.samples_per_s)
    return median, (q3 - q1) / 2


def _bytes(result: BenchResult, name: str) -> Optional[tuple[float, float]]:
    measured = result.recipe.get(name)
    return (measured.h2d_bytes_per_step / 1024, 0.0) if measured is not None and measured.available else None


def plot_ratios(judged: list[Judged], path: Path) -> None:
    """Every gated timing as its median over its baseline's (IQR bars), over its minimum effect's band."""
    timed = [m for m in METRICS if m.gate is not Gate.NEVER and m.kind.min_effect is not None]
    title = "Gated timings per release against their baselines; green: each one's minimum effect"
    with _chart(judged, path, title, 'median / baseline median (IQR bars)') as ax:
        for index, metric in enumerate(timed):
            offset, points = 0.8 * (index - (len(timed) - 1) / 2) / len(timed), []
            for x, r in enumerate(judged):
                now, before = metric.read(r.result), metric.read(r.baseline)
                if now and before and metric.gated_for(r.result):
                    q1, median, q3 = (v / statistics.median(before) for v in quartiles(now))
                    points.append((x + offset, median, median - q1, q3 - median))
                    band, edges = metric.kind.min_effect or 0.0, [x + offset - 0.05, x + offset + 0.05]
                    ax.fill_between(edges, 1 - band, 1 + band, color='tab:green', alpha=0.1)
            xs, ys, lo, hi = zip(*points) if points else ((), (), (), ())
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt='o', capsize=3, label=metric.id)
        ax.axhline(1.0, color='grey', linewidth=0.8)
        ax.legend(fontsize=7)


def write(judged: list[Judged], out_dir: PathLike, device: str, png: bool = True) -> Path:
    """Write ``report.md``, ``report.json`` and (if ``png``) the :data:`CHARTS` of one device."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / 'report.md').write_text(markdown(judged, device))
    worst = rule.worst([j for r in judged for j in r.judgements])
    data = {'schema': SCHEMA, 'device': device, 'worst': worst, 'results': [r.to_json() for r in judged]}
    (out / 'report.json').write_text(json.dumps(data, indent=1) + '\n')
    if png and judged:
        plot_ratios(judged, out / 'ratios.png')
        _bars(judged, out / 'bytes.png', 'Host→device KiB per step (recipe workload)', 'KiB per step', _bytes)
        title = f'Samples/s per leg on {device} (augment workload)'
        _bars(judged, out / 'throughput.png', title, 'samples/s', _throughput)
    return out
