"""The regression baseline report: one Markdown table, the same as JSON, and a PNG plot, over every env that ran.

Input: the result records written by ``compatshim bench --out`` (each with its ``comparison``). Imports nothing heavy;
matplotlib is imported only to draw the plot.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from compatshim.bench.compare import VERDICTS
from compatshim.bench import LEGS

__all__ = ['aggregate', 'markdown', 'plot', 'write']


def _env_key(result: dict[str, Any]) -> tuple:
    from packaging.version import Version

    return (result['device'], Version(result['composer']), Version(result['torch'].split('+')[0]))


def aggregate(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Order the results (device, Composer, torch) and count the verdicts. The report JSON is this dict."""
    results = sorted(results, key=_env_key)
    counts = {v: 0 for v in VERDICTS}
    for result in results:
        for judgement in result.get('comparison', {}).get('verdicts', {}).values():
            counts[judgement['verdict']] += 1
    worst = next((v for v in VERDICTS if counts[v]), 'inconclusive')
    return {'schema': 1, 'envs': [r['env'] for r in results], 'verdict_counts': counts, 'worst': worst,
            'results': results}


def _num(value: Optional[float], fmt: str) -> str:
    return '—' if value is None else format(value, fmt)


def _ratio(result: dict[str, Any], metric: str) -> str:
    data = result['headline'].get(metric, {})
    if not data.get('n'):
        return '—'
    return f"{data['median']:.3f} ± {data['iqr']:.3f}"


def _verdict(result: dict[str, Any], metric: str) -> str:
    judgement = result.get('comparison', {}).get('verdicts', {}).get(metric)
    return '—' if judgement is None else judgement['verdict']


def _mib(value: Optional[int]) -> str:
    return '—' if value is None else f'{value / 2**20:.1f}'


def _drift_lines(results: list[dict[str, Any]]) -> list[str]:
    drifted = [(r['env'], r['comparison']['drift']) for r in results if r.get('comparison', {}).get('drift')]
    if not drifted:
        return []
    lines = ['## Machine drift (reported, not a regression)', '']
    for env, drift in drifted:
        legs = ', '.join(f'{leg} {change:+.1%}' for leg, change in drift['legs'].items())
        lines.append(f"- {env}: the legs that run no shim code moved {drift['change']:+.1%} (median of {legs})")
    return lines + ['']


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: headline table per env, then one row per env × leg."""
    out = ['# compatshim regression baseline report', '']
    results = report['results']
    if not results:
        return '\n'.join(out + ['No env produced a result.', ''])
    counts = ', '.join(f'{n} {v}' for v, n in report['verdict_counts'].items())
    out += [
        f"Envs: {len(results)}. Verdicts over all metrics: {counts}. **Worst: {report['worst']}.**",
        '',
        'Ratios are medians of per-round ratios of legs measured in the same process (± IQR): they compare across '
        'machines. Absolute samples/s compare only against a baseline with the same machine fingerprint. '
        'Overhead: µs per batch the shim spends beyond calling the transform directly on a batch already on the '
        'device (the unpatched leg\'s figure, same measure, in brackets). Only a regression fails the gate; '
        '*drift* means the legs that run no shim code moved together against their baseline (the machine changed), '
        'so absolute throughput is shown but not judged, and the ratios decide.',
        '',
        *_drift_lines(results),
        '## Headline per release',
        '',
        '| env | family | shim / unpatched | verdict | shim microbatch / unpatched | shim / no transform | verdict '
        '| shim overhead µs/batch | baseline |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    for r in results:
        overhead = r['headline']['overhead_us']
        reference = r['headline'].get('unpatched_overhead_us', {})
        baseline = r.get('comparison', {}).get('baseline') or 'none'
        out.append(
            f"| {r['env']} | {r['family']} | {_ratio(r, 'shim_vs_unpatched')} | {_verdict(r, 'shim_vs_unpatched')} "
            f"| {_ratio(r, 'shim_microbatch_vs_unpatched')} | {_ratio(r, 'shim_vs_no_transform')} "
            f"| {_verdict(r, 'shim_vs_no_transform')} "
            f"| {_num(overhead.get('median'), '.0f')} ({_num(reference.get('median'), '.0f')}) | {baseline} |")
    out += [
        '',
        '## Per leg',
        '',
        '| env | leg | placement | coherence | calls/step | H→D MiB/step | peak device MiB | samples/s (median ± IQR) '
        '| placement verdict | throughput verdict |',
        '|---|---|---|---|---|---|---|---|---|---|',
    ]
    for r in results:
        for leg in LEGS:
            data = r['legs'].get(leg)
            if data is None:
                continue
            if not data['available']:
                out.append(f"| {r['env']} | {leg} | n/a: {data['reason']} | | | | | | | |")
                continue
            thr = data['samples_per_s']
            out.append(
                f"| {r['env']} | {leg} | {data['placement']} | {data['coherence']} | {data['calls_per_step']:g} "
                f"| {_mib(data['h2d_bytes_per_step'])} | {_mib(data['peak_device_bytes'])} "
                f"| {thr['median']:.0f} ± {thr['iqr']:.0f} | {_verdict(r, 'placement/' + leg)} "
                f"| {_verdict(r, 'throughput/' + leg)} |")
    out += ['', '## Legs', '']
    described = {}
    for r in results:
        for leg, data in r['legs'].items():
            described.setdefault((leg, data['description']), r['env'])
    out += [f'- **{leg}**: {desc}' for leg, desc in described]
    notable = [(r['env'], metric, j) for r in results
               for metric, j in r.get('comparison', {}).get('verdicts', {}).items() if j['verdict'] != 'ok']
    out += ['', '## Verdicts other than ok', '']
    out += [f"- {env} `{metric}`: **{j['verdict']}** — {j['reason']}" for env, metric, j in notable] or ['None.']
    out += ['', '## Machine', '']
    machines: dict[str, list[str]] = {}
    for r in results:
        fp = r['fingerprint']
        machine = (f"{fp['cpu_model']}, {fp['cpu_count']} CPUs, {fp['torch_threads']} torch thread(s), "
                   f"GPU: {fp['gpu'] or 'none'}, Python {fp['python']}, workload size {fp['size']['name']}")
        machines.setdefault(machine, []).append(f"{r['env']} (torch {fp['torch']})")
    for machine, envs in machines.items():
        out.append(f'- {machine}: ' + ', '.join(envs))
    loads = [r['load_average'][0] for r in results if r.get('load_average')]
    if loads:
        out.append(f'- 1-minute load average during the runs: {min(loads):.2f}–{max(loads):.2f}')
    return '\n'.join(out) + '\n'


def plot(report: dict[str, Any], path: os.PathLike) -> None:
    """Draw throughput per release and leg (grouped bars, one panel per device) to a PNG."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    devices = sorted({r['device'] for r in report['results']})
    if not devices:
        raise ValueError('compatshim report: no results to plot')
    fig, axes = plt.subplots(len(devices), 1, figsize=(max(8, 1.1 * len(report['results'])), 4.5 * len(devices)),
                             squeeze=False)
    width = 0.8 / len(LEGS)
    for ax, device in zip(axes[:, 0], devices):
        results = [r for r in report['results'] if r['device'] == device]
        for i, leg in enumerate(LEGS):
            xs, ys, errs = [], [], []
            for x, r in enumerate(results):
                data = r['legs'].get(leg, {})
                if data.get('available'):
                    xs.append(x + (i - (len(LEGS) - 1) / 2) * width)
                    ys.append(data['samples_per_s']['median'])
                    errs.append(data['samples_per_s']['iqr'] / 2)
            ax.bar(xs, ys, width, yerr=errs, label=leg, capsize=2)
        ax.set_xticks(range(len(results)))
        ax.set_xticklabels([r['env'].removesuffix(f'-{device}') for r in results], rotation=30, ha='right',
                           fontsize=8)
        ax.set_ylabel('samples/s (median, IQR bars)')
        ax.set_title(f'compatshim benchmark throughput on {device}, per Composer release and leg')
        ax.legend(fontsize=8, ncol=len(LEGS), loc='upper center', bbox_to_anchor=(0.5, -0.28))
        ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: list[dict[str, Any]], out_dir: os.PathLike, png: bool = True) -> dict[str, Any]:
    """Write ``report.md``, ``report.json`` and (if ``png``) ``throughput.png`` into ``out_dir``; return the report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = aggregate(results)
    (out / 'report.md').write_text(markdown(report))
    (out / 'report.json').write_text(json.dumps(report, indent=1) + '\n')
    if png and results:
        plot(report, out / 'throughput.png')
    return report
