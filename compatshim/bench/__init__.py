"""The benchmark (docs/harness.md): one engine for the reference workload and your own pipeline. Importing it imports
nothing heavy; ``Pipeline`` imports torch when first used.
"""

from typing import Any

from compatshim.bench.metrics import LEGS

__all__ = ['LEGS', 'Pipeline']


def __getattr__(name: str) -> Any:
    if name == 'Pipeline':  # the engine imports torch: only when asked for
        from compatshim.bench.engine import Pipeline

        return Pipeline
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
