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
    'positions': 'Positional arguments where the installed release reads a position differently from 0.24.1 (0.27+): '
    "on 0.27–0.28 a call that gives `device_transforms` by position with more after it is read in 0.24.1's order; any "
    "other such call keeps the release's reading, with a `CompatShimWarning` (once) naming each position and the "
    'keyword to use.',
    'identity': "On 0.27+ the identity method of a DataSpec given no transform is Composer's `_default_transforms` "
    "(0.24.1's was `_default_device_transforms`; a subclass's own `_default_device_transforms` runs, as on 0.24.1).",
    'native': "On 0.27+, Composer's own `batch_transforms` and `microbatch_transforms` run too, around "
    '`device_transforms`, as that release runs them.',
    'microbatch': 'Stage `"microbatch"` (opted in): the transform runs once per microbatch, after its move, on the '
    'microbatch Composer split (a tuple for a list batch), so its calls, batch statistics and results are per '
    'microbatch, and the whole batch is never on the device (events before the move see it on the host).',
}
