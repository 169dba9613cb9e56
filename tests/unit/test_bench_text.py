"""What a bench prints around its figures, without torch: the line for a baseline name that does not exist."""

from __future__ import annotations

from pathlib import Path

from compatshim.bench.results import PipelineResult, Store


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
