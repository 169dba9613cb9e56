"""The regression baseline report: judged results rendered as Markdown, the same as JSON, and three PNG charts.

Input: :class:`~compatshim.bench.report.Judged` results (a bench result, its baseline and the judge's outcomes).
Output, per device: ``report.md``, ``report.json`` (raw samples and outcomes; ``compatshim report`` reads it back to
judge it again), ``ratios.png`` (the gated ratios per release, with the minimum-effect band around the baseline),
``bytes.png`` (host→device bytes per step per leg, recipe workload) and ``throughput.png`` (samples/s per leg).
Imports nothing heavy; matplotlib only to draw.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Optional

from compatshim._support import split_env
from compatshim.bench import judge as judging
from compatshim.bench.metrics import LEGS, METRICS, MONITOR_RATIO, MONITOR_US, Metric
from compatshim.bench.results import SCHEMA, BenchResult, PathLike, quartiles

__all__ = ['CHARTS', 'MONITOR_LIMIT', 'Judged', 'markdown', 'monitor_share', 'write']

#: The chart files :func:`write` draws.
CHARTS: tuple[str, ...] = ('ratios.png', 'bytes.png', 'throughput.png')


@dataclasses.dataclass
class Judged:
    """One env's result, the baseline it was judged against (its path, or ``None``), and the outcomes."""

    result: BenchResult
    baseline: Optional[BenchResult]
    baseline_path: Optional[str]
    judgements: list[judging.Judgement]

    @property
    def worst(self) -> str:
        return judging.worst(self.judgements)

    def outcome(self, metric: str) -> str:
        return next((j.outcome for j in self.judgements if j.metric == metric), '—')

    def machine_change(self) -> Optional[float]:
        """How much faster the unpatched leg ran than in the baseline, same machine only (reported, never judged)."""
        base = self.baseline
        if base is None or any(self.result.fingerprint.get(k) != base.fingerprint.get(k) for k in judging.MATCH_KEYS):
            return None
        now, then = self.result.legs['unpatched'].samples_per_s, base.legs['unpatched'].samples_per_s
        return statistics.median(now) / statistics.median(then) - 1 if now and then else None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.result.to_json(),
            'baseline': self.baseline_path,
            'judgements': [dataclasses.asdict(j) for j in self.judgements],
        }


#: What the monitor may cost at most, as a share of a step of the augment workload (README, "See it in your run").
MONITOR_LIMIT = 0.01


def monitor_share(result: BenchResult) -> Optional[float]:
    """The monitor's µs per batch as a share of the median step of the leg it rides on (``None``: not measured)."""
    leg, us = result.legs.get(MONITOR_RATIO.source[1]), MONITOR_US.samples(result)
    if not us or leg is None or not leg.samples_per_s:
        return None
    step_s = float(result.fingerprint['size']['batch']) / statistics.median(leg.samples_per_s)
    return statistics.median(us) * 1e-6 / step_s


def _value(metric: Metric, samples: list[float]) -> str:
    if metric.kind == 'bytes':
        return f'{samples[0] / 1024:.1f} KiB' if samples else '—'
    return _spread(samples, '.1f' if metric.kind == 'us' else '.3f')


def _spread(samples: list[float], fmt: str = '.3f') -> str:
    if not samples:
        return '—'
    q1, median, q3 = quartiles(samples)
    return f'{median:{fmt}} ± {q3 - q1:{fmt}}'


def _pct(value: Optional[float]) -> str:
    return '—' if value is None else f'{value:+.1%}'


def _rule() -> list[str]:
    """The rule, quoted from :mod:`compatshim.bench.judge` (written once, there)."""
    doc = judging.__doc__ or ''
    return [line.strip() for line in doc.splitlines() if line.startswith('    ')]


def markdown(judged: list[Judged], device: str) -> str:
    """The report of one device as Markdown."""
    counts = {o: sum(j.outcome == o for r in judged for j in r.judgements) for o in judging.OUTCOMES}
    worst = judging.worst([j for r in judged for j in r.judgements])
    out = [f'# compatshim regression baseline report ({device})', '']
    if not judged:
        return '\n'.join(out + ['No env produced a result.', ''])
    out += [
        f'Envs: {len(judged)}. Outcomes over all gated metrics: '
        + ', '.join(f'{n} {o}' for o, n in counts.items())
        + f'. **Worst: {worst}.**',
        '',
        '**The rule** (`compatshim/bench/judge.py`): ' + ' '.join(_rule()),
        '',
        'Ratios are medians of per-round ratios of two legs measured in the same process (± IQR). *Machine* is the '
        "unpatched leg's samples/s against its baseline on the same machine: reported, never judged.",
        '',
        '## Headline per release',
        '',
        'Each metric of the registry (`compatshim/bench/metrics.py`): its median (± IQR) and its outcome (— where '
        'it is not gated on that release or device).',
        '',
        '| env | family | ' + ' | '.join(m.title for m in METRICS) + ' | recipe bytes shim / unpatched | machine |',
        '|' + '---|' * (len(METRICS) + 4),
    ]
    for r in judged:
        res = r.result
        bytes_ratio = res.recipe.bytes_shim_vs_unpatched
        planted = (f' (PLANTED: transform {res.planted_slowdown:.0%} slower)' if res.planted_slowdown else '') + (
            f' (PLANTED: +{res.planted_hook_us:g} µs per hook call)' if res.planted_hook_us else ''
        )
        cells = [f'{_value(m, m.samples(res))} · {r.outcome(m.id)}' for m in METRICS]
        out.append(
            f'| {res.env}{planted} | {res.family} | '
            + ' | '.join(cells)
            + f' | {"—" if bytes_ratio is None else f"{bytes_ratio:.2f}"} | {_pct(r.machine_change())} |'
        )
    out += [
        '',
        '## The in-run monitor: what it costs',
        '',
        "`TransformMonitor` (`compatshim.monitor`) on a real Trainer's state: every event of one train step, the "
        'transform through its tap and the move through its byte counter, against the two alone (µs per batch; '
        f'gated like the hook overhead). *Share of a step* is that against the median step of the shim-batch leg: the '
        f'limit is {MONITOR_LIMIT:.0%}. The leg ratio times whole windows with and without the monitor (reported).',
        '',
        '| env | monitor µs/batch | | share of a step | shim-batch+monitor / shim-batch (reported) |',
        '|---|---|---|---|---|',
    ]
    for r in judged:
        share = monitor_share(r.result)
        out.append(
            f'| {r.result.env} | {_spread(MONITOR_US.samples(r.result), ".1f")} | {r.outcome(MONITOR_US.id)} '
            f'| {"—" if share is None else f"{share:.2%}" + (" (over the limit)" if share > MONITOR_LIMIT else "")} '
            f'| {_spread(MONITOR_RATIO.samples(r.result))} |'
        )
    out += [
        '',
        '## Recipe workload: what crosses to the device',
        '',
        'uint8 NCHW images from the collate; on the device: normalisation (mean/std in 0–255 units) and a batch-level '
        'crop and flip. With the shim (as on 0.24.1) 1 byte per pixel crosses; when the transform runs on the host, '
        'float32: 4 bytes per pixel. Where plain `device_transforms` cannot run (0.27–0.28 drop it, 0.29+ reject it), '
        'the unpatched leg is the workaround a user would write, `batch_transforms=fn` on the host.',
        '',
        '| env | plain `device_transforms`, no shim | unpatched leg | unpatched KiB/step | shim KiB/step |',
        '|---|---|---|---|---|',
    ]
    for r in judged:
        unpatched, shim = r.result.recipe.legs['unpatched'], r.result.recipe.legs['shim-batch']
        out.append(
            f'| {r.result.env} | {r.result.recipe.plain["words"]} | {unpatched.description} '
            f'| {unpatched.h2d_bytes_per_step / 1024:.1f} | {shim.h2d_bytes_per_step / 1024:.1f} |'
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
                f'| {r.result.env} | {name} | {leg.placement} | {leg.coherence} | {leg.calls_per_step:g} '
                f'| {leg.h2d_bytes_per_step / 2**20:.1f} | {_spread(leg.samples_per_s, ".0f")} |'
            )
    notable = [j.line(r.result.env) for r in judged for j in r.judgements if j.outcome != 'ok']
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
    found = result.recipe.legs.get(leg)
    return (found.h2d_bytes_per_step / 1024, 0.0) if found is not None and found.available else None


def plot_ratios(judged: list[Judged], path: Path) -> None:
    """The gated ratios per release (median, IQR bars), each over its baseline's band of ± the minimum effect."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(judged)), 4.5))
    gated = [m.id for m in METRICS if m.kind == 'ratio' and m.gated != 'never']
    for index, metric in enumerate(gated):
        offset = 0.24 * (index - (len(gated) - 1) / 2)
        xs, ys, lo, hi = [], [], [], []
        for x, r in enumerate(judged):
            samples = r.result.ratios.get(metric)
            if not samples:
                continue
            q1, median, q3 = quartiles(samples)
            xs.append(x + offset)
            ys.append(median)
            lo.append(median - q1)
            hi.append(q3 - median)
            before = r.baseline.ratios.get(metric) if r.baseline else None
            if before and r.result.affected:
                centre = statistics.median(before)
                band = (centre * (1 - judging.MIN_EFFECT), centre * (1 + judging.MIN_EFFECT))
                ax.fill_between([x + offset - 0.1, x + offset + 0.1], *band, color='tab:green', alpha=0.15)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt='o', capsize=3, label=metric)
    ax.axhline(1.0, color='grey', linewidth=0.8)
    ax.set_xticks(range(len(judged)))
    ax.set_xticklabels([split_env(r.result.env)[0] for r in judged], rotation=30, ha='right', fontsize=8)
    ax.set_ylabel('throughput ratio (median, IQR bars)')
    ax.set_title(f'Gated same-run ratios per release; green: baseline ± {judging.MIN_EFFECT:.0%}')
    ax.legend(fontsize=8)
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
        'worst': judging.worst([j for r in judged for j in r.judgements]),
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
