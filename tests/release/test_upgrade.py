"""The user's moment, an upgrade: a pipeline baseline saved on Composer 0.26.1 (the host family's newest, torch 2.4.0)
and compared after upgrading, on the dropped family (0.28.0, torch 2.4.0), the rejected family (0.32.1, torch 2.7.0)
and 0.32.1 on torch 2.15.0. The baseline is ``tests/data/upgrade/0.26.1.json``, saved by this release's
``compatshim bench --pipeline uint8_pipeline:pipeline --quick --save``; the 0.26.1 env saves it again and holds the
committed copy to what it saves (so it can never go stale unseen), the later envs compare against it.

Unchanged code exits 0 across each family boundary: what Composer's own legs do changed with the release, and is said
once (``RELEASE``), never judged; the shim's legs and the transform's work are judged across the upgrade. Twice the
work exits 1; a tenth more exits 1, or says in one line that the counts cannot tell it from torch's own dispatch.
``--quick`` gates no timing: every verdict here is a count.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY

from compatshim import _cli
from compatshim.config.support import Family

pytestmark = pytest.mark.filterwarnings('ignore::UserWarning')

TESTS = Path(__file__).resolve().parents[1]
SAVED_ON = '0.26.1'
BASELINE = TESTS / 'data' / 'upgrade' / f'{SAVED_ON}.json'
SPEC = 'uint8_pipeline:pipeline'
#: How the committed baseline is recorded: in the 0.26.1 env (``.tox/composer0.26.1-cpu``), from ``tests/pipelines``.
RECORD = f'compatshim bench --pipeline {SPEC} --quick --save {SAVED_ON} --dir ../data/upgrade'


@pytest.fixture
def user_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's repository after the upgrade: their pipeline module, and the baseline they saved before it."""
    shutil.copy(TESTS / 'pipelines' / 'uint8_pipeline.py', tmp_path)
    (tmp_path / '.compatshim' / 'benchmarks').mkdir(parents=True)
    shutil.copy(BASELINE, tmp_path / '.compatshim' / 'benchmarks' / 'before.json')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for variable in ('PIPELINE_SLOWER', 'PIPELINE_HEAVIER', 'PIPELINE_FLOAT32', 'PIPELINE_MASKS', 'COMPATSHIM_DISABLE'):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


def _bench(capsys: Any, *args: str) -> tuple[int, list[str]]:
    code = _cli.main(['bench', '--pipeline', SPEC, *args])
    return code, capsys.readouterr().out.splitlines()


def _counts(result: dict[str, Any]) -> dict[str, Any]:
    """What a saved result counted, leg by leg: what the compares here judge."""
    kept = ('status', 'placement', 'calls_per_step', 'h2d_bytes_per_step', 'h2d_bytes_by_dtype', 'work')
    return {leg: {k: data.get(k) for k in kept} for leg, data in result['legs'].items()}


@pytest.mark.runs_in('family:host')
def test_the_committed_baseline_is_what_this_release_saves(user_repo: Path, capsys: Any) -> None:
    """Saved again on 0.26.1, the pipeline counts what the committed baseline holds, leg by leg: the baseline the later
    envs compare with is this release's."""
    assert COMPOSER == SAVED_ON
    code, lines = _bench(capsys, '--quick', '--save', 'again')
    assert code == 0, lines
    again = json.loads((user_repo / '.compatshim' / 'benchmarks' / 'again.json').read_text())
    committed = json.loads(BASELINE.read_text())
    stale = f'the committed baseline is stale; in this env, from tests/pipelines: {RECORD}'
    assert _counts(again) == _counts(committed), stale
    assert again['fingerprint']['size'] == committed['fingerprint']['size']


@pytest.mark.runs_in('family:dropped', 'family:rejected', 'forward')
def test_unchanged_code_passes_across_the_upgrade(user_repo: Path, capsys: Any) -> None:
    """Unchanged code after the upgrade: exit 0, nothing worsened and nothing improved; unpatched (on the host on
    0.26.1; never called on 0.27-0.28; a TypeError from 0.29) is said once as what the release does, never judged;
    the native legs that appeared likewise; the last line names the upgrade."""
    code, lines = _bench(capsys, '--quick', '--compare', 'before')
    text = '\n'.join(lines)
    assert code == 0, text
    assert not [line for line in lines if line.startswith(('REGRESSION', 'IMPROVED', 'GONE', 'NEW'))], text
    release = next(line for line in lines if line.startswith(f'RELEASE {SPEC} unpatched:'))
    assert f'Composer {SAVED_ON}: host (1 call/step)' in release and 'not judged' in release, release
    now = 'never called (0 calls/step)' if FAMILY is Family.DROPPED else 'TypeError'
    assert f'Composer {COMPOSER}: {now}' in release, release
    assert any(line.startswith(f'RELEASE {SPEC} native-batch:') for line in lines), text
    assert f'upgraded: composer {SAVED_ON} -> {COMPOSER}' in lines[-1] and 'nothing worsened' in lines[-1], lines[-1]
    judged = lines[-1].split('legs judged: ')[1]
    assert 'shim-batch' in judged and 'shim-microbatch' in judged and 'unpatched' not in judged, lines[-1]


@pytest.mark.runs_in('family:dropped', 'family:rejected', 'forward')
def test_more_work_after_the_upgrade_fails_the_compare(
    user_repo: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twice the work after the upgrade exits 1 on each shim leg's work per call (it exited 0: counts across a release
    were not judged, and vetoed the timing that saw it); one more op over a tenth of the batch exits 1 too, or, where
    torch is another release and that op is one the baseline's torch never ran, says in one line per leg that the
    counts cannot tell it from another dispatch of torch's, leaving it to the timing."""
    legs = ('shim-batch', 'shim-microbatch')
    monkeypatch.setenv('PIPELINE_SLOWER', '2')
    code, lines = _bench(capsys, '--quick', '--compare', 'before')
    assert code == 1, lines
    for leg in legs:
        line = next(line for line in lines if line.startswith(f'REGRESSION {SPEC} {leg}: work per call'))
        assert 'more work per call' in line and 'bytes' in line, line
    monkeypatch.setenv('PIPELINE_SLOWER', '1')
    monkeypatch.setenv('PIPELINE_HEAVIER', '1')
    code, lines = _bench(capsys, '--quick', '--compare', 'before')
    worse = [line for line in lines if line.startswith('REGRESSION') and ': work per call' in line]
    unsure = [line for line in lines if line.startswith('INCONCLUSIVE') and 'cannot tell apart' in line]
    assert (code == 1 and len(worse) == len(legs)) or (code == 0 and len(unsure) == len(legs)), lines
    assert code == 1 or 'aten.mul_' in unsure[0], unsure
