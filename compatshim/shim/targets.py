"""compatshim's patches of Composer, one module per concern: ``data_spec`` and ``trainer`` (the shim's, on
``DataSpec.__init__`` and the Trainer's loops), ``watch`` (the monitor's observe-only note of each DataSpec). This layer
imports nothing above it (no monitor, no command line)."""

from compatshim.shim import data_spec, trainer

__all__ = ['TARGETS']

#: Every attribute ``enable()`` patches, dotted (the doctor lists them).
TARGETS: tuple[str, ...] = (data_spec.INIT_TARGET, data_spec.LOOKUP_TARGET, *trainer.TARGETS)
