"""The conformance suite's comparison: a generated program's trace against 0.24.1's, identical or different only under
a name of :data:`compatshim.config.differences.DIFFERENCES`. Read by the tests and by :mod:`summary` (the main job's
table). Imports nothing heavy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

from programs import RAISED, Program, key, script

__all__ = ['REFERENCE', 'RULES', 'TRACES', 'Trace', 'explain', 'recorded', 'verdict']

TRACES = Path(__file__).with_name('traces-0.24.1.json')
REFERENCE = '0.24.1'
Trace = dict[str, Any]


def recorded() -> dict[str, Trace]:
    """0.24.1's traces, by program key."""
    return json.loads(TRACES.read_text()) if TRACES.exists() else {}


# --- The rules: each difference a program's trace may show, by its name in DIFFERENCES -------------------------------

_BATCH_EVENTS = ('after_dataloader', 'eval_batch_start', 'predict_batch_start')


def _per_microbatch(trace: Trace) -> Trace:
    """What stage microbatch keeps of 0.24.1's trace: where the transform ran and on how many samples, what the
    model saw (structures, a list split into tuples, and placements; values differ per microbatch), where the batch
    was at the events after the move, what the attribute read, and the error."""
    calls = [call for call in trace['calls'] if 'where' in call]
    error = trace['error'] and (trace['error']['type'], trace['error']['is'])  # which call raised moves with the calls
    same: Trace = {'error': error, 'reads': trace['reads'], 'where': sorted({c['where'] for c in calls})}
    if trace['error'] is None:
        same['n'] = sum(call['n'] for call in calls)
        same['forwards'] = [(f['kind'].replace('list[', 'tuple['), f['where']) for f in trace['forwards']]
        same['events'] = [event for event in trace['events'] if event[0] not in _BATCH_EVENTS]
    return same


def _raised_sooner(ref: Trace, got: Trace) -> bool:
    """Per microbatch, a transform that fails at its second call fails in the first step's second microbatch: 0.24.1
    reached that call a step later, or never (an error of the program's own first)."""
    ours = (got['error'] or {}).get('line') == RAISED
    where = [sorted({c['where'] for c in t['calls'] if 'where' in c}) for t in (ref, got)]
    return ours and where[0] == where[1] and ref['reads'] == got['reads']


#: Composer algorithms acting at ``AFTER_DATALOADER``: at stage microbatch they get the batch before the transform.
_BEFORE_THE_TRANSFORM = ('selective_backprop', 'colout', 'cutout', 'progressive_resizing')


def _algorithm_first(program: Program, ref: Trace, got: Trace) -> bool:
    """Per microbatch, an algorithm at ``AFTER_DATALOADER`` gets the batch before the transform (0.24.1: after it):
    the transform sees the samples it kept (``SelectiveBackprop``), and a structure the transform makes that the
    algorithm cannot take no longer stops the run."""
    if program['algorithm'] not in _BEFORE_THE_TRANSFORM:
        return False
    if ref['error'] is None or got['error'] is not None:
        return {**_per_microbatch(ref), 'n': 0} == {**_per_microbatch(got), 'n': 0}
    where = {c['where'] for c in got['calls'] if 'where' in c}
    return where == {'device'} and ref['reads'] == got['reads'][:1]  # 0.24.1 read it before it stopped


def _del(program: Program, ref: Trace, got: Trace) -> bool:
    error = ref['error'] or {}
    raised = error.get('type') == 'AttributeError' and 'device_transforms' in error.get('line', '')
    return raised and not any('where' in call for call in got['calls'])


def _positions(program: Program, ref: Trace, got: Trace) -> bool:
    """More positions than 0.24.1 took, which it refused: the release reads them (none of the generated programs)."""
    error = ref['error'] or {}
    return program['given'].startswith('position') and 'positional argument' in error.get('line', '')


#: What the shim says where a program runs as on 0.24.1, as code written for it means (positions read in 0.24.1's
#: order): a notice, not a difference.
NOTICES = ('positional arguments, read in',)


def _unnoticed(trace: Trace) -> Trace:
    return {**trace, 'warned': [line for line in trace['warned'] if not any(n in line for n in NOTICES)]}


RULES: dict[str, Callable[[Program, Trace, Trace], bool]] = {'del': _del, 'positions': _positions}


def verdict(program: Program, stage: str, ref: Trace, got: Trace) -> Optional[str]:
    """``identical``, ``by rule <name>``, or ``None``: a difference no rule allows."""
    if _unnoticed(got) == ref:
        return 'identical'
    for name, allows in RULES.items():
        if allows(program, ref, got):
            return f'by rule {name}'
    if stage == 'microbatch' and (
        _per_microbatch(got) == _per_microbatch(ref) or _raised_sooner(ref, got) or _algorithm_first(program, ref, got)
    ):
        return 'by rule microbatch'
    return None


def explain(program: Program, stage: Optional[str], ref: Trace, got: Trace) -> str:
    lines = [f'program {key(program)} differs from Composer {REFERENCE} with no rule (stage {stage}):']
    for part in ref:
        if ref[part] != got.get(part):
            lines += [
                f'  {part}: 0.24.1 {json.dumps(ref[part])[:400]}',
                f'  {part}: here   {json.dumps(got.get(part))[:400]}',
            ]
    return '\n'.join([*lines, 'As a stand-alone script:', script(program, stage)])
