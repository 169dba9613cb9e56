"""The benchmark of the reference harness: ``compatshim bench`` measures, ``compatshim report`` judges and renders.

* :mod:`compatshim.bench.metrics`: every metric, leg and comparability key, in one table (no torch).
* :mod:`compatshim.bench.workload`: synthetic images, a small CNN, the transforms under test (torch).
* :mod:`compatshim.bench.measure`: the legs, measured interleaved in one process, their placement, coherence, bytes.
* :mod:`compatshim.bench.overhead`: the shim's own hook path, in µs per batch.
* :mod:`compatshim.bench.results`: the typed result, its JSON, baselines (no torch).
* :mod:`compatshim.bench.judge`: the comparison rule (no torch).
* :mod:`compatshim.bench.report`: the Markdown/JSON report and its charts (no torch; matplotlib for the charts).

Importing this package imports nothing heavy.
"""

from compatshim.bench.metrics import LEGS

__all__ = ['LEGS']
