"""0.24.1's DataSpec where the generated conformance suite (tests/conformance) cannot reach: a property set between
fits (A, A, B, B), a read-only property, a result Composer cannot split, and the monitor leaving the attribute alone.
(Subclass methods, structure changes and the rest are axes of the generated programs.)

On 0.24.1 ``DataSpec.__init__`` sets ``self.device_transforms`` (through a subclass's property setter, if it has one;
shadowing a subclass's method), and the trainer reads the attribute at every batch, after the move, and never looks at
what the transform returns. Each test asserts 0.24.1's behaviour, at both stages, with a strict-xfail control leg
without the shim that fails on every affected release and passes on 0.24.1.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import COMPOSER, FAMILY, IS_AFFECTED, MICROBATCH, NEEDS_PATCH, STAGED_LEGS, make_device
from workload import Probe, any_batch_model, assert_on_device, loader, trainer

import compatshim
from compatshim.config.support import Family

pytestmark = pytest.mark.device

LEGS = STAGED_LEGS


def _fit(spec: Any) -> Any:
    t, _ = trainer(make_device(), device_train_microbatch_size=MICROBATCH)
    t.fit(train_dataloader=spec, duration='2ba')
    return t


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_subclass_property_with_a_setter(leg: str, per_step: int) -> None:
    """A at construction, B assigned between fits: 0.24.1 runs A, A, B, B on the device, through the property."""
    from composer.core import DataSpec

    class Held(DataSpec):
        @property
        def device_transforms(self) -> Any:
            return self._held

        @device_transforms.setter
        def device_transforms(self, fn: Any) -> None:
            self._held = fn

    first, second = Probe(), Probe()
    spec = Held(loader(32), device_transforms=first)
    assert spec.device_transforms is first and spec._held is first
    t = _fit(spec)
    spec.device_transforms = second
    assert spec.device_transforms is second
    t.fit(duration='2ba')
    assert_on_device(first, 2 * per_step, 'the property at construction')
    assert_on_device(second, 2 * per_step, 'the property set between fits')


#: Without the shim 0.25–0.26 assign the attribute in ``__init__`` as 0.24.1 did; 0.27+ never assign it.
ASSIGNS = [
    *LEGS[:2],
    pytest.param(
        'control',
        id='control',
        marks=[
            pytest.mark.control,
            pytest.mark.xfail(
                FAMILY in (Family.DROPPED, Family.REJECTED),
                strict=True,
                reason=f'control: Composer {COMPOSER} never assigns device_transforms in DataSpec.__init__',
                raises=pytest.fail.Exception,
            ),
        ],
    ),
]


@pytest.mark.parametrize('leg', ASSIGNS, indirect=True)
def test_a_subclass_property_without_a_setter_fails_in_the_constructor(leg: str) -> None:
    """0.24.1's ``__init__`` assigns the attribute: a read-only property makes the constructor fail."""
    from composer.core import DataSpec

    class ReadOnly(DataSpec):
        @property
        def device_transforms(self) -> Any:
            return lambda batch: batch

    with pytest.raises(AttributeError):
        ReadOnly(loader(16))


def _to_mapping(batch: Any) -> Any:
    """A mixup-style transform that changes the structure: (x, y) to a mapping of three."""
    x, y = batch
    return {'inputs': x * 2, 'targets': y, 'lam': torch.ones(len(x), device=x.device)}


class Opaque:
    """A batch object Composer's default split_batch cannot split."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x


@NEEDS_PATCH
def test_a_result_composer_cannot_split_gets_a_note() -> None:
    """Stage batch: where Composer's split cannot take what a transform returned, its own error propagates with a note
    naming the transform and both structures; an error of the user's own code later in the loop gets none."""
    from composer import Trainer
    from composer.core import DataSpec

    def wrap(batch: Any) -> Any:
        return Opaque(batch[0])

    compatshim.enable(stage='batch')
    t = Trainer(model=any_batch_model(lambda b: b.x), device=make_device(), device_train_microbatch_size=MICROBATCH,
                progress_bar=False, seed=17)  # fmt: skip
    spec = DataSpec(loader(16), device_transforms=wrap, get_num_samples_in_batch=lambda batch: 8)
    with pytest.raises(Exception) as info:
        t.fit(train_dataloader=spec, duration='1ba')
    assert not isinstance(info.value, compatshim.CompatShimError)
    (note,) = info.value.__notes__
    assert "'test_a_result_composer_cannot_split_gets_a_note.<locals>.wrap'" in note
    assert 'split_batch got' in note and 'a Opaque for a batch that was a list of 2' in note

    def bad_inputs(batch: Any) -> Any:
        raise ValueError('a bug in the model')

    t = Trainer(model=any_batch_model(bad_inputs), device=make_device(), progress_bar=False, seed=17)
    spec = DataSpec(loader(16), device_transforms=lambda batch: (batch[0] * 2, batch[1]))
    with pytest.raises(ValueError, match='^a bug in the model$') as raised:
        t.fit(train_dataloader=spec, duration='1ba')
    assert not getattr(raised.value, '__notes__', None), "an error of the user's own code got a note"


@pytest.mark.parametrize('shim', [pytest.param(True, marks=NEEDS_PATCH, id='shim'), pytest.param(False, id='off')])
def test_the_monitor_never_changes_what_the_attribute_reads(shim: bool) -> None:
    """With the monitor attached, ``spec.device_transforms is fn`` inside the transform and after the fit, on every
    release (0.24.1 and the releases the shim patches); and the monitor still counts the calls."""
    from composer.core import DataSpec

    from compatshim.monitor import TransformMonitor

    if not shim and IS_AFFECTED:
        pytest.skip(f'Composer {COMPOSER} without the shim does not run the transform as 0.24.1 did')
    if shim:
        compatshim.enable()
    reads: list[bool] = []
    holder: list[Any] = []

    def fn(batch: Any) -> Any:
        reads.append(holder[0].device_transforms is fn)
        return batch

    spec = DataSpec(loader(16), device_transforms=fn)
    holder.append(spec)
    monitor = TransformMonitor()
    t, _ = trainer(make_device(), callbacks=[monitor])
    t.fit(train_dataloader=spec, duration='2ba')
    assert reads == [True, True] and spec.device_transforms is fn
    assert monitor.summaries[-1].transforms['device_transforms'].calls == 2


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_subclass_that_uses_the_names_0_27_took_for_its_own(leg: str, per_step: int) -> None:
    """0.24.1 never read ``batch_transforms`` or ``microbatch_transforms``: a subclass written for it may keep its own
    lists of host transforms there (0.27+ call them: ``TypeError``), set after the base ``__init__`` or before it
    (0.27+'s ``__init__`` replaces it). With the shim it trains as on 0.24.1: what the class keeps there is its own and
    never called; a callable is said once (it could be meant for Composer), naming the class."""
    import warnings

    from composer.core import DataSpec

    class Described(DataSpec):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.batch_transforms = ['flip', 'crop']  # what the collate applies, by name
            self.microbatch_transforms = ('none',)

    class Kept(DataSpec):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.batch_transforms = kept_own  # before the base __init__: a callable the class applies itself
            super().__init__(*args, **kwargs)
            assert self.batch_transforms is kept_own

    class Lazy:  # a proxy whose every other attribute is fetched on demand (inspect's look at it raises)
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f'{name} not fetched')

        def __call__(self, batch: Any) -> Any:
            return batch

    class Proxied(DataSpec):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.microbatch_transforms = Lazy()

    probe, kept, proxied, kept_own = Probe(), Probe(), Probe(), Probe()
    _fit(Described(loader(32), device_transforms=probe))
    assert_on_device(probe, 2 * per_step, 'a subclass keeping its own list under batch_transforms')
    _fit(Proxied(loader(32), device_transforms=proxied))
    assert_on_device(proxied, 2 * per_step, 'a subclass keeping a proxy under microbatch_transforms')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _fit(Kept(loader(32), device_transforms=kept))
    assert_on_device(kept, 2 * per_step, 'a subclass keeping a callable under batch_transforms')
    assert not kept_own.calls, 'the trainer called what the class keeps under batch_transforms (0.24.1 never did)'
    said = [str(w.message) for w in caught if 'keeps its own batch_transforms' in str(w.message)]
    assert len(said) == (FAMILY in (Family.DROPPED, Family.REJECTED)), said


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_subclass_that_defines_the_names_0_27_took_on_its_class(leg: str, per_step: int) -> None:
    """A subclass written for 0.24.1 that describes its pipeline under ``batch_transforms`` (a class attribute) and
    ``microbatch_transforms(self)`` (a method), on a mixin, or as a read-only property: 0.27+'s ``__init__`` assigns
    both names on the instance, hiding the class's own from its code (``TypeError: _default_transforms() missing 1
    required positional argument``) and the shim's descriptor from the trainer (nothing on the device), or fails on the
    property. With the shim its code reads its own, the trainer runs Composer's, and the transform runs on the device,
    without a word."""
    import warnings

    from composer.core import DataSpec

    class Names:  # a mixin, as often as the subclass itself
        batch_transforms = ['flip', 'crop']

        def microbatch_transforms(self) -> str:
            return 'no per-microbatch work'

    class Described(Names, DataSpec):
        pass

    class ReadOnly(DataSpec):  # a read-only property: 0.27+'s __init__ cannot set it (AttributeError)
        @property
        def batch_transforms(self) -> list[str]:
            return ['flip', 'crop']

    for cls in (Described, ReadOnly):
        probe = Probe()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            spec = cls(loader(32), device_transforms=probe)
            assert spec.batch_transforms == ['flip', 'crop']
            _fit(spec)
        assert_on_device(probe, 2 * per_step, f'a subclass defining batch_transforms on its class ({cls.__name__})')
        assert spec.batch_transforms == ['flip', 'crop']
        assert not [w for w in caught if 'compatshim' in str(w.message)], [str(w.message) for w in caught]
    assert Described(loader(8)).microbatch_transforms() == 'no per-microbatch work'


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_a_subclass_that_defines_eq_and_so_no_hash(leg: str, per_step: int) -> None:
    """A subclass comparing by value (``__eq__`` without ``__hash__``, as a dataclass does) cannot be hashed: what the
    shim notes of a DataSpec is by identity, so it builds, trains and assigns as any other."""
    from composer.core import DataSpec

    class ByValue(DataSpec):
        def __eq__(self, other: object) -> bool:
            return isinstance(other, ByValue) and other.dataloader is self.dataloader

    probe = Probe()
    spec = ByValue(loader(32), device_transforms=probe)
    spec.batch_transforms = getattr(spec, 'batch_transforms', None)  # an assignment of a 0.27+ name, by user code
    _fit(spec)
    assert_on_device(probe, 2 * per_step, 'a DataSpec that cannot be hashed')
