"""A training script for Composer's launcher: ``composer -n 2 tests/multirank_job.py shim|plain OUT_DIR``.

With ``shim`` each rank enables the shim itself (patches do not cross process boundaries); with ``plain`` it does not
(the control, or a run under ``compatshim run``). Each rank trains 2 steps on its shard with microbatches of 2, and
writes what its transform and model saw to ``OUT_DIR/rank<N>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compatshim

leg, out = sys.argv[1], Path(sys.argv[2])
if leg == 'shim':
    compatshim.enable()

from composer.core import DataSpec  # noqa: E402
from composer.utils import dist  # noqa: E402
from device import make_device  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from workload import Probe, dataset, steps, trainer  # noqa: E402

data = dataset(16 * dist.get_world_size())
loader = DataLoader(data, batch_size=8, sampler=dist.get_sampler(data, shuffle=False))
probe = Probe()
t, recorder = trainer(
    make_device(),
    train_dataloader=DataSpec(loader, device_transforms=probe),
    max_duration='2ba',
    device_train_microbatch_size=2,
)
t.fit()
result = {
    'rank': dist.get_global_rank(),
    'world_size': dist.get_world_size(),
    'calls': [vars(c) for c in probe.calls],
    'steps': [x[:, [0, 2]].tolist() for x in steps(recorder, 4)],
    'forward_placements': sorted({p for p, _ in recorder.seen}),
    'enabled_by_script': leg == 'shim',
    'verdict': compatshim.status().verdict.value,
    'patched': bool(compatshim.status().patches),
}
(out / f'rank{dist.get_global_rank()}.json').write_text(json.dumps(result))
print('rank', result['rank'], 'done', os.getpid())
