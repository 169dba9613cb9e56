"""The benchmark: ``compatshim bench`` measures, ``compatshim report`` judges and renders.

* :mod:`compatshim.bench.metrics`: every metric, leg and comparability key, in one table (no torch).
* :mod:`compatshim.bench.rule`: the kinds of metric and the comparison rule (no torch).
* :mod:`compatshim.bench.workload`: synthetic images, a small CNN, the transforms under test (torch).
* :mod:`compatshim.bench.measure`: the reference workload's legs, measured interleaved in one process.
* :mod:`compatshim.bench.overhead`: compatshim's own paths (the shim's hooks, the monitor) against the direct path.
* :mod:`compatshim.bench.pipeline`: your own pipeline, leg by leg (``compatshim bench --pipeline``); :class:`Pipeline`.
* :mod:`compatshim.bench.timing`: per device kind, Composer's device, the clock, the wait for the device (torch).
* :mod:`compatshim.bench.results`: the typed results, their JSON, baselines (no torch).
* :mod:`compatshim.bench.judge`: the rule applied to a result (no torch).
* :mod:`compatshim.bench.report`: the Markdown/JSON report and its charts (no torch; matplotlib for the charts).

Importing this package imports nothing heavy; ``compatshim.bench.Pipeline`` imports torch when it is first used.
"""

from typing import Any

from compatshim.bench.metrics import LEGS

__all__ = ['LEGS', 'Pipeline']


def __getattr__(name: str) -> Any:
    if name == 'Pipeline':  # the pipeline module imports torch: only when asked for
        from compatshim.bench.pipeline import Pipeline

        return Pipeline
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
