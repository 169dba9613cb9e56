"""Baselines and the noise-aware comparison rule. Imports nothing heavy (no torch), so reports build anywhere.

**The rule**, per metric (every metric here is "higher is better"), from the raw window samples of the current run
``c`` and of the baseline ``b``:

1. *inconclusive* when there is no baseline, when the metric is an absolute throughput and the machine fingerprints
   differ (ratios are compared on any machine: both legs of a ratio ran in the same process), when either side has
   fewer than :data:`MIN_WINDOWS` windows, or when either side's relative spread (IQR / median) exceeds
   :data:`MAX_SPREAD` (too noisy to judge).
2. The tolerance is ``max(floor, share × the larger relative spread)``, per metric (:data:`RATIO_RULES`;
   :data:`ABSOLUTE_FLOOR` and :data:`NOISE_SHARE` for absolute throughput): the same code measured in two sessions of
   a noisy machine moves by a share of its per-window spread (measured: unchanged checkouts, per-round ratios with
   3–37% spread, medians up to 0.36× the spread apart for shim/unpatched, 0.52× for shim-microbatch/unpatched).
3. A change of the median beyond the tolerance counts only when the samples say so: a one-sided Mann–Whitney rank
   test (:func:`rank_test`) of ``c`` against ``b`` must give ``p <`` :data:`ALPHA`. The spread of the samples is *not*
   the uncertainty of the median: 40 rounds with a 25% spread still resolve a 10% shift. *regression* when the median
   fell beyond the tolerance and the test is significant; *improved* (the baseline is stale: re-record it) in the
   mirror case; a shift beyond the tolerance that the test does not support is *inconclusive*; anything else is *ok*.

A wrong placement or coherence in a shim leg is a regression whatever the timings say, in either workload.

**The shim's own cost** (``overhead/<stage>``: µs per batch of its hook path beyond the direct path, from
:mod:`compatshim.bench.overhead`; lower is better) is judged in microseconds: *regression* when the median rose by more
than ``max(`` :data:`OVERHEAD_FLOOR_US` ``, SPREAD_FACTOR × the larger IQR, half the baseline median)`` and the
current lower quartile is above the baseline's upper quartile; *inconclusive* when either IQR exceeds twice the floor
(too noisy to resolve it); only against a baseline with the same machine fingerprint (microseconds are a property of
the CPU).

**Bytes moved** (``bytes/<leg>``, recipe workload: host→device bytes per step of the shim legs) are deterministic:
*regression* when they grew by more than :data:`BYTES_SLACK` (same workload size only).

**Machine drift is not a regression.** The gate fails only on what the shim can cause. The ratios of the shim legs
to the unpatched leg in the same run (:data:`GATED_RATIOS`) are gated on any machine. Absolute throughput is judged
by the rule above, and then:

- the legs that run no shim code (:data:`NO_SHIM_LEGS`) are never a regression: nothing the shim does can slow them;
- when they moved together — each no-shim leg that could be judged (not too noisy) moved the same way by more than
  half of :data:`ABSOLUTE_FLOOR`, and their median by more than it — the machine drifted (a slower or busier host,
  another CPU): every absolute throughput verdict beyond its tolerance becomes *drift*, with the evidence (each no-shim
  leg's change), and the ratios decide;
- without drift, a shim leg's absolute throughput is a regression (or an improvement) only where its ratio to the
  unpatched leg (:data:`LEG_RATIOS`) is one too: moving in absolute terms alone is the machine (on unchanged code a
  shim leg measured −6.6%, another +18.1%, both at p < 0.001, their ratios within tolerance): *inconclusive*, with
  the ratio as the reason. A no-shim leg moving alone is likewise *inconclusive*.

*drift* is reported, never failed on (exit 0).

**On an unaffected release** (0.24.1) ``enable()`` patches nothing, so the shim legs run exactly the unpatched code:
their ratios are an A/A comparison and a shift is noise, reported as *inconclusive*, never a regression. What the shim
could do wrong there — patch something — is gated instead (``patches/unaffected``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any, Optional, Union

__all__ = [
    'ABSOLUTE_FLOOR',
    'ALPHA',
    'BYTES_SLACK',
    'BaselineExistsError',
    'GATED_RATIOS',
    'LEG_RATIOS',
    'MAX_SPREAD',
    'MIN_WINDOWS',
    'NOISE_SHARE',
    'NO_SHIM_LEGS',
    'OVERHEAD_FLOOR_US',
    'RATIO_FLOOR',
    'RATIO_RULES',
    'SPREAD_FACTOR',
    'VERDICTS',
    'Judgement',
    'baseline_path',
    'compare',
    'judge',
    'judge_bytes',
    'judge_overhead',
    'load_baseline',
    'quartiles',
    'rank_test',
    'record_baseline',
]

#: The verdicts, worst first. Only ``regression`` fails the gate.
VERDICTS: tuple[str, ...] = ('regression', 'inconclusive', 'drift', 'improved', 'ok')

#: Legs that run no shim code: their absolute throughput measures the machine, never the shim.
NO_SHIM_LEGS: tuple[str, ...] = ('unpatched', 'native-microbatch', 'no-transform')

#: The share of the larger per-window spread that two sessions of the same code may differ by (absolute throughput,
#: shim/unpatched; see :data:`RATIO_RULES`).
NOISE_SHARE = 0.5
#: The rule's two constants per gated ratio: ``(floor, share)``, tolerance ``max(floor, share × spread)``. Stage
#: microbatch runs the transform on two half batches while the unpatched leg runs it on one whole batch: different
#: work, so that ratio moves with the machine (cache, clocks) more than shim/unpatched does. Measured on unchanged
#: code, four full-matrix sessions against their baselines: shim/unpatched moved at most 0.36× its per-round spread
#: (+6.4% at 17.7%); shim-microbatch/unpatched up to 0.52× (+9.8% at 18.7%, p=0.002; -14.4% at 33.6%, p=0.002) and
#: -4.2% at a 6.3% spread (p < 0.001).
RATIO_RULES: dict[str, tuple[float, float]] = {
    'shim_vs_unpatched': (0.03, NOISE_SHARE),
    'shim_microbatch_vs_unpatched': (0.07, 0.75),
}
RATIO_FLOOR = RATIO_RULES['shim_vs_unpatched'][0]
ABSOLUTE_FLOOR = 0.05
#: Overhead tolerance: this many IQRs (µs per batch; see :func:`judge_overhead`).
SPREAD_FACTOR = 2.0
MAX_SPREAD = 0.5
MIN_WINDOWS = 3
#: Significance level of the one-sided rank test behind a regression or an improvement.
ALPHA = 0.01
#: The smallest change of the hook overhead, in µs per batch, that can be a regression.
OVERHEAD_FLOOR_US = 20.0
#: Bytes per step may grow by this fraction (plus 1 KiB of Composer's own scalars) before it is a regression.
BYTES_SLACK = 0.01

#: Headline ratios (each the median of per-round ratios of two legs in one process).
RATIO_METRICS: tuple[str, ...] = ('shim_vs_unpatched', 'shim_microbatch_vs_unpatched', 'shim_vs_no_transform')
#: The ratios gated (on any machine). ``shim_vs_no_transform`` is reported, not gated: it is the transform's cost
#: relative to the model, which moves with the machine (+18…+38% between sessions of unchanged code, measured), and a
#: slower shim shows in ``shim_vs_unpatched`` anyway.
GATED_RATIOS: tuple[str, ...] = tuple(RATIO_RULES)
#: The gated ratio that isolates each shim leg's throughput.
LEG_RATIOS: dict[str, str] = {'shim-batch': 'shim_vs_unpatched', 'shim-microbatch': 'shim_microbatch_vs_unpatched'}

#: Fingerprint keys that must match for absolute throughput to be compared.
MATCH_KEYS: tuple[str, ...] = (
    'cpu_model',
    'cpu_count',
    'torch_threads',
    'gpu',
    'python',
    'torch',
    'composer',
    'device',
    'size',
)


class BaselineExistsError(FileExistsError):
    """Recording would overwrite a baseline; pass ``replace=True`` (``--replace``) to do that on purpose."""


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The verdict on one metric, with the numbers behind it."""

    verdict: str
    reason: str
    current: Optional[float] = None
    baseline: Optional[float] = None
    change: Optional[float] = None
    tolerance: Optional[float] = None


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median and upper quartile of a non-empty sample (inclusive method)."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q1, _, q3 = statistics.quantiles(samples, n=4, method='inclusive')
    return q1, statistics.median(samples), q3


def _spread(q1: float, median: float, q3: float) -> float:
    return (q3 - q1) / abs(median) if median else float('inf')


Quartiles = tuple[float, float, float]


def _sides(
    current: list[float], baseline: Optional[list[float]], what: str
) -> Union[Judgement, tuple[Quartiles, Quartiles]]:
    """The quartiles of both sides, or the *inconclusive* judgement when they cannot be compared at all."""
    if not current:
        return Judgement('inconclusive', 'no samples in this run')
    now = quartiles(current)
    if not baseline:
        return Judgement('inconclusive', 'no baseline', current=now[1])
    then = quartiles(baseline)
    if min(len(current), len(baseline)) < MIN_WINDOWS:
        return Judgement('inconclusive', f'fewer than {MIN_WINDOWS} {what}', current=now[1], baseline=then[1])
    return now, then


def rank_test(lower: list[float], higher: list[float]) -> float:
    """One-sided Mann–Whitney U test: the p-value for "``lower`` tends to be smaller than ``higher``".

    Normal approximation with the tie correction and a continuity correction (conservative for small samples: with 3
    windows a side it can never reach :data:`ALPHA`, so a 3-window run is never a regression by itself).
    """
    n1, n2 = len(lower), len(higher)
    pooled = sorted([(value, 0) for value in lower] + [(value, 1) for value in higher])
    rank_sum, ties, i = 0.0, 0.0, 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # mid-rank of a tie group
        rank_sum += rank * sum(1 for _, side in pooled[i : j + 1] if side == 0)
        ties += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    n = n1 + n2
    u = rank_sum - n1 * (n1 + 1) / 2  # small when ``lower`` ranks low
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0  # every value equal: no evidence either way
    z = (u - n1 * n2 / 2 + 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(-z / math.sqrt(2))


def judge(current: list[float], baseline: Optional[list[float]], floor: float, share: float = NOISE_SHARE) -> Judgement:
    """Apply the rule (module docstring) to one metric's window samples.

    Args:
        current: This run's samples (one per window or per round).
        baseline: The baseline's samples, or ``None`` when there is none.
        floor: The smallest tolerance (relative change of the median).
        share: The tolerance is at least this share of the larger relative spread of the two sides.
    """
    sides = _sides(current, baseline, 'windows')
    if isinstance(sides, Judgement):
        return sides
    (c_q1, now, c_q3), (b_q1, then, b_q3) = sides
    spread = max(_spread(c_q1, now, c_q3), _spread(b_q1, then, b_q3))
    change = now / then - 1 if then else float('inf')
    if spread > MAX_SPREAD:
        return Judgement('inconclusive', f'too noisy: spread {spread:.1%} > {MAX_SPREAD:.0%}', now, then, change)
    tolerance = max(floor, share * spread)
    if abs(change) <= tolerance:
        return Judgement('ok', f'{change:+.1%} within ±{tolerance:.1%}', now, then, change, tolerance)
    fell = change < 0
    base = baseline or []  # not empty: _sides returned the quartiles of both
    p = rank_test(current, base) if fell else rank_test(base, current)
    beyond = f'{change:+.1%} beyond ±{tolerance:.1%}'
    if p >= ALPHA:
        reason = f'{beyond}, but the samples do not support it (rank test p={p:.2g})'
        return Judgement('inconclusive', reason, now, then, change, tolerance)
    if fell:
        return Judgement('regression', f'{beyond} (rank test p={p:.1g})', now, then, change, tolerance)
    return Judgement(
        'improved', f'{beyond} (rank test p={p:.1g}): re-record the baseline', now, then, change, tolerance
    )


def judge_overhead(current: list[float], baseline: Optional[list[float]]) -> Judgement:
    """The rule for the hook overhead (µs per batch, lower is better; module docstring)."""
    sides = _sides(current, baseline, 'samples')
    if isinstance(sides, Judgement):
        return sides
    (c_q1, now, c_q3), (b_q1, then, b_q3) = sides
    iqr = max(c_q3 - c_q1, b_q3 - b_q1)
    change = now - then
    if iqr > 2 * OVERHEAD_FLOOR_US:
        return Judgement(
            'inconclusive', f'too noisy: IQR {iqr:.1f} µs > {2 * OVERHEAD_FLOOR_US:.0f} µs', now, then, change
        )
    tolerance = max(OVERHEAD_FLOOR_US, SPREAD_FACTOR * iqr, 0.5 * abs(then))
    if change > tolerance:
        if c_q1 > b_q3:
            return Judgement(
                'regression', f'{change:+.1f} µs/batch beyond ±{tolerance:.1f} µs', now, then, change, tolerance
            )
        return Judgement(
            'inconclusive', f'{change:+.1f} µs/batch but the distributions overlap', now, then, change, tolerance
        )
    if change < -tolerance:
        if c_q3 < b_q1:
            return Judgement(
                'improved',
                f'{change:+.1f} µs/batch beyond ±{tolerance:.1f} µs: re-record the baseline',
                now,
                then,
                change,
                tolerance,
            )
        return Judgement(
            'inconclusive', f'{change:+.1f} µs/batch but the distributions overlap', now, then, change, tolerance
        )
    return Judgement('ok', f'{change:+.1f} µs/batch within ±{tolerance:.1f} µs', now, then, change, tolerance)


def judge_bytes(current: int, baseline: Optional[int]) -> Judgement:
    """Host→device bytes per step of a shim leg against the baseline's (deterministic: no noise rule)."""
    if baseline is None:
        return Judgement('inconclusive', 'no baseline', current=current)
    change = current / baseline - 1 if baseline else float('inf')
    if current > baseline * (1 + BYTES_SLACK) + 1024:
        return Judgement(
            'regression',
            f'{current} bytes/step, baseline {baseline} ({change:+.1%})',
            current,
            baseline,
            change,
            BYTES_SLACK,
        )
    return Judgement('ok', f'{current} bytes/step (baseline {baseline})', current, baseline, change, BYTES_SLACK)


def _fingerprint_mismatch(current: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    return [key for key in MATCH_KEYS if current.get(key) != baseline.get(key)]


def _expected(legs: dict[str, Any], leg: str) -> Optional[str]:
    """What must hold for a shim leg, or ``None`` if the leg is fine."""
    data = legs.get(leg, {})
    if not data.get('available'):
        return None
    if data['placement'] != 'device':
        return f'placement is {data["placement"]!r}, expected the device'
    if leg == 'shim-batch' and data['coherence'] != 'coherent':
        return f'coherence is {data["coherence"]!r}, expected one call per step'
    return None


def compare(result: dict[str, Any], baseline: Optional[dict[str, Any]]) -> dict[str, Any]:
    """Judge every metric of a bench result against a baseline (``None``: everything is inconclusive).

    Returns:
        ``{'verdicts': {metric: Judgement as dict}, 'worst': verdict, 'fingerprint_mismatch': [keys], 'drift': ...}``.
        Metrics: ``placement/<leg>`` and ``recipe-placement/<leg>`` for the shim legs, the :data:`GATED_RATIOS`,
        ``throughput/<leg>`` for every leg, ``overhead/<stage>`` and ``bytes/<leg>`` where the shim installs hooks.
    """
    verdicts: dict[str, Judgement] = {}
    recipe = result.get('recipe') or {}
    for prefix, legs in (('placement', result['legs']), ('recipe-placement', recipe.get('legs', {}))):
        for leg in ('shim-batch', 'shim-microbatch'):
            if legs.get(leg, {}).get('available'):
                problem = _expected(legs, leg)
                verdicts[f'{prefix}/{leg}'] = (
                    Judgement('regression', problem) if problem else Judgement('ok', 'on device')
                )
    unaffected = result.get('family') == 'unaffected'
    if unaffected and 'patched_by_enable' in result:
        patched = result['patched_by_enable']
        verdicts['patches/unaffected'] = (
            Judgement('regression', f'enable() patched {", ".join(patched)} on an unaffected release')
            if patched
            else Judgement('ok', 'nothing patched')
        )
    mismatch = _fingerprint_mismatch(result['fingerprint'], baseline['fingerprint']) if baseline else []
    same_size = baseline is not None and result['fingerprint'].get('size') == baseline['fingerprint'].get('size')
    base_recipe = (baseline or {}).get('recipe') or {}
    for leg in ('shim-batch', 'shim-microbatch'):
        data = recipe.get('legs', {}).get(leg, {})
        if data.get('available'):
            base_bytes = base_recipe.get('legs', {}).get(leg, {}).get('h2d_bytes_per_step') if same_size else None
            verdicts[f'bytes/{leg}'] = judge_bytes(data['h2d_bytes_per_step'], base_bytes)
    hook = result.get('hook_overhead_us') or {}
    base_hook = (baseline or {}).get('hook_overhead_us') or {}
    for stage in ('batch', 'microbatch'):
        if hook.get('available'):
            if baseline and mismatch:
                verdicts[f'overhead/{stage}'] = Judgement(
                    'inconclusive',
                    f'different machine fingerprint ({", ".join(mismatch)})',
                    current=hook[stage]['median'],
                )
            else:
                verdicts[f'overhead/{stage}'] = judge_overhead(
                    hook[stage]['samples'], base_hook.get(stage, {}).get('samples')
                )
    for metric in GATED_RATIOS:
        samples = result['headline'][metric]['windows']
        if not samples:
            continue
        base = baseline['headline'].get(metric, {}).get('windows') if baseline else None
        judged = judge(samples, base, *RATIO_RULES[metric])
        if unaffected and judged.verdict == 'regression':
            judged = dataclasses.replace(
                judged,
                verdict='inconclusive',
                reason=(
                    f'{judged.reason}; but the shim patches nothing on this release, so both legs ran the same code: '
                    'noise, not gated'
                ),
            )
        verdicts[metric] = judged
    absolute = {}
    for leg, data in result['legs'].items():
        if not data.get('available'):
            continue
        base_leg = baseline['legs'].get(leg, {}) if baseline else {}
        base = base_leg.get('samples_per_s_windows')
        if baseline and mismatch:
            median = statistics.median(data['samples_per_s_windows'])
            verdicts[f'throughput/{leg}'] = Judgement(
                'inconclusive', f'different machine fingerprint ({", ".join(mismatch)})', current=median
            )
        else:
            judged = judge(data['samples_per_s_windows'], base, ABSOLUTE_FLOOR)
            if unaffected and leg.startswith('shim') and judged.verdict == 'regression':
                judged = dataclasses.replace(
                    judged,
                    verdict='inconclusive',
                    reason=(f'{judged.reason}; the shim patches nothing on this release: noise, not gated'),
                )
            absolute[leg] = judged
    drift = machine_drift(absolute)
    for leg, judgement in absolute.items():
        ratio = verdicts.get(LEG_RATIOS[leg]) if leg in LEG_RATIOS else None
        verdicts[f'throughput/{leg}'] = _absolute(leg, judgement, drift, ratio)
    worst = min((j.verdict for j in verdicts.values()), key=VERDICTS.index, default='inconclusive')
    return {
        'verdicts': {k: dataclasses.asdict(v) for k, v in verdicts.items()},
        'worst': worst,
        'fingerprint_mismatch': mismatch,
        'drift': drift,
    }


def machine_drift(absolute: dict[str, Judgement]) -> Optional[dict[str, Any]]:
    """The shift the no-shim legs share, or ``None``: ``{'change': median change, 'legs': {leg: change}}``.

    Only no-shim legs that could be judged count (a baseline, enough windows, not too noisy). They share a shift when
    every one of them moved the same way by more than half of :data:`ABSOLUTE_FLOOR` and their median change exceeds
    :data:`ABSOLUTE_FLOOR`; one leg moving while another stays put is noise, not drift.
    """
    changes = {
        leg: j.change
        for leg, j in absolute.items()
        if leg in NO_SHIM_LEGS and j.change is not None and j.tolerance is not None
    }
    if not changes:
        return None
    shared = statistics.median(changes.values())
    together = all(change * shared > 0 and abs(change) > ABSOLUTE_FLOOR / 2 for change in changes.values())
    if not together or abs(shared) <= ABSOLUTE_FLOOR:
        return None
    return {'change': shared, 'legs': changes}


def _absolute(leg: str, judgement: Judgement, drift: Optional[dict[str, Any]], ratio: Optional[Judgement]) -> Judgement:
    """An absolute throughput verdict, with machine drift and no-shim legs taken out of the gate, and a shim leg's
    regression (or improvement) kept only where its ratio to the unpatched leg of the same run (``ratio``) shows it
    too."""
    moved = (
        judgement.change is not None and judgement.tolerance is not None and abs(judgement.change) > judgement.tolerance
    )
    if drift is not None and moved:
        evidence = ', '.join(f'{name} {change:+.1%}' for name, change in drift['legs'].items())
        return dataclasses.replace(
            judgement,
            verdict='drift',
            reason=(
                f'{judgement.change:+.1%}; the legs that run no shim code moved {drift["change"]:+.1%} (median: '
                f'{evidence}): machine drift, judged by the ratios'
            ),
        )
    if judgement.verdict not in ('regression', 'improved'):
        return judgement
    shift = f'{judgement.change:+.1%} beyond ±{judgement.tolerance:.1%}'
    if leg in NO_SHIM_LEGS:
        return dataclasses.replace(
            judgement,
            verdict='inconclusive',
            reason=f'{shift}; this leg runs no shim code, and the others did not move with it: noise, not gated',
        )
    if ratio is None or ratio.verdict != judgement.verdict:
        # The leg moved but not relative to the unpatched leg measured in the same rounds: the machine, not the shim
        # (measured on unchanged code: a shim leg -6.6% at p < 0.001, another +18.1% at p < 0.001, ratios within
        # tolerance). Neither a regression nor a reason to re-record the baseline.
        return dataclasses.replace(
            judgement,
            verdict='inconclusive',
            reason=(
                f'{shift}; its ratio to the unpatched leg of the same run did not '
                f'{"fall" if judgement.verdict == "regression" else "rise"} '
                f'({ratio.reason if ratio else "not measured"}): not the shim, not gated'
            ),
        )
    return judgement


def baseline_path(root: Union[str, os.PathLike[str]], device: str, env: str) -> Path:
    """Where the baseline of one env lives: ``<root>/<device>/<env>.json`` (``env`` includes the device)."""
    return Path(root) / device / f'{env}.json'


def load_baseline(root: Union[str, os.PathLike[str]], device: str, env: str) -> Optional[dict[str, Any]]:
    """The recorded baseline of an env, or ``None``."""
    path = baseline_path(root, device, env)
    return json.loads(path.read_text()) if path.exists() else None


def record_baseline(result: dict[str, Any], root: Union[str, os.PathLike[str]], replace: bool = False) -> Path:
    """Write ``result`` as the baseline of its env; never overwrites one unless ``replace``.

    Raises:
        BaselineExistsError: A baseline exists and ``replace`` is false. The message gives both medians.
        ValueError: The result has a planted slowdown (a test run, not a baseline).
    """
    if result.get('planted_slowdown') or result.get('planted_hook_us'):
        raise ValueError('compatshim bench: a run with a planted slowdown cannot be recorded as a baseline')
    path = baseline_path(root, result['device'], result['env'])
    if path.exists() and not replace:
        old = json.loads(path.read_text())
        old_ratio = old['headline']['shim_vs_unpatched'].get('median')
        new_ratio = result['headline']['shim_vs_unpatched'].get('median')
        raise BaselineExistsError(
            f'compatshim bench: a baseline exists at {path} (recorded {old.get("recorded_at")}, shim/unpatched '
            f'{old_ratio}; this run {new_ratio}). Pass --replace to overwrite it.'
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = {k: v for k, v in result.items() if k != 'comparison'}
    stored['recorded_at'] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    path.write_text(json.dumps(stored, indent=1) + '\n')
    return path
