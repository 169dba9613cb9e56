"""Ranks under Composer's own launcher (gloo on the CPU): each rank placed and coherent, shards disjoint.

Two topologies — one node of 2 ranks (``composer -n 2``), and two nodes of 2 ranks simulated on this machine by two
launcher invocations (``--world_size 4 --nproc 2 --node_rank 0|1 --master_addr 127.0.0.1``) — and three legs: the
script enables the shim itself (``shim``), a script that never mentions compatshim is started under
``compatshim run --monitor`` (``run``: the shim and the in-run monitor on every rank, nothing edited), and neither
(``control``, strict xfail on affected releases). Each launch costs a launcher and its ranks, each importing Composer,
so each runs where it can differ: one node under ``compatshim run`` where the control runs (the host family) and on the
newest release (and on the forward-compat torch, whose ``torch.distributed`` is another), the script's own ``enable()``
once (a dropped release: how a rank enables does not depend on the family), the control once (the host family, where a
wrong placement is what fails), and two nodes once (the newest release). On the unaffected release nothing is patched
on any rank; what the shim patches per family is every release's in-process tests'. All launches of an env run
concurrently.

Coherence is per rank, as in 0.24.1: Composer seeds each rank with seed + rank, so each rank draws its own
parameters once per step, and every microbatch on that rank carries that rank's draw.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import CONTROL, DEVICE, runs_here

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(
        DEVICE != 'cpu', reason='several ranks on one accelerator need several devices; the cpu legs use gloo'
    ),
]
JOB = Path(__file__).resolve().parents[1] / 'multirank_job.py'
ENABLED_JOB = JOB.with_name('multirank_job_enabled.py')
TOPOLOGIES = {'one-node': (1, 2), 'two-nodes': (2, 2)}  # name -> (nodes, ranks per node)
#: (topology, leg) -> where it runs.
LAUNCHES: dict[tuple[str, str], tuple[str, ...]] = {
    ('one-node', 'shim'): ('family:dropped',),
    ('one-node', 'run'): ('family:host', 'family:rejected', 'forward'),
    ('one-node', 'control'): ('family:host',),
    ('two-nodes', 'run'): ('family:rejected',),
}


def _launcher() -> str:
    launcher = Path(sys.executable).parent / 'composer'
    if not launcher.exists():
        pytest.fail(f"Composer's launcher is not installed next to {sys.executable}")
    return str(launcher)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def _start(topology: str, leg: str, out: Path) -> list[subprocess.Popen]:  # type: ignore[type-arg]
    nodes, nproc = TOPOLOGIES[topology]
    env = {
        **os.environ,
        'OMP_NUM_THREADS': '1',
        'PYTHONPATH': os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get('PYTHONPATH', '')])
        ),
    }
    env.pop('COMPATSHIM_STAGE', None)
    prefix = [sys.executable, '-m', 'compatshim', 'run', '--monitor', '--'] if leg == 'run' else []
    port = _free_port()
    procs = []
    for node in range(nodes):
        multinode = (
            [
                '--world_size',
                str(nodes * nproc),
                '--node_rank',
                str(node),
                '--master_addr',
                '127.0.0.1',
                '--master_port',
                str(port),
            ]
            if nodes > 1
            else []
        )
        command = [
            *prefix,
            _launcher(),
            '-n',
            str(nproc),
            *multinode,
            '--stdout',
            str(out / 'rank{rank}.out'),
            '--stderr',
            str(out / 'rank{rank}.err'),
            str(ENABLED_JOB if leg == 'shim' else JOB),
            str(out),
        ]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


@pytest.fixture(scope='module')
def launches(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[list[int], str, Path]]:
    started = {}
    for (topology, leg), where in LAUNCHES.items():
        if runs_here(where):
            out = tmp_path_factory.mktemp(f'{topology}-{leg}')
            started[topology, leg] = (_start(topology, leg, out), out)
    done = {}
    for key, (procs, out) in started.items():
        outputs = [p.communicate(timeout=600)[0] for p in procs]
        done[key] = ([p.returncode for p in procs], '\n'.join(o[-2000:] for o in outputs), out)
    return done


@pytest.mark.parametrize(
    ('topology', 'leg'),
    [
        pytest.param(
            topology,
            leg,
            id=f'{leg}-{topology}',
            marks=[pytest.mark.runs_in(*where), *([CONTROL] if leg == 'control' else [])],
        )
        for (topology, leg), where in LAUNCHES.items()
    ],
)
def test_ranks(topology: str, leg: str, launches: dict[tuple[str, str], Any]) -> None:
    codes, output, out = launches[topology, leg]
    nodes, nproc = TOPOLOGIES[topology]
    world = nodes * nproc
    logs = '\n'.join(p.read_text()[-2000:] for p in sorted(out.glob('rank*.err')))
    if leg != 'control':
        assert codes == [0] * nodes, f'launcher(s) failed {codes}:\n{output}\n{logs}'
    results = [
        json.loads((out / f'rank{r}.json').read_text()) for r in range(world) if (out / f'rank{r}.json').exists()
    ]
    assert len(results) == world, f'every rank must finish:\n{output}\n{logs}'
    for result in results:
        assert result['world_size'] == world
        assert [c['placement'] for c in result['calls']] == ['device', 'device'], f'rank {result["rank"]}'
        assert result['forward_placements'] == ['device']
        for call, rows in zip(result['calls'], result['steps']):
            assert {draw for draw, _ in rows} == {call['draw']}, f'rank {result["rank"]}: microbatches disagree'
            assert [int(i) for _, i in rows] == call['ids']
        assert result['enabled_by_script'] is (leg == 'shim')
        if leg == 'run':  # the monitor compatshim run attached: each rank logs its own figures, no collective
            metrics = result['metrics']
            assert result['callbacks'].count('TransformMonitor') == 1, result['callbacks']
            assert metrics['data/train/device_transforms/calls'] == [1, 1], f'rank {result["rank"]}: {metrics}'
            assert metrics['data/train/device_transforms/on_device'] == [1.0, 1.0]
            assert all(n > 0 for n in metrics['data/train/bytes_to_device']) and metrics['data/train/steps'] == [2]
    shards = [{i for c in r['calls'] for i in c['ids']} for r in results]
    assert all(not (a & b) for n, a in enumerate(shards) for b in shards[n + 1 :]), 'the ranks must see disjoint shards'
    assert len({r['calls'][0]['draw'] for r in results}) == world, 'each rank draws its own parameters'
