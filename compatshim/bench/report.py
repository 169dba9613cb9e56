"""The regression baseline report: judged results rendered as Markdown, the same as JSON, and three PNG charts.

Input: :class:`~compatshim.bench.report.Judged` results (a bench result, its baseline and the judge's outcomes).
Output, per device: ``report.md``, ``report.json`` (raw samples and outcomes; ``compatshim report`` reads it back to
judge it again), ``ratios.png`` (every gated timing per release relative to its baseline, with its minimum-effect
band), ``bytes.png`` (host→device bytes per step per leg, recipe workload) and ``throughput.png`` (samples/s per
leg). Every number comes from the registry (:mod:`compatshim.bench.metrics`), shown by its kind. Imports nothing
heavy; matplotlib only to draw.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Optional

from compatshim._placement import Placement
from compatshim._support import split_env
from compatshim.bench import rule
from compatshim.bench.metrics import COSTS, METRICS, REFERENCE_LEGS, Gate, Metric
from compatshim.bench.results import SCHEMA, BenchResult, LegResult, LegStatus, PathLike, quartiles, spread

__all__ = ['CHARTS', 'Judged', 'markdown', 'plain_words', 'write']
LEGS = REFERENCE_LEGS

#: The chart files :func:`write` draws.
CHARTS: tuple[str, ...] = ('ratios.png', 'bytes.png', 'throughput.png')


@dataclasses.dataclass
class Judged:
    """One env's result, the baseline it was judged against (its path, or ``None``), and the outcomes."""

    result: BenchResult
    baseline: Optional[BenchResult]
    baseline_path: Optional[str]
    judgements: list[rule.Judgement]

    @property
    def worst(self) -> rule.Outcome:
        return rule.worst(self.judgements)

    def outcome(self, metric: str) -> str:
        return next((str(j.outcome) for j in self.judgements if j.metric == metric), '—')

    def machine_change(self) -> Optional[float]:
        """How much faster the unpatched leg ran than in the baseline's run: another machine, or another phase of this
        one (reported, never judged)."""
        if self.baseline is None:
            return None
        now, then = self.result.legs['shim-batch'].samples_per_s, self.baseline.legs['shim-batch'].samples_per_s
        return statistics.median(now) / statistics.median(then) - 1 if now and then else None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.result.to_json(),
            'baseline': self.baseline_path,
            'judgements': [dataclasses.asdict(j) for j in self.judgements],
        }


def plain_words(leg: LegResult) -> str:
    """What plain ``DataSpec(device_transforms=fn)`` does without the shim (the recipe's ``unpatched`` leg), in
    words."""
    main = next(iter(leg.h2d_bytes_by_dtype), 'nothing')
    if leg.status is LegStatus.REJECTED:
        return f'rejected: DataSpec(device_transforms=...) raises {leg.reason}'
    if leg.status is LegStatus.FAILED:
        ran = 'the transform never ran' if leg.placement is Placement.NEVER_CALLED else 'the transform ran'
        return f'silently dropped: {ran}, the model got the raw batch and training fails ({leg.reason})'
    if leg.placement is Placement.DEVICE:
        return f'runs on the device, after the move: {main} images cross ({leg.h2d_bytes_per_step} bytes/step)'
    if leg.placement is Placement.HOST:
        crossed = f'{main} images cross ({leg.h2d_bytes_per_step} bytes/step)'
        return f'runs on the host, before the move: the transformed {crossed}'
    return f'{leg.placement}: the model gets the raw batch'


def _bytes_ratio(result: BenchResult) -> Optional[float]:
    """The recipe's bytes per step with the shim over plain device_transforms' (``None``: plain did not run)."""
    shim, plain = result.recipe['shim-batch'], result.recipe['unpatched']
    return shim.h2d_bytes_per_step / plain.h2d_bytes_per_step if plain.available and plain.h2d_bytes_per_step else None


def _pct(value: Optional[float]) -> str:
    return '—' if value is None else f'{value:+.1%}'


#: The metrics of the headline (those with a title), and the other gated ones (checks), summed up in one column.
HEADLINE = [m for m in METRICS if m.title]
CHECKS = [m for m in METRICS if not m.title and m.gate is not Gate.NEVER]


def _cell(judged: Judged, found: Metric) -> str:
    return f'{found.show(judged.result)} · {judged.outcome(found.id)}'


def markdown(judged: list[Judged], device: str) -> str:
    """The report of one device as Markdown."""
    counts = {o: sum(j.outcome is o for r in judged for j in r.judgements) for o in rule.Outcome}
    worst = rule.worst([j for r in judged for j in r.judgements])
    out = [f'# compatshim regression baseline report ({device})', '']
    if not judged:
        return '\n'.join(out + ['No env produced a result.', ''])
    out += [
        f'Envs: {len(judged)}. Outcomes over all gated metrics: '
        + ', '.join(f'{n} {o}' for o, n in counts.items())
        + f'. **Worst: {worst}.**',
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
        '| env | family | '
        + ' | '.join(m.title for m in HEADLINE)
        + ' | checks | recipe bytes shim / plain | throughput vs baseline run |',
        '|' + '---|' * (len(HEADLINE) + 5),
    ]
    for r in judged:
        res = r.result
        bytes_ratio = _bytes_ratio(res)
        planted = f' ({res.planted_text})' if res.planted else ''
        checks = rule.worst([j for j in r.judgements if j.metric in {m.id for m in CHECKS}])
        out.append(
            f'| {res.env}{planted} | {res.family} | '
            + ' | '.join(_cell(r, m) for m in HEADLINE)
            + f' | {checks} | {"—" if bytes_ratio is None else f"{bytes_ratio:.2f}"} | {_pct(r.machine_change())} |'
        )
    out += [
        '',
        "## compatshim's own cost per batch",
        '',
        "Each probe calls a path of compatshim's and then the direct path it stands in for (the move and the transform "
        'alone), alternating, in every round (`compatshim/bench/overhead.py`). Gated: its µs per batch as a share of a '
        f'step of the same round, against a stated limit (a regression: {rule.HOOK_SHARE.sentence}; '
        f'{rule.MONITOR_SHARE.sentence}). Reported: the path over the direct path (×; unlike work, which another '
        'processor moves) and the µs per batch beyond the direct path (an absolute time).',
        '',
        '| env | ' + ' | '.join(f'{name}: share | × | µs' for name, _, _, _ in COSTS) + ' |',
        '|' + '---|' * (3 * len(COSTS) + 1),
    ]
    for r in judged:
        cells = [f'{_cell(r, share)} | {ratio.show(r.result)} | {us.show(r.result)}' for _, share, ratio, us in COSTS]
        out.append(f'| {r.result.env} | ' + ' | '.join(cells) + ' |')
    out += [
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
        kib = {
            name: f'{leg.h2d_bytes_per_step / 1024:.1f}' if leg.available else '—'
            for name, leg in r.result.recipe.items()
        }
        out.append(
            f'| {r.result.env} | {plain_words(r.result.recipe["unpatched"])} | {kib["unpatched"]} '
            f'| {kib["native-batch"]} | {kib["shim-batch"]} |'
        )
    out += [
        '',
        '## Per leg (augment workload)',
        '',
        '| env | leg | placement | coherence | calls/step | H→D MiB/step '
        '| samples/s (median ± IQR; cpu: per CPU-second) |',
        '|---|---|---|---|---|---|---|',
    ]
    for r in judged:
        for name in LEGS:
            leg = r.result.legs.get(name)
            if leg is None:
                continue
            if not leg.available:
                out.append(f'| {r.result.env} | {name} | n/a: {leg.reason} | | | | |')
                continue
            out.append(
                f'| {r.result.env} | {name} | {leg.placement} | {leg.coherence_text} | {leg.calls_per_step:g} '
                f'| {leg.h2d_bytes_per_step / 2**20:.1f} | {spread(leg.samples_per_s, ".0f")} |'
            )
    notable = [j.line(r.result.env) for r in judged for j in r.judgements if j.outcome is not rule.Outcome.OK]
    out += ['', '## Outcomes other than ok', '', *([f'- {line}' for line in notable] or ['None.']), '']
    out += ['## Machine', '']
    machines: dict[str, list[str]] = {}
    for r in judged:
        fp = r.result.fingerprint
        machine = (
            f'{fp["cpu_model"]}, {fp["cpu_count"]} CPUs, {fp["torch_threads"]} torch thread(s), GPU: '
            f'{fp["gpu"] or "none"}, Python {fp["python"]}, workload size {fp["size"]["name"]}'
        )
        machines.setdefault(machine, []).append(f'{r.result.env} (torch {fp["torch"]}, {r.result.measured_at})')
    out += [f'- {machine}: ' + ', '.join(envs) for machine, envs in machines.items()] + ['']
    return '\n'.join(out)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    return plt


def _bars(judged: list[Judged], path: Path, title: str, ylabel: str, values: Any) -> None:
    """Grouped bars, one group per env and one bar per leg: ``values(result, leg) -> (value, error) or None``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(judged)), 4.5))
    width = 0.8 / len(LEGS)
    for i, name in enumerate(LEGS):
        xs, ys, errs = [], [], []
        for x, r in enumerate(judged):
            found = values(r.result, name)
            if found is not None:
                xs.append(x + (i - (len(LEGS) - 1) / 2) * width)
                ys.append(found[0])
                errs.append(found[1])
        ax.bar(xs, ys, width, yerr=errs, label=name, capsize=2)
    ax.set_xticks(range(len(judged)))
    ax.set_xticklabels([split_env(r.result.env)[0] for r in judged], rotation=30, ha='right', fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=len(LEGS), loc='upper center', bbox_to_anchor=(0.5, -0.3))
    ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _throughput(result: BenchResult, leg: str) -> Optional[tuple[float, float]]:
    found = result.legs.get(leg)
    if found is None or not found.samples_per_s:
        return None
    q1, median, q3 = quartiles(found.samples_per_s)
    return median, (q3 - q1) / 2


def _bytes(result: BenchResult, leg: str) -> Optional[tuple[float, float]]:
    found = result.recipe.get(leg)
    return (found.h2d_bytes_per_step / 1024, 0.0) if found is not None and found.available else None


def plot_ratios(judged: list[Judged], path: Path) -> None:
    """Every gated timing of every release as its median over its baseline's median (IQR bars), each over the band of
    its kind's minimum effect."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(judged)), 4.5))
    timed = [m for m in METRICS if m.gate is not Gate.NEVER and m.kind.min_effect is not None]
    for index, found in enumerate(timed):
        offset = 0.8 * (index - (len(timed) - 1) / 2) / len(timed)
        xs, ys, lo, hi = [], [], [], []
        for x, r in enumerate(judged):
            now, before = found.read(r.result), found.read(r.baseline)
            if not now or not before or not found.gated_for(r.result):
                continue
            centre = statistics.median(before)
            q1, median, q3 = (v / centre for v in quartiles(now))
            xs.append(x + offset)
            ys.append(median)
            lo.append(median - q1)
            hi.append(q3 - median)
            effect, width = found.kind.min_effect or 0.0, [x + offset - 0.05, x + offset + 0.05]
            ax.fill_between(width, 1 - effect, 1 + effect, color='tab:green', alpha=0.1)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt='o', capsize=3, label=found.id)
    ax.axhline(1.0, color='grey', linewidth=0.8)
    ax.set_xticks(range(len(judged)))
    ax.set_xticklabels([split_env(r.result.env)[0] for r in judged], rotation=30, ha='right', fontsize=8)
    ax.set_ylabel('median / baseline median (IQR bars)')
    ax.set_title("Gated timings per release against their baselines; green: each one's minimum effect")
    ax.legend(fontsize=7)
    ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(judged: list[Judged], out_dir: PathLike, device: str, png: bool = True) -> Path:
    """Write ``report.md``, ``report.json`` and (if ``png``) the :data:`CHARTS` of one device into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / 'report.md').write_text(markdown(judged, device))
    data = {
        'schema': SCHEMA,
        'device': device,
        'worst': rule.worst([j for r in judged for j in r.judgements]),
        'results': [r.to_json() for r in judged],
    }
    (out / 'report.json').write_text(json.dumps(data, indent=1) + '\n')
    if png and judged:
        plot_ratios(judged, out / 'ratios.png')
        _bars(judged, out / 'bytes.png', 'Host→device KiB per step (recipe workload)', 'KiB per step', _bytes)
        _bars(
            judged,
            out / 'throughput.png',
            f'Samples/s per leg on {device} (augment workload)',
            'samples/s',
            _throughput,
        )
    return out
