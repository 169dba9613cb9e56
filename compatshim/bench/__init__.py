"""The throughput benchmark of the reference harness: ``compatshim bench`` and ``compatshim report``.

* :mod:`compatshim.bench.workload`: synthetic images, a small CNN, a heavy batch-coherent augmentation (torch).
* :mod:`compatshim.bench.run`: the legs, measured interleaved in one process, and their placement and coherence.
* :mod:`compatshim.bench.compare`: baselines and the noise-aware rule with four verdicts (no torch).
* :mod:`compatshim.bench.report`: the aggregated Markdown/JSON/PNG report (no torch; matplotlib for the PNG).

Importing this package imports nothing heavy.
"""

__all__ = ['LEGS']

#: Every leg, in report order: what a user gets without the shim (``device_transforms`` where the release still
#: calls it, else the ``batch_transforms`` workaround, on the host), the shim at each stage, Composer's own
#: ``microbatch_transforms`` (0.27+), and no transform at all (the cost floor).
LEGS: tuple[str, ...] = ('unpatched', 'shim-batch', 'shim-microbatch', 'native-microbatch', 'no-transform')
