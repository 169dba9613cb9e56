"""The program generator of the conformance suite: the axes of what user code written for 0.24.1 reaches, and the
programs built from them.

A program is one value on each axis (:data:`AXES`). :func:`all_pairs` builds a small set in which every pair of values
of any two axes appears in some program (greedy, deterministic); :func:`moving` adds every algorithm with every Device
in a fit that runs to its end; :func:`from_seed` builds program N from seed N, for more programs on demand.
:func:`script` writes a program as a stand-alone script, for a failing one.

Imports nothing heavy.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

__all__ = ['AXES', 'RAISED', 'Program', 'all_pairs', 'from_seed', 'generated', 'key', 'moving', 'script']

Program = dict[str, str]

#: What the transform of effect ``raises`` raises, at its second call.
RAISED = 'the transform failed on its second call'

#: Each axis and its values (the first is the plainest).
AXES: dict[str, tuple[str, ...]] = {
    # How the transform is given.
    'given': (
        'keyword',
        'position',
        'position5',
        'twice',
        'assigned_before',
        'assigned_between',
        'callback',
        'none',
        'del',
    ),
    # The DataSpec: Composer's, a subclass with a method, a property (its reads counted), its own default, its own
    # __getattribute__, one that never runs the base __init__, one delegating to an inner DataSpec through
    # __getattr__, one describing its pipeline under the names 0.27 took (on its class); a shallow copy, a pickle
    # round trip.
    'spec': (
        'plain',
        'sub_method',
        'sub_property',
        'own_default',
        'own_getattribute',
        'no_base_init',
        'delegating',
        'own_names',
        'copy',
        'pickle',
    ),
    # The transform's shape.
    'transform': ('function', 'lambda', 'partial', 'bound_method', 'module', 'getattr_object', 'torchvision_v2'),
    # What it does: changes the structure (a tuple for the list, a dict), leaves a part on the host, reads
    # state.batch, moves a tensor of its own with the trainer's device, modifies in place, raises.
    'effect': ('plain', 'restructure', 'to_dict', 'host', 'state_batch', 'moves', 'inplace', 'raises'),
    # The loop: fit on the Trainer's dataloader, fit's own argument (two fits), an evaluator, one with its own
    # microbatch size, predict, predict over the plain dataloader (Composer builds a bare DataSpec around it).
    'loop': ('train', 'fit_args', 'eval', 'eval_microbatch', 'predict', 'predict_plain'),
    'microbatch': ('none', 'int', 'auto'),
    # A Trainer subclass that overrides each loop method and calls super().
    'trainer': ('plain', 'subclass'),
    # A callback that records where state.batch is at each event; one that also moves a tensor of its own there.
    'events': ('none', 'record', 'move'),
    # An error raised later by the user's own code: the model, a callback (a NaN guard), the dataset.
    'later': ('none', 'model', 'callback', 'dataset'),
    # A Composer algorithm that moves the batch, changes it at AFTER_DATALOADER (0.24.1: on the device), or mixes
    # and smooths it before the forward and the loss.
    'algorithm': ('none', 'selective_backprop', 'colout', 'cutout', 'mixup', 'label_smoothing', 'progressive_resizing'),
    # The trainer's Device as code written for 0.24.1 sets it up: Composer's own; a subclass whose batch_to_device
    # counts its moves, or normalises on the way (not idempotent); a wrapper on the instance's batch_to_device (a
    # transfer profiler) set before the Trainer, by a callback at FIT_START, or by one at the first batch's start
    # (after that batch was moved).
    'device': ('composer', 'counting', 'normalising', 'wrapped_before', 'wrapped_fit_start', 'wrapped_mid_fit'),
}


def key(program: Program) -> str:
    """A program's name: its axis values in axis order."""
    return '-'.join(program[axis] for axis in AXES)


def _pairs(program: Program) -> set[tuple[str, str, str, str]]:
    return {(a, program[a], b, program[b]) for a, b in itertools.combinations(AXES, 2)}


def all_pairs() -> list[Program]:
    """Programs covering every pair of values of any two axes, each program chosen greedily to cover the most pairs
    not yet covered (candidates drawn from a fixed seed: the same set on every run)."""
    rng = random.Random(20261205)
    missing = {
        (a, va, b, vb) for a, b in itertools.combinations(AXES, 2) for va in AXES[a] for vb in AXES[b]
    }  # fmt: skip
    programs: list[Program] = []
    while missing:
        a, va, b, vb = min(missing)
        best: tuple[int, Program] = (-1, {})
        for _ in range(60):
            candidate = {axis: rng.choice(values) for axis, values in AXES.items()}
            candidate[a], candidate[b] = va, vb
            covered = len(_pairs(candidate) & missing)
            if covered > best[0]:
                best = (covered, candidate)
        programs.append(best[1])
        missing -= _pairs(best[1])
    return programs


def moving() -> list[Program]:
    """Every algorithm with every Device, in a fit that runs to its end (microbatches of 2, the plainest value on every
    other axis): each pair of :func:`all_pairs` is in some program, but most of those stop early on another axis."""
    plain = {axis: values[0] for axis, values in AXES.items()}
    return [
        {**plain, 'microbatch': 'int', 'algorithm': algorithm, 'device': device}
        for algorithm in AXES['algorithm']
        for device in AXES['device']
    ]


def generated() -> list[Program]:
    """The suite's programs: :func:`all_pairs`, then :func:`moving`'s not among them."""
    found = {key(p): p for p in [*all_pairs(), *moving()]}
    return list(found.values())


def from_seed(seed: int) -> Program:
    """Program N, from seed N."""
    rng = random.Random(seed)
    return {axis: rng.choice(values) for axis, values in AXES.items()}


def script(program: Program, stage: Any) -> str:
    """``program`` as a stand-alone script (run from the repository root, in the release's env)."""
    enable = '' if stage is None else f'compatshim.enable(stage={stage!r})\n'
    return (
        '# A conformance program (tests/conformance): run it here and in the 0.24.1 env (there without enable()).\n'
        'import json, sys\n'
        "sys.path[:0] = ['tests', 'tests/conformance']\n"
        'import compatshim\n'
        'from runner import run\n'
        f'{enable}'
        f'print(json.dumps(run({json.dumps(program)}), indent=1))\n'
    )
