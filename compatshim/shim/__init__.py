"""The shim's internals: what ``enable()`` does (:mod:`~compatshim.shim.api`), the one record of what is patched
(:mod:`~compatshim.shim.registry`), the one way to replace an attribute (:mod:`~compatshim.shim.patching`), the shape
checks, the hooks put on a DataSpec, the loop frames, the notes of each DataSpec, and the patches of Composer's
``DataSpec`` (:func:`compatshim.shim.data_spec.targets`) and ``Trainer`` (:data:`compatshim.shim.loops.TARGETS`).
Imports nothing above it: no monitor, no bench, no command line. Importing the package imports none of its modules."""
