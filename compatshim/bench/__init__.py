"""The benchmark: one engine for the reference workload (``compatshim bench``) and your own pipeline (``--pipeline``).

* :mod:`compatshim.bench.metrics`: the legs and the metrics, one table each (no torch).
* :mod:`compatshim.bench.rule`: the kinds of metric, the comparison rule and the judge (no torch).
* :mod:`compatshim.bench.results`: the result record, its JSON, the baseline store (no torch).
* :mod:`compatshim.bench.engine`: legs checked and timed, the schedule, the round loop, the window timer (torch).
* :mod:`compatshim.bench.workload`: the built-in reference pipelines, ``augment`` and ``recipe`` (torch).
* :mod:`compatshim.bench.reference`: ``compatshim bench``: the reference pipelines and the probes, on the engine.
* :mod:`compatshim.bench.overhead`: the probes: compatshim's own paths against the direct path.
* :mod:`compatshim.bench.pipeline`: ``compatshim bench --pipeline``: your pipeline on the engine, its verdicts, its
  gate (:func:`~compatshim.bench.pipeline.run`); :class:`Pipeline`.
* :mod:`compatshim.bench.report`: the Markdown/JSON report and its charts (no torch; matplotlib for the charts).

Importing this package imports nothing heavy; ``compatshim.bench.Pipeline`` imports torch when it is first used.
"""

from typing import Any

from compatshim.bench.metrics import LEGS

__all__ = ['LEGS', 'Pipeline']


def __getattr__(name: str) -> Any:
    if name == 'Pipeline':  # the engine imports torch: only when asked for
        from compatshim.bench.engine import Pipeline

        return Pipeline
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
