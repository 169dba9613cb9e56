"""What ``compatshim bench --pipeline`` concludes from its figures (docs/pipeline.md, "What it prints"): whether the
run is input-bound, and each pair of legs compared by the one :data:`VERDICT_RULE`, whose words come with the figures
it read. Imports nothing heavy (no torch): the rule is tested on recorded results.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Optional

from compatshim.bench.results import PipelineResult
from compatshim.observe.placement import Placement, Word

__all__ = [
    'AS_FAST_WITHIN',
    'VERDICT_ROUNDS',
    'VERDICT_RULE',
    'WAIT_LIMIT',
    'Comparison',
    'Told',
    'partly_counted',
    'tell',
    'verdicts',
]

#: The share of a step spent waiting for data above which a run is input-bound (the PyTorch profiler's TensorBoard
#: plugin advises more dataloader workers above 5%).
WAIT_LIMIT = 0.05
#: Rounds below which no timing verdict is given (the rank test of the gate needs as many: 5).
VERDICT_ROUNDS = 5
#: Two legs whose figures all lie within this much of x1 are *as fast as* each other: the minimum effect the reference
#: harness gates same-run ratios of like work on (:data:`compatshim.bench.rule.RATIO`: unchanged code moved them by up
#: to 10.3% from session to session). The rounds are read without the lowest and the highest: a shared machine's odd
#: round (three of five runs of the test pipeline on one machine had one: x0.88, x1.18, x1.16) decided the words
#: otherwise.
AS_FAST_WITHIN = 0.10
#: The verdict rule, in the one sentence docs/pipeline.md states.
VERDICT_RULE = (
    "Each verdict reads the ratio of two legs' median step times (the table's figures) and the same ratio round by "
    f'round, the lowest and the highest round left out: *as fast as* when all of these lie within '
    f'{AS_FAST_WITHIN:.0%} of x1, *faster* or *slower* by the ratio of the medians when all lie beyond it on the same '
    'side, and *cannot tell* otherwise.'
)


class Told(Word):
    """What two legs' step times tell (:func:`tell`)."""

    AS_FAST = 'as fast as'
    FASTER = 'faster'
    SLOWER = 'slower'
    CANNOT_TELL = 'cannot tell'


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two legs compared by :func:`tell`: ``factor`` is how many times as fast its ``fast`` leg is as its ``slow`` one
    (the ratio of their median step times: the table's figures), ``per_round`` the same ratio round by round, sorted,
    and ``told`` what :data:`VERDICT_RULE` makes of them."""

    told: Told
    factor: float
    per_round: tuple[float, ...]

    @property
    def middle(self) -> tuple[float, float]:
        """The lowest and the highest per-round ratio once the lowest and the highest round are left out."""
        inner = self.per_round[1:-1] if len(self.per_round) > 2 else self.per_round
        return inner[0], inner[-1]

    def rounds(self, slower: bool = False) -> str:
        """The per-round ratios the verdict read, and the two it left out (as slowdowns: ``slower``)."""
        (low, high), (lowest, highest) = self.middle, (self.per_round[0], self.per_round[-1])
        if slower:
            low, high, lowest, highest = 1 / high, 1 / low, 1 / highest, 1 / lowest
        return f'per round x{low:.2f} to x{high:.2f}, leaving out the extreme rounds x{lowest:.2f} and x{highest:.2f}'


def tell(result: PipelineResult, slow: str, fast: str) -> Optional[Comparison]:
    """:data:`VERDICT_RULE` applied to how many times as fast ``fast`` is as ``slow`` (``None``: a leg not timed)."""
    a, b = result.step_ms(slow), result.step_ms(fast)
    if not a or not b:
        return None
    factor = statistics.median(a) / statistics.median(b)
    compared = Comparison(Told.CANNOT_TELL, factor, tuple(sorted(x / y for x, y in zip(a, b))))
    read, band = (factor, *compared.middle), 1 + AS_FAST_WITHIN
    if all(1 / band <= x <= band for x in read):
        return dataclasses.replace(compared, told=Told.AS_FAST)
    if all(x > band for x in read):
        return dataclasses.replace(compared, told=Told.FASTER)
    if all(x < 1 / band for x in read):
        return dataclasses.replace(compared, told=Told.SLOWER)
    return compared


def _words(compared: Comparison, other: str) -> str:
    """A comparison with ``other`` in words (never *cannot tell*: see :func:`verdicts`), with the figures it read."""
    factor = compared.factor
    if compared.told is Told.AS_FAST:
        return f'as fast as {other} (x{factor:.2f}; {compared.rounds()})'
    if compared.told is Told.FASTER:
        return f'x{factor:.2f} faster than {other} ({compared.rounds()})'
    return f'x{1 / factor:.2f} slower than {other} ({compared.rounds(slower=True)})'


def partly_counted(result: PipelineResult) -> list[str]:
    """The transform named where its work left torch in a leg (numpy, Python lists): the counts see the elements that
    leave (a count per route, gated like the others), not the work done with them."""
    legs = [name for name, measured in result.legs.items() if measured.work is not None and measured.work.outside]
    if not legs:
        return []
    work = result.legs[legs[0]].work
    assert work is not None
    return [
        f'work: the transform of {result.pipeline} is not fully counted — its work leaves torch through '
        f'{work.outside_text()} ({", ".join(legs)}): those elements are counted per route and gated like its other '
        'counts; the work done with them outside torch is not'
    ]


def verdicts(result: PipelineResult) -> list[str]:
    """The shim's factor on this release, stage batch against microbatch, and whether the run is input-bound: each by
    :data:`VERDICT_RULE` (:func:`tell`), with the figures it read, and why where it cannot tell."""
    out, legs = [], result.legs
    unpatched, shim, mb = legs['unpatched'], legs['shim-batch'], legs['shim-microbatch']
    if not unpatched.available:
        out.append(f'unpatched cannot run here: {unpatched.reason}')
    elif unpatched.placement is Placement.NEVER_CALLED:
        out.append(
            'unpatched never calls the transform here (Composer drops device_transforms): its steps skip the work '
            'and feed the model raw batches'
        )
    if not result.affected:
        out.append('the shim: this release runs device_transforms on the device itself; the shim patches nothing')
    out += partly_counted(result)
    rounds = result.fingerprint['size']['rounds']
    if rounds < VERDICT_ROUNDS:
        return out + [
            f'timing: no verdict from {rounds} rounds (--quick gates placement, calls and bytes only); run with '
            f'{VERDICT_ROUNDS} rounds or more for the factors'
        ]
    ran = {name for name, measured in legs.items() if measured.available}
    best = next((n for n in ('shim-batch', 'native-microbatch', 'unpatched') if n in ran), '')
    waits = legs[best].wait_share if best else None
    if waits is not None:
        bound = 'yes' if waits > WAIT_LIMIT else 'no'
        out.append(f'input-bound: {bound} — {waits:.0%} of a {best} step waits for data (threshold {WAIT_LIMIT:.0%})')
    plain = result.affected and 'unpatched' in ran and unpatched.placement is not Placement.NEVER_CALLED
    factors = [  # (slow leg, fast leg, when, what it is about, the words before the factor, against what, after)
        ('unpatched', 'shim-batch', plain, 'the shim against unpatched',
         f'the shim on this release (unpatched: {unpatched.placement}): a step', 'unpatched',
         ''),
        ('native-batch', 'shim-batch', {'native-batch', 'shim-batch'} <= ran, 'the shim against batch_transforms',
         'against the workaround batch_transforms=fn (host), the shim: a step', 'the workaround', ''),
        ('shim-microbatch', 'shim-batch', {'shim-microbatch', 'shim-batch'} <= ran, 'stage batch vs microbatch',
         'stage batch vs microbatch: stage batch is', 'stage microbatch',
         f'; {mb.calls_per_step:g} calls/step instead of {shim.calls_per_step:g} at stage microbatch (batch-level '
         'draws and statistics per microbatch), which holds one microbatch on the device instead of the whole batch'
         if mb.calls_per_step != shim.calls_per_step else
         '; one microbatch per step here, so both stages make the same call (give microbatch_size to compare them)'),
        (best, 'ceiling', waits is not None, 'data for free (the ceiling leg)',
         'with data for free (the ceiling leg) a step would be', best, ''),
    ]  # fmt: skip
    for slow, fast, when, about, head, other, tail in factors:
        compared = tell(result, slow, fast) if when else None
        if compared is None:
            continue
        if compared.told is not Told.CANNOT_TELL:
            out.append(f'{head} {_words(compared, other)}{tail}')
        else:
            out.append(
                f'{about}: cannot tell — x{compared.factor:.2f}; {compared.rounds()}: neither all within '
                f'{AS_FAST_WITHIN:.0%} of x1 nor all beyond it on one side'
            )
    return out
