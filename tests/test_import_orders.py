"""Every import/enable/disable order, each in a fresh interpreter (patches are process state).

The scripts run concurrently (one Popen each) to keep the matrix fast; each asserts inside its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import IS_AFFECTED

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = f"""
import sys
sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]
AFFECTED = {IS_AFFECTED!r}
def snapshot():
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer
    return [dict(vars(c)) for c in (DataSpec, Trainer)]
def same(a, b):
    return all(x.keys() == y.keys() and all(x[k] is y[k] for k in x) for x, y in zip(a, b))
def works():
    from composer.core import DataSpec
    from conftest_device import make_device
    from workload import Probe, loader, trainer
    probe = Probe()
    t, _ = trainer(make_device(), train_dataloader=DataSpec(loader(8), device_transforms=probe), max_duration='1ba')
    t.fit()
    assert [c.placement for c in probe.calls] == ['device'], probe.calls
"""

ORDERS: dict[str, str] = {
    'import-only-patches-nothing': """
        import compatshim
        assert 'composer' not in sys.modules and 'torch' not in sys.modules, 'import compatshim must stay light'
        s = compatshim.status()
        assert s.patches == () and s.stage is None
    """,
    'enable-before-import-composer': """
        import compatshim
        compatshim.enable()
        from composer import Trainer
        from composer.core import DataSpec
        works()
    """,
    'import-composer-then-enable': """
        from composer import Trainer
        from composer.core import DataSpec
        import compatshim
        compatshim.enable()
        import composer.trainer.trainer as module
        assert Trainer is module.Trainer
        works()
    """,
    'enable-disable-enable': """
        import compatshim
        import composer
        before = snapshot()
        compatshim.enable()
        compatshim.disable()
        assert same(before, snapshot())
        compatshim.enable(stage='microbatch')
        works()
        compatshim.disable()
        assert same(before, snapshot())
    """,
    'disable-before-enable': """
        import compatshim
        import composer
        before = snapshot()
        assert compatshim.disable().patches == ()
        assert same(before, snapshot())
        compatshim.enable()
        works()
    """,
    'enable-twice': """
        import compatshim
        a = compatshim.enable()
        b = compatshim.enable(stage='microbatch')
        assert a.patches == b.patches
        assert b.stage == ('microbatch' if AFFECTED else None)
        works()
    """,
}


@pytest.fixture(scope='module')
def runs() -> dict[str, Any]:
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    procs = {
        name: subprocess.Popen(
            [sys.executable, '-c', PRELUDE + textwrap.dedent(body)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, body in ORDERS.items()
    }
    return {name: (p.wait(timeout=300), p.stdout.read() if p.stdout else '') for name, p in procs.items()}


@pytest.mark.device
@pytest.mark.parametrize('order', list(ORDERS))
def test_order(order: str, runs: dict[str, Any]) -> None:
    code, output = runs[order]
    assert code == 0, f'{order} failed in a fresh interpreter:\n{output[-3000:]}'
