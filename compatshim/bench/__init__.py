"""The benchmark: one engine (:mod:`~compatshim.bench.engine`) for the reference workload (``compatshim bench``,
:mod:`~compatshim.bench.reference` with its built-in pipelines in :mod:`~compatshim.bench.workload`) and your own
pipeline (``--pipeline``, :mod:`~compatshim.bench.pipeline`); the legs and metrics (:mod:`~compatshim.bench.metrics`),
every rule, the gate's and the verdicts' (:mod:`~compatshim.bench.rule`), the one gate (:mod:`~compatshim.bench.gate`),
the records and the store (:mod:`~compatshim.bench.results`), the work counted (:mod:`~compatshim.bench.work`) and
what people read (:mod:`~compatshim.bench.report`).
Importing it imports nothing heavy; ``Pipeline`` imports torch when first used.
"""

from typing import Any

from compatshim.bench.metrics import LEGS

__all__ = ['LEGS', 'Pipeline']


def __getattr__(name: str) -> Any:
    if name == 'Pipeline':  # the engine imports torch: only when asked for
        from compatshim.bench.engine import Pipeline

        return Pipeline
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
