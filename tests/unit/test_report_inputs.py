"""What ``compatshim report`` (and a pipeline compare) says about its inputs before it judges anything: every
precondition in one message, the results first, and a result of another compatshim named by the compatshim and the
schema that wrote it, with what to do. No torch.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from compatshim import _cli
from compatshim.bench.results import SCHEMA, BenchResult, PipelineResult, Store, UnreadableResult, read

ROOT = Path(__file__).resolve().parents[2]
#: A result written by v0.1.0 (result schema 4, workload version 3): another machine's unchanged run of that tag.
SCHEMA4 = ROOT / 'tests' / 'data' / 'schema4' / 'bench-composer0.28.0-cpu.json'
PIPELINE = ROOT / 'tests' / 'data' / 'pipeline' / 'main.json'


def _old() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA4.read_text())
    return data


def test_every_precondition_is_said_in_one_message_results_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A newcomer met them one run at a time: the missing baselines directory, then matplotlib, then (only with
    --no-png) the real cause, results an older compatshim wrote. Now one message, results first, exit 2, nothing
    written."""
    results = tmp_path / 'results'
    results.mkdir()
    (results / 'bench-composer0.28.0-cpu.json').write_text(SCHEMA4.read_text())
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    monkeypatch.setenv('COMPATSHIM_STAGE', 'batc')
    out = tmp_path / 'out'
    argv = ['report', '--results', str(results), '--baselines', str(tmp_path / 'nowhere'), '--out', str(out)]
    assert _cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == 'compatshim report: nothing was judged; 4 problems:', err
    assert 'bench-composer0.28.0-cpu.json: it is a result at schema 4; this compatshim reads 5 only' in err[1]
    assert 'measure it again with this compatshim' in err[1], err[1]
    assert 'nowhere: no such directory' in err[2] and 'matplotlib' in err[3] and 'COMPATSHIM_STAGE' in err[4], err
    assert len(err) == 5 and not out.exists()


def test_no_results_comes_first_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    (tmp_path / 'empty').mkdir()
    argv = ['report', '--results', str(tmp_path / 'empty'), '--baselines', str(tmp_path / 'nowhere'), '--out', 'x']
    assert _cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and 'no bench results in' in err[1] and 'no such directory' in err[2], err


@pytest.mark.parametrize('change', [{}, {'schema': 3}, {'schema': SCHEMA + 1, 'kind': 'bench'}, {'kind': 'bench'}])
def test_a_result_of_another_schema_is_refused_naming_the_schemas(change: dict[str, Any]) -> None:
    """0.1.0 was never published: a result of another schema (v0.1.0's own, schema 4) is not read, whatever it says of
    its kind or writer; the line names its schema and this one's, and a newer schema says to upgrade."""
    data = {**_old(), **change}
    with pytest.raises(UnreadableResult) as refused:
        BenchResult.from_json(data)
    said = f'it is a result at schema {data["schema"]}; this compatshim reads {SCHEMA} only'
    newer = ' (a newer compatshim wrote it: upgrade this one)' if data['schema'] > SCHEMA else ''
    assert str(refused.value) == said + newer
    del data['schema']
    with pytest.raises(UnreadableResult, match=f'^it is a result at schema none; this compatshim reads {SCHEMA} only$'):
        BenchResult.from_json(data)


def test_a_result_of_the_other_bench_or_no_result_says_so() -> None:
    pipeline = json.loads(PIPELINE.read_text())
    with pytest.raises(
        UnreadableResult, match=r'^it is a result of compatshim bench --pipeline, not of compatshim bench$'
    ):
        BenchResult.from_json(pipeline)
    for data in ({'a': 1}, [1, 2], {'kind': None, 'legs': {}}):
        with pytest.raises(UnreadableResult, match=r'^it is not a result of compatshim bench$'):
            BenchResult.from_json(data)


def test_files_with_one_problem_are_one_line(tmp_path: Path) -> None:
    for env in ('composer0.28.0-cpu', 'composer0.26.1-cpu', 'composer0.24.1-cpu'):
        (tmp_path / f'bench-{env}.json').write_text(SCHEMA4.read_text())
    found, problems = read([tmp_path])
    assert found == [] and len(problems) == 1, problems
    assert '(and 2 more files): it is a result at schema 4' in problems[0], problems


def test_an_older_pipeline_baseline_names_its_schema(tmp_path: Path) -> None:
    """A pipeline baseline saved by an earlier compatshim (no kind, schema 4), as --compare loads it."""
    old = copy.deepcopy(json.loads(PIPELINE.read_text()))
    del old['kind']
    old['schema'] = 4
    (tmp_path / 'main.json').write_text(json.dumps(old))
    with pytest.raises(UnreadableResult) as refused:
        Store(tmp_path, PipelineResult).load('main')
    assert str(refused.value) == f'it is a result at schema 4; this compatshim reads {SCHEMA} only'
