"""A training script for Composer's launcher that never mentions the shim: ``composer -n 2 tests/multirank_job.py
OUT_DIR`` (the control, or a run under ``compatshim run [--monitor]``); ``tests/multirank_job_enabled.py`` is the same
script with the shim enabled by the script itself.

Each rank trains 2 steps on its shard with microbatches of 2, with Composer's ``InMemoryLogger``, and writes what its
transform and model saw, and every ``data/...`` metric its loggers received (the in-run monitor's, when one is
attached), to ``OUT_DIR/rank<N>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from composer.core import DataSpec
from composer.loggers import InMemoryLogger
from composer.utils import dist
from device import make_device
from torch.utils.data import DataLoader
from workload import Probe, dataset, steps, trainer

out = Path(sys.argv[1])
data = dataset(16 * dist.get_world_size())
loader = DataLoader(data, batch_size=8, sampler=dist.get_sampler(data, shuffle=False))
probe, logger = Probe(), InMemoryLogger()
t, recorder = trainer(
    make_device(),
    train_dataloader=DataSpec(loader, device_transforms=probe),
    max_duration='2ba',
    device_train_microbatch_size=2,
    loggers=[logger],
)
t.fit()
result = {
    'rank': dist.get_global_rank(),
    'world_size': dist.get_world_size(),
    'enabled_by_script': os.environ.get('MULTIRANK_JOB_ENABLED_BY_SCRIPT') == '1',
    'calls': [vars(c) for c in probe.calls],
    'steps': [x[:, [0, 2]].tolist() for x in steps(recorder, 4)],
    'forward_placements': sorted({p for p, _ in recorder.seen}),
    'callbacks': sorted(type(cb).__name__ for cb in t.state.callbacks),
    'metrics': {k: [v for _, v in values] for k, values in logger.data.items() if k.startswith('data/')},
}
(out / f'rank{dist.get_global_rank()}.json').write_text(json.dumps(result))
print('rank', result['rank'], 'done', os.getpid())
