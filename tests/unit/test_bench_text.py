"""What a bench prints around its figures, without torch: the head's seconds, the leg table's headings, and the line
for a baseline name that does not exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from compatshim.bench import report
from compatshim.bench.results import PipelineResult, Store

ROOT = Path(__file__).resolve().parents[2]
#: A real default-size run of the test pipeline (Composer 0.28.0): it measured 13 s of the 17 s its command took.
RUN = ROOT / 'tests' / 'data' / 'pipeline-noise' / 'run1.json'


def _run() -> PipelineResult:
    return PipelineResult.from_json(json.loads(RUN.read_text()))


def test_the_head_says_what_was_measured_and_what_the_command_took() -> None:
    """A user waited 31 s for a head that said 7 s: the seconds measured, and of how many the command took."""
    result = _run()
    assert report.seconds(result) == 'measured 13 s'
    assert report.seconds(result, 16.9) == 'measured 13 s of 17 s'
    assert report.seconds(result, 2.0) == 'measured 13 s of 13 s'  # never fewer than it measured


def test_each_column_of_the_leg_table_has_its_own_heading() -> None:
    """Where the transform ran and its share of a step were both headed 'transform'."""
    head = report.legs_table(_run())[0]
    headings = re.split(r'\s{2,}', head.strip())
    assert len(headings) == len(set(headings)), headings
    assert 'placement' in headings and 'transform share' in headings, headings
    shim = next(line for line in report.legs_table(_run()) if line.startswith('  shim-batch '))
    assert head.index('placement') == shim.index('device'), (head, shim)  # the headings sit over their columns
    assert head.index('transform share') + len('transform share') == shim.index('%') + 1, (head, shim)


def test_a_baseline_named_with_its_extension_is_that_file(tmp_path: Path) -> None:
    """``--save main.json`` writes main.json (not main.json.json), and ``--compare main`` reads it."""
    store = Store(tmp_path, PipelineResult)
    assert store.path('main.json') == store.path('main') == tmp_path / 'main.json'


def test_a_baseline_name_that_does_not_exist_lists_those_that_do(tmp_path: Path) -> None:
    """``--compare mian``: the baselines there, and the one a typo meant."""
    store = Store(tmp_path, PipelineResult)
    assert (
        store.absent('main')
        == f"no baseline 'main' in {tmp_path.as_posix()} (it holds none yet); save one with --save main"
    )
    for name in ('main', 'nightly'):
        (tmp_path / f'{name}.json').write_text('{}')
    assert store.absent('mian') == (
        f"no baseline 'mian' in {tmp_path.as_posix()}, which holds main, nightly: did you mean --compare main? "
        '(--save mian saves a new one)'
    )
    assert store.absent('release-1') == (
        f"no baseline 'release-1' in {tmp_path.as_posix()}, which holds main, nightly; save one with --save release-1"
    )
