"""The benchmark of the reference harness: ``compatshim bench`` measures, ``compatshim report`` judges and renders.

* :mod:`compatshim.bench.workload`: synthetic images, a small CNN, the transforms under test (torch).
* :mod:`compatshim.bench.measure`: the legs, measured interleaved in one process, their placement, coherence, bytes.
* :mod:`compatshim.bench.overhead`: the shim's own hook path, in µs per batch.
* :mod:`compatshim.bench.results`: the typed result, its JSON, baselines (no torch).
* :mod:`compatshim.bench.judge`: the comparison rule (no torch).
* :mod:`compatshim.bench.report`: the Markdown/JSON report and its charts (no torch; matplotlib for the charts).

Importing this package imports nothing heavy.
"""

__all__ = ['LEGS']

#: Every leg, in report order: what a user gets without the shim (``device_transforms`` where the release still
#: calls it, else the ``batch_transforms`` workaround, on the host), the shim at each stage, Composer's own
#: ``microbatch_transforms`` (0.27+), and stage batch with the in-run monitor attached (what the monitor costs).
LEGS: tuple[str, ...] = ('unpatched', 'shim-batch', 'shim-microbatch', 'native-microbatch', 'shim-batch+monitor')
