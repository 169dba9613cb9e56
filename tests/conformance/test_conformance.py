"""Conformance with Composer 0.24.1, proven by construction: generated programs (:mod:`programs`, every pair of values
of any two axes, and every algorithm with every Device in a fit that runs to its end), each run on the real Trainer
(:mod:`runner`), their traces compared with 0.24.1's.

0.24.1's traces are recorded unshimmed in the 0.24.1 env and committed (``traces-0.24.1.json``); there, the same test
runs every program again and asserts the recording is what 0.24.1 does now. Every affected release runs every program
with the shim, at each stage, and its trace must be 0.24.1's, or differ only under a name in
:data:`compatshim.config.differences.DIFFERENCES` (the list the docs show). The control runs the programs without the
shim: it fails on every affected release (strict xfail).

Re-record (after changing a program or the runner): ``tox -e composer0.24.1-cpu -- tests/conformance
--conformance-record``. More programs: ``--conformance-seeds N`` adds programs 0..N-1 (record them in the 0.24.1 env
first, with the same option).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import COMPOSER, IS_AFFECTED
from programs import Program, all_pairs, from_seed, generated, key
from rules import REFERENCE, RULES, TRACES, Trace, explain, recorded, verdict
from runner import run

import compatshim
from compatshim.config.differences import DIFFERENCES
from compatshim.shim.registry import STATE

pytestmark = [pytest.mark.device, pytest.mark.runs_in('family')]

STAGES = ('batch', 'microbatch')


def _programs(config: Any) -> list[Program]:
    seeds = config.getoption('conformance_seeds') or 0
    found = {key(p): p for p in [*generated(), *(from_seed(seed) for seed in range(seeds))]}
    return list(found.values())


def pytest_generate_tests(metafunc: Any) -> None:
    if 'program' in metafunc.fixturenames:
        programs = _programs(metafunc.config)
        metafunc.parametrize('program', programs, ids=[key(p) for p in programs])


def _fresh(program: Program) -> Trace:
    STATE.warned.clear()  # each program is a fresh process's first run: once-per-process warnings are given
    return run(program)


# --- The tests -------------------------------------------------------------------------------------------------------


def test_every_rule_is_a_listed_difference() -> None:
    assert {*RULES, 'microbatch'} <= set(DIFFERENCES)


def test_the_programs_cover_every_pair() -> None:
    from itertools import combinations

    from programs import AXES

    programs = all_pairs()
    for a, b in combinations(AXES, 2):
        seen = {(p[a], p[b]) for p in programs}
        assert len(seen) == len(AXES[a]) * len(AXES[b]), f'{a} x {b}: {len(seen)} pairs'


@pytest.mark.skipif(not IS_AFFECTED, reason=f'Composer {COMPOSER} is unaffected: the shim patches nothing')
@pytest.mark.parametrize('stage', STAGES)
def test_conformance_with_0_24_1(program: Program, stage: str) -> None:
    ref = recorded().get(key(program))
    if ref is None:
        pytest.skip(f'no 0.24.1 trace: tox -e composer{REFERENCE}-cpu -- tests/conformance --conformance-record')
    compatshim.enable(stage=stage)
    got = _fresh(program)
    assert verdict(program, stage, ref, got) is not None, explain(program, stage, ref, got)


@pytest.mark.control
@pytest.mark.xfail(IS_AFFECTED, strict=True, reason=f'control: Composer {COMPOSER} without the shim is not 0.24.1')
def test_control_without_the_shim(request: Any) -> None:
    """Without the shim every program's trace is 0.24.1's: true on 0.24.1 (which proves the recording current, or
    writes it with ``--conformance-record``), false on every affected release."""
    traces = {key(p): _fresh(p) for p in _programs(request.config)}
    if request.config.getoption('conformance_record'):
        assert COMPOSER == REFERENCE, f'record the traces in the {REFERENCE} env, not on {COMPOSER}'
        TRACES.write_text(json.dumps(traces, indent=0, sort_keys=True) + '\n')
    reference = recorded()
    differ = [k for k in traces if k in reference and traces[k] != reference[k]]
    assert not differ, f'{len(differ)} of {len(traces)} programs differ from 0.24.1 without the shim: {differ[:3]}'
