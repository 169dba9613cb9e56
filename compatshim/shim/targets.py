"""Every attribute ``enable()`` patches: ``DataSpec``'s (:mod:`compatshim.shim.data_spec`) and the Trainer's loops
(:mod:`compatshim.shim.loops`). This layer imports nothing above it (no monitor, no command line)."""

from compatshim.shim import data_spec, loops

__all__ = ['TARGETS']

#: Every attribute ``enable()`` patches, dotted (the doctor lists them).
TARGETS: tuple[str, ...] = (data_spec.INIT_TARGET, data_spec.LOOKUP_TARGET, *loops.TARGETS)
