"""Two ranks under Composer's own launcher (``composer -n 2``; gloo on the CPU): each rank placed and coherent.

Coherence is per rank, as in 0.24.1: Composer seeds each rank with seed + rank, so each rank draws its own
parameters once per step, and every microbatch on that rank carries that rank's draw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEVICE, LEGS

pytestmark = pytest.mark.device
JOB = Path(__file__).resolve().parent / 'multirank_job.py'


def _launcher() -> str:
    launcher = Path(sys.executable).parent / 'composer'
    if not launcher.exists():
        pytest.fail(f"Composer's launcher is not installed next to {sys.executable}")
    return str(launcher)


@pytest.mark.skipif(DEVICE != 'cpu', reason='two ranks on one accelerator need two devices; the cpu leg uses gloo')
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_two_ranks(leg: str, tmp_path: Path) -> None:
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONPATH': os.pathsep.join(filter(None, [
        str(Path(__file__).resolve().parents[1]), os.environ.get('PYTHONPATH', '')]))}
    proc = subprocess.run(
        [_launcher(), '-n', '2', '--stdout', str(tmp_path / 'rank{rank}.out'), '--stderr', str(tmp_path / 'rank{rank}.err'),
         str(JOB), leg, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    logs = '\n'.join(p.read_text()[-2000:] for p in sorted(tmp_path.glob('rank*.err')))
    if leg == 'shim':
        assert proc.returncode == 0, f'launcher failed ({proc.returncode}):\n{proc.stderr[-2000:]}\n{logs}'
    results = [json.loads((tmp_path / f'rank{r}.json').read_text()) for r in range(2) if (tmp_path / f'rank{r}.json').exists()]
    assert len(results) == 2, f'both ranks must finish:\n{proc.stderr[-2000:]}\n{logs}'
    for result in results:
        assert result['world_size'] == 2
        assert [c['placement'] for c in result['calls']] == ['device', 'device'], f"rank {result['rank']}"
        assert result['forward_placements'] == ['device']
        for call, rows in zip(result['calls'], result['steps']):
            assert {draw for draw, _ in rows} == {call['draw']}, f"rank {result['rank']}: microbatches disagree"
            assert [int(i) for _, i in rows] == call['ids']
    ids = [set(i for c in r['calls'] for i in c['ids']) for r in results]
    assert not ids[0] & ids[1], 'the ranks must see disjoint shards'
    assert results[0]['calls'][0]['draw'] != results[1]['calls'][0]['draw'], 'each rank draws its own parameters'
