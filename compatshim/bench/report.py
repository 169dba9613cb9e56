"""The regression baseline report: Markdown, the same as JSON, and three PNG charts, over every env that ran.

Charts: ``throughput.png`` (samples/s per release and leg), ``ratios.png`` (shim / unpatched per release with the
tolerance band around 1.0) and ``bytes.png`` (host→device bytes per step per leg, recipe workload).

Input: the result records written by ``compatshim bench --out`` (each with its ``comparison``). Imports nothing heavy;
matplotlib is imported only to draw the plot.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Union

from compatshim.bench import LEGS
from compatshim.bench.compare import ALPHA, RATIO_RULES, VERDICTS

__all__ = ['CHARTS', 'aggregate', 'markdown', 'plot', 'plot_bytes', 'plot_ratios', 'write']

#: The chart files :func:`write` draws.
CHARTS: tuple[str, ...] = ('throughput.png', 'ratios.png', 'bytes.png')


def _env_key(result: dict[str, Any]) -> tuple[str, Any, Any]:
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
    return {
        'schema': 1,
        'envs': [r['env'] for r in results],
        'verdict_counts': counts,
        'worst': worst,
        'results': results,
    }


def _num(value: Optional[float], fmt: str) -> str:
    return '—' if value is None else format(value, fmt)


def _ratio(result: dict[str, Any], metric: str) -> str:
    data = result['headline'].get(metric, {})
    if not data.get('n'):
        return '—'
    return f'{data["median"]:.3f} ± {data["iqr"]:.3f}'


def _verdict(result: dict[str, Any], metric: str) -> str:
    judgement = result.get('comparison', {}).get('verdicts', {}).get(metric)
    return '—' if judgement is None else judgement['verdict']


def _mib(value: Optional[int]) -> str:
    return '—' if value is None else f'{value / 2**20:.1f}'


def _kib(value: Optional[int]) -> str:
    return '—' if value is None else f'{value / 2**10:.1f}'


def _hook(result: dict[str, Any]) -> str:
    hook = result.get('hook_overhead_us') or {}
    if not hook.get('available'):
        return 'n/a'
    return ' · '.join(f'{hook[stage]["median"]:.1f} ± {hook[stage]["iqr"]:.1f}' for stage in ('batch', 'microbatch'))


def _worst_of(result: dict[str, Any], prefix: str) -> str:
    verdicts = [
        j['verdict'] for m, j in result.get('comparison', {}).get('verdicts', {}).items() if m.startswith(prefix)
    ]
    return min(verdicts, key=VERDICTS.index) if verdicts else '—'


def _recipe_lines(results: list[dict[str, Any]]) -> list[str]:
    with_recipe = [r for r in results if r.get('recipe')]
    if not with_recipe:
        return []
    out = [
        '## Recipe workload: what crosses to the device',
        '',
        'uint8 NCHW images and int64 labels from the collate; on the device: normalisation (mean/std in 0–255 units) '
        'and a batch-level crop and flip. With the shim (as on 0.24.1) 1 byte per pixel crosses; when the transform '
        'runs on the host, float32 crosses: 4 bytes per pixel. **Bytes shim / unpatched** is the headline. Where plain '
        '`device_transforms` cannot run (0.27–0.28 drop it, 0.29+ reject it), the unpatched leg is the workaround a '
        'user would write, `batch_transforms=fn` on the host, and the comparison says so.',
        '',
        '| env | plain `device_transforms`, no shim | unpatched leg | unpatched H→D KiB/step | shim H→D KiB/step '
        '| **bytes shim / unpatched** | bytes verdict | recipe samples/s shim / unpatched |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for r in with_recipe:
        recipe = r['recipe']
        legs = recipe['legs']
        unpatched = legs['unpatched']
        label = (
            'workaround: `batch_transforms` (host)'
            if unpatched['description'].startswith('batch_transforms')
            else f'`device_transforms` ({unpatched["placement"]})'
        )
        ratio = recipe['bytes_shim_vs_unpatched']
        thr = recipe.get('shim_vs_unpatched') or {}
        out.append(
            f'| {r["env"]} | {recipe["plain_device_transforms"]["words"]} | {label} '
            f'| {_kib(unpatched["h2d_bytes_per_step"])} | {_kib(legs["shim-batch"]["h2d_bytes_per_step"])} '
            f'| **{_num(ratio, ".2f")}** | {_worst_of(r, "bytes/")} '
            f'| {_num(thr.get("median"), ".3f")} ± {_num(thr.get("iqr"), ".3f")} |'
        )
    out += [
        '',
        '| env | leg | placement | crosses (bytes/step by dtype) | calls/step | samples/s (median ± IQR) '
        '| placement verdict |',
        '|---|---|---|---|---|---|---|',
    ]
    for r in with_recipe:
        for leg, data in r['recipe']['legs'].items():
            if not data['available']:
                continue
            by_dtype = ', '.join(f'{name} {n}' for name, n in data.get('h2d_bytes_by_dtype', {}).items())
            thr = data['samples_per_s']
            out.append(
                f'| {r["env"]} | {leg} | {data["placement"]} | {by_dtype} | {data["calls_per_step"]:g} '
                f'| {thr["median"]:.0f} ± {thr["iqr"]:.0f} | {_verdict(r, "recipe-placement/" + leg)} |'
            )
    return out + [
        '',
        'Recipe throughput is reported, not gated: on a CPU the move is a copy in memory, so only the '
        'bytes and the placement say what the shim changes there.',
        '',
    ]


def _drift_lines(results: list[dict[str, Any]]) -> list[str]:
    drifted = [(r['env'], r['comparison']['drift']) for r in results if r.get('comparison', {}).get('drift')]
    if not drifted:
        return []
    lines = ['## Machine drift (reported, not a regression)', '']
    for env, drift in drifted:
        legs = ', '.join(f'{leg} {change:+.1%}' for leg, change in drift['legs'].items())
        lines.append(f'- {env}: the legs that run no shim code moved {drift["change"]:+.1%} (median of {legs})')
    return lines + ['']


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: headline table per env, then one row per env × leg."""
    out = ['# compatshim regression baseline report', '']
    results = report['results']
    if not results:
        return '\n'.join(out + ['No env produced a result.', ''])
    counts = ', '.join(f'{n} {v}' for v, n in report['verdict_counts'].items())
    out += [
        f'Envs: {len(results)}. Verdicts over all metrics: {counts}. **Worst: {report["worst"]}.**',
        '',
        'Ratios are medians of per-round ratios of legs measured in the same process (± IQR): they compare across '
        'machines. Absolute samples/s compare only against a baseline with the same machine fingerprint. A change '
        'counts when it exceeds the tolerance (a floor, or a share of the per-round spread — '
        f'{RATIO_RULES["shim_vs_unpatched"][1]:g}, {RATIO_RULES["shim_microbatch_vs_unpatched"][1]:g} for stage '
        'microbatch — what two sessions of the same '
        f"code differ by) **and** a one-sided rank test of the rounds against the baseline's gives p < {ALPHA}; the "
        'spread of single rounds is not the uncertainty of their median. Shim / no transform is the cost of the '
        'transform relative to the model: it moves with the machine and is shown, not gated. '
        "**Hook overhead**: microseconds per batch that the shim's own path (hook dispatch, loop frame lookup, the "
        "move through the trainer's device, the result check) costs beyond calling the move and the transform "
        'directly, measured by a micro-benchmark (2000 calls per sample, interleaved), at stage batch · stage '
        'microbatch, median ± IQR. Only a regression fails the gate; *drift* means the legs that run no shim code '
        'moved together against their baseline (the machine changed), so absolute throughput is shown but not '
        'judged, and the ratios decide.',
        '',
        *_drift_lines(results),
        '## Headline per release',
        '',
        '| env | family | shim / unpatched | verdict | shim microbatch / unpatched | verdict '
        '| shim / no transform (not gated) | hook overhead µs/batch (batch · microbatch) | verdict '
        '| recipe bytes shim / unpatched | baseline |',
        '|---|---|---|---|---|---|---|---|---|---|---|',
    ]
    for r in results:
        baseline = r.get('comparison', {}).get('baseline') or 'none'
        bytes_ratio = (r.get('recipe') or {}).get('bytes_shim_vs_unpatched')
        out.append(
            f'| {r["env"]} | {r["family"]} | {_ratio(r, "shim_vs_unpatched")} | {_verdict(r, "shim_vs_unpatched")} '
            f'| {_ratio(r, "shim_microbatch_vs_unpatched")} | {_verdict(r, "shim_microbatch_vs_unpatched")} '
            f'| {_ratio(r, "shim_vs_no_transform")} | {_hook(r)} | {_worst_of(r, "overhead/")} '
            f'| {_num(bytes_ratio, ".2f")} | {baseline} |'
        )
    out += ['', *_recipe_lines(results)]
    out += [
        '## Per leg (augment workload)',
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
                out.append(f'| {r["env"]} | {leg} | n/a: {data["reason"]} | | | | | | | |')
                continue
            thr = data['samples_per_s']
            out.append(
                f'| {r["env"]} | {leg} | {data["placement"]} | {data["coherence"]} | {data["calls_per_step"]:g} '
                f'| {_mib(data["h2d_bytes_per_step"])} | {_mib(data["peak_device_bytes"])} '
                f'| {thr["median"]:.0f} ± {thr["iqr"]:.0f} | {_verdict(r, "placement/" + leg)} '
                f'| {_verdict(r, "throughput/" + leg)} |'
            )
    out += ['', '## Legs', '']
    described: dict[tuple[str, str], str] = {}
    for r in results:
        for leg, data in r['legs'].items():
            described.setdefault((leg, data['description']), r['env'])
    out += [f'- **{leg}**: {desc}' for leg, desc in described]
    notable = [
        (r['env'], metric, j)
        for r in results
        for metric, j in r.get('comparison', {}).get('verdicts', {}).items()
        if j['verdict'] != 'ok'
    ]
    out += ['', '## Verdicts other than ok', '']
    out += [f'- {env} `{metric}`: **{j["verdict"]}** — {j["reason"]}' for env, metric, j in notable] or ['None.']
    out += ['', '## Machine', '']
    machines: dict[str, list[str]] = {}
    for r in results:
        fp = r['fingerprint']
        machine = (
            f'{fp["cpu_model"]}, {fp["cpu_count"]} CPUs, {fp["torch_threads"]} torch thread(s), '
            f'GPU: {fp["gpu"] or "none"}, Python {fp["python"]}, workload size {fp["size"]["name"]}'
        )
        machines.setdefault(machine, []).append(f'{r["env"]} (torch {fp["torch"]})')
    for machine, envs in machines.items():
        out.append(f'- {machine}: ' + ', '.join(envs))
    loads = [r['load_average'][0] for r in results if r.get('load_average')]
    if loads:
        out.append(f'- 1-minute load average during the runs: {min(loads):.2f}–{max(loads):.2f}')
    return '\n'.join(out) + '\n'


def plot(report: dict[str, Any], path: Union[str, os.PathLike[str]]) -> None:
    """Draw throughput per release and leg (grouped bars, one panel per device) to a PNG."""
    plt = _pyplot()
    devices = sorted({r['device'] for r in report['results']})
    if not devices:
        raise ValueError('compatshim report: no results to plot')
    fig, axes = plt.subplots(
        len(devices), 1, figsize=(max(8, 1.1 * len(report['results'])), 4.5 * len(devices)), squeeze=False
    )
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
        ax.set_xticklabels([r['env'].removesuffix(f'-{device}') for r in results], rotation=30, ha='right', fontsize=8)
        ax.set_ylabel('samples/s (median, IQR bars)')
        ax.set_title(f'compatshim benchmark throughput on {device}, per Composer release and leg')
        ax.legend(fontsize=8, ncol=len(LEGS), loc='upper center', bbox_to_anchor=(0.5, -0.28))
        ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    return plt


def _label(result: dict[str, Any]) -> str:
    return str(result['env']).removesuffix(f'-{result["device"]}')


def plot_ratios(report: dict[str, Any], path: Union[str, os.PathLike[str]]) -> None:
    """shim / unpatched (and shim microbatch / unpatched) per release, median with IQR bars, over the tolerance band
    around 1.0 (each env's own tolerance where it was judged, else the floor)."""
    from compatshim.bench.compare import RATIO_FLOOR

    plt = _pyplot()
    results = report['results']
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(results)), 4.5))
    for x, r in enumerate(results):
        judged = r.get('comparison', {}).get('verdicts', {}).get('shim_vs_unpatched', {})
        tolerance = judged.get('tolerance') or RATIO_FLOOR
        ax.fill_between(
            [x - 0.4, x + 0.4],
            1 - tolerance,
            1 + tolerance,
            color='tab:green',
            alpha=0.15,
            label='tolerance band around 1.0' if x == 0 else None,
        )
    for offset, metric, name in (
        (-0.12, 'shim_vs_unpatched', 'shim (batch) / unpatched'),
        (0.12, 'shim_microbatch_vs_unpatched', 'shim (microbatch) / unpatched'),
    ):
        xs, ys, lo, hi = [], [], [], []
        for x, r in enumerate(results):
            data = r['headline'].get(metric, {})
            if data.get('n'):
                xs.append(x + offset)
                ys.append(data['median'])
                lo.append(data['median'] - data['q1'])
                hi.append(data['q3'] - data['median'])
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt='o', capsize=3, label=name)
    ax.axhline(1.0, color='grey', linewidth=0.8)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([_label(r) for r in results], rotation=30, ha='right', fontsize=8)
    ax.set_ylabel('throughput ratio (median, IQR bars)')
    ax.set_title('shim / unpatched per Composer release (augment workload; above 1: the shim is faster)')
    ax.legend(fontsize=8)
    ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bytes(report: dict[str, Any], path: Union[str, os.PathLike[str]]) -> None:
    """Host→device KiB per step per leg and release, recipe workload (the unpatched leg hatched where it is the
    ``batch_transforms`` workaround)."""
    plt = _pyplot()
    results = [r for r in report['results'] if r.get('recipe')]
    legs = [leg for leg in LEGS if any(r['recipe']['legs'].get(leg, {}).get('available') for r in results)]
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(results)), 4.5))
    width = 0.8 / max(1, len(legs))
    labelled: set[str] = set()
    for i, leg in enumerate(legs):
        for x, r in enumerate(results):
            data = r['recipe']['legs'].get(leg, {})
            if not data.get('available'):
                continue
            workaround = leg == 'unpatched' and data['description'].startswith('batch_transforms')
            name = 'unpatched: batch_transforms workaround' if workaround else leg
            ax.bar(
                x + (i - (len(legs) - 1) / 2) * width,
                data['h2d_bytes_per_step'] / 2**10,
                width,
                color=f'C{i}',
                hatch='//' if workaround else None,
                edgecolor='white' if workaround else None,
                label=None if name in labelled else name,
            )
            labelled.add(name)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([_label(r) for r in results], rotation=30, ha='right', fontsize=8)
    ax.set_ylabel('host→device KiB per step')
    ax.set_title('Bytes moved to the device per step (recipe workload)')
    ax.legend(fontsize=8, ncol=3, loc='upper center', bbox_to_anchor=(0.5, -0.38))
    ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: list[dict[str, Any]], out_dir: Union[str, os.PathLike[str]], png: bool = True) -> dict[str, Any]:
    """Write ``report.md``, ``report.json`` and (if ``png``) the :data:`CHARTS` into ``out_dir``; return the report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = aggregate(results)
    (out / 'report.md').write_text(markdown(report))
    (out / 'report.json').write_text(json.dumps(report, indent=1) + '\n')
    if png and results:
        plot(report, out / 'throughput.png')
        plot_ratios(report, out / 'ratios.png')
        if any(r.get('recipe') for r in results):
            plot_bytes(report, out / 'bytes.png')
    return report
