"""Every deliberate difference from Composer 0.24.1 of code run with the shim: one list, read by the docs
(``docs/how-it-works.md``) and by the conformance suite (``tests/conformance``), which compares each generated
program's trace with 0.24.1's and accepts a difference only under one of these names."""

from __future__ import annotations

__all__ = ['DIFFERENCES']

#: Name → what differs, and why. Each is where 0.24.1 failed, or where a release cannot read a call as 0.24.1 did.
DIFFERENCES: dict[str, str] = {
    'del': '`del spec.device_transforms` (no attribute, as on 0.24.1) or an assigned `None` (reads `None`): the '
    "trainer runs no transform, where 0.24.1's trainer raised at the first batch.",
    'not-callable': "`DataSpec(device_transforms='not callable')`: `TypeError` naming the value at once, nothing "
    'built, where 0.24.1 raised at the first batch (an assigned value that is not callable fails at the first batch, '
    'as on 0.24.1).',
    'positions': "Positional arguments are read in 0.24.1's order on every release (0.29+ read position 3 as "
    '`batch_transforms`), with a `CompatShimWarning` (once) naming each position so read and the keyword for the '
    "release's own arguments; more positions than 0.24.1 took (it refused them) keep the release's reading.",
    'identity': "On 0.27+ the identity method of a DataSpec given no transform is Composer's `_default_transforms` "
    "(0.24.1's was `_default_device_transforms`; a subclass's own `_default_device_transforms` runs, as on 0.24.1).",
    'native': "On 0.27+, Composer's own `batch_transforms` and `microbatch_transforms` run too, around "
    '`device_transforms`, as that release runs them.',
    'built-before': 'A DataSpec built before `enable()` on 0.27+: 0.27–0.28 dropped its `device_transforms` argument '
    "(nothing is left to run; a `CompatShimWarning` at the trainer's first read of it says so) and 0.29+ refused it "
    '(`TypeError`); build DataSpecs after `enable()`, or start the job with `compatshim run` (`compatshim doctor` '
    'says so too). (On 0.25–0.26 such a DataSpec runs on the device.)',
    'wrapped-lookup': "On 0.25–0.26, a DataSpec subclass's own `__getattribute__` that wraps what `device_transforms` "
    'reads: its wrapper is called with the batch before the move (the trainer calls the attribute before moving, and '
    'the shim moves inside what the wrapper was given); the transform inside it runs on the device.',
    'moved-batch': 'At stage batch, a move of `state.batch` itself by your own code later in the step (a callback '
    'calling `state.device.batch_to_device(state.batch)`) gives it back as it is, without reaching your `Device`: it '
    "is on the device already, and is told from Composer's own later moves of it by what it is, not by who moves it "
    "(0.24.1 moved it again, which Composer's Devices do as a no-op). A move of anything else is your `Device`'s.",
    'microbatch': 'Stage `"microbatch"` (opted in): the transform runs once per microbatch, after its move, on the '
    'microbatch Composer split (a tuple for a list batch), so its calls, batch statistics and results are per '
    'microbatch (a transform failing at its Nth call fails sooner), and the whole batch is never on the device '
    '(events before the move, and algorithms there, see it on the host, untransformed).',
}
