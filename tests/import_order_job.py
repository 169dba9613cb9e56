"""One import order of the bootstrap, the monitor and Composer, for ``tests/process/test_import_orders.py``.

    python import_order_job.py ORDER OUT.json

``ORDER`` names the order of the imports (as users write their first lines): ``monitor-first`` (``from
compatshim.monitor import TransformMonitor`` before ``import composer``, as the monitor's page shows),
``composer-first``, ``auto-first`` (``import compatshim.auto`` first, then the monitor) and ``monitor-then-auto``.
Then one Trainer is built (no step): the report says what enabled the shim, its verdict, and whether the Trainer got
a ``TransformMonitor`` without asking for one. Under Composer's launcher each rank writes ``OUT.json`` with its rank.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ORDERS = {
    'monitor-first': ('compatshim.monitor', 'composer'),
    'composer-first': ('composer', 'compatshim.monitor'),
    'auto-first': ('compatshim.auto', 'compatshim.monitor', 'composer'),
    'monitor-then-auto': ('compatshim.monitor', 'compatshim.auto', 'composer'),
}


def main() -> None:
    order, out = sys.argv[1], Path(sys.argv[2])
    import importlib

    for name in ORDERS[order]:
        importlib.import_module(name)

    import torch
    from composer import Trainer
    from composer.models import ComposerClassifier
    from composer.utils import dist

    import compatshim
    from compatshim.monitor import TransformMonitor

    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=dist.get_sampler(data))
    trainer = Trainer(
        model=ComposerClassifier(torch.nn.Linear(4, 2), num_classes=2),
        train_dataloader=loader,
        max_duration='1ba',
        progress_bar=False,
    )
    status = compatshim.status()
    rank = os.environ.get('RANK', '0')
    result = {
        'rank': rank,
        'verdict': status.verdict.value,
        'enabled_by': status.enabled_by,
        'monitors': sum(isinstance(cb, TransformMonitor) for cb in trainer.state.callbacks),
    }
    trainer.close()
    (out.with_name(f'{out.stem}.rank{rank}.json') if _ranks() > 1 else out).write_text(json.dumps(result))


def _ranks() -> int:
    return int(os.environ.get('WORLD_SIZE', '1'))


if __name__ == '__main__':
    main()
