"""Runs one generated program (:mod:`programs`) on a real Composer Trainer and returns its *trace*: what 0.24.1's
users could see.

A program is a dict of axis values. The job is tiny and deterministic (16 one-channel 8x8 images, batches of 8, two
batches per loop, the CPU fake accelerator, no random draw in any transform; an algorithm's draws seeded), so a trace is
a plain JSON value that compares as text between 0.24.1 (unshimmed) and an affected release (with the shim):

- ``calls``: per call of the user's transform, where its batch was, the batch's structure and size (and, where the
  program asks, whether ``state.batch`` was that batch);
- ``forwards``: per forward, what the model saw: the structure, where each tensor was, the features' shape and
  checksum;
- ``events``: where ``state.batch`` was at the events a callback records;
- ``reads``: what ``spec.device_transforms`` read after construction and after the run;
- ``moves``: per call of the user's own ``batch_to_device`` (a Device subclass's, or a wrapper on the instance), what
  it was given and where its tensors were;
- ``error``: the exception that ended the run: its class, first line, and the built-in classes it is an instance of.

This module imports torch and Composer.
"""

from __future__ import annotations

import copy
import functools
import pickle
import re
import warnings
from typing import Any, Optional

import torch
from device import make_device
from programs import RAISED
from torch.utils.data import DataLoader, Dataset

from compatshim.testing import placement

__all__ = ['run']

N, BATCH = 16, 8
#: The log one run writes into (reset by :func:`run`).
LOG: dict[str, Any] = {}


class Samples(Dataset):  # type: ignore[type-arg]
    """16 samples ``(x, y)``; ``x`` of 4 features, deterministic. ``bad`` makes one index raise ``KeyError``."""

    def __init__(self, bad: Optional[int] = None) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == self.bad:
            raise KeyError(f'sample {i} is missing')
        return (torch.arange(64, dtype=torch.float32) + i).reshape(1, 8, 8), torch.tensor(i % 2)


def _leaves(batch: Any) -> list[Any]:
    if isinstance(batch, (list, tuple)):
        return [leaf for item in batch for leaf in _leaves(item)]
    if isinstance(batch, dict):
        return [leaf for key in sorted(batch) for leaf in _leaves(batch[key])]
    return [batch]


def _kind(batch: Any) -> str:
    if isinstance(batch, (list, tuple)):
        return f'{type(batch).__name__}[{",".join(_kind(item) for item in batch)}]'
    if isinstance(batch, dict):
        return 'dict{' + ','.join(f'{k}:{_kind(batch[k])}' for k in sorted(batch)) + '}'
    return 'tensor' if isinstance(batch, torch.Tensor) else type(batch).__name__


def _x(batch: Any) -> torch.Tensor:
    """The batch's features: the first floating tensor."""
    return next(t for t in _leaves(batch) if isinstance(t, torch.Tensor) and t.is_floating_point())


def _places(batch: Any) -> list[str]:
    return [str(placement(t)) for t in _leaves(batch) if isinstance(t, torch.Tensor)]


# --- The user's transform: one core, given in several shapes ---------------------------------------------------------


def core(batch: Any, scale: float = 2.0) -> Any:
    """What every transform of a program does, by its ``effect``; it logs each call."""
    effect, calls = LOG['effect'], LOG['calls']
    call: dict[str, Any] = {'where': str(placement(batch)), 'kind': _kind(batch), 'n': len(_x(batch))}
    if effect == 'state_batch':
        call['state_is_batch'] = LOG['state'].batch is batch
    calls.append(call)
    k = len(calls)
    if effect == 'raises' and k == 2:
        raise ValueError(RAISED)
    x, y = batch[0], batch[1]
    if effect == 'moves':  # a tensor of its own, moved with the trainer's device
        x = x + LOG['state'].device.batch_to_device(torch.ones(x.shape[-1]))
    if effect == 'inplace':
        x.mul_(scale).add_(k)
        return batch
    x = x * scale + k
    if effect == 'restructure':  # a tuple for the collated list
        return (x, y)
    if effect == 'to_dict':
        return {'inputs': x, 'targets': y}
    if effect == 'host':  # what pack_padded_sequence needs: a part of the batch left on the host
        return [x, y.cpu()]
    return [x, y] if isinstance(batch, list) else type(batch)((x, y))


def function(batch: Any) -> Any:
    return core(batch)


class Augment:
    def apply(self, batch: Any) -> Any:
        return core(batch)


class Module(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.0), requires_grad=False)

    def forward(self, batch: Any) -> Any:
        return core(batch, float(self.scale))


class Table:
    """A callable object whose ``__getattr__`` looks names up in a dict (``KeyError`` for any other)."""

    def __init__(self) -> None:
        self.__dict__['_table'] = {'scale': 2.0}

    def __getattr__(self, name: str) -> Any:
        return self._table[name]

    def __call__(self, batch: Any) -> Any:
        return core(batch, self.scale)


def transform(kind: str) -> Any:
    if kind == 'function':
        return function
    if kind == 'lambda':
        return lambda batch: core(batch)
    if kind == 'partial':
        return functools.partial(core, scale=2.0)
    if kind == 'bound_method':
        return Augment().apply
    if kind == 'module':
        return Module()
    if kind == 'getattr_object':
        return Table()
    from torchvision.transforms import v2

    return v2.Compose([function])


# --- The DataSpec ----------------------------------------------------------------------------------------------------


def _split(batch: Any, size: int) -> list[Any]:
    if isinstance(batch, dict):
        parts = {k: torch.split(v, size) for k, v in batch.items()}
        return [dict(zip(parts, values)) for values in zip(*parts.values())]
    return [type(batch)(parts) for parts in zip(*(torch.split(t, size) for t in batch))]


def spec_class(kind: str) -> type:
    from composer.core import DataSpec

    if kind in ('plain', 'copy', 'pickle'):
        return DataSpec
    if kind == 'sub_method':

        class WithMethod(DataSpec):  # type: ignore[misc]
            def device_transforms(self, batch: Any) -> Any:
                LOG['calls'].append({'method': str(placement(batch))})
                return batch

        return WithMethod
    if kind == 'sub_property':

        class WithProperty(DataSpec):  # type: ignore[misc]
            @property
            def device_transforms(self) -> Any:
                LOG['property_reads'] = LOG.get('property_reads', 0) + 1
                return self._held

            @device_transforms.setter
            def device_transforms(self, fn: Any) -> None:
                self._held = fn

        return WithProperty
    if kind == 'own_default':

        class WithDefault(DataSpec):  # type: ignore[misc]
            def _default_device_transforms(self, batch: Any) -> Any:
                return core(batch)

        return WithDefault
    if kind == 'own_getattribute':

        class Logged(DataSpec):  # type: ignore[misc]
            def __getattribute__(self, name: str) -> Any:
                return super().__getattribute__(name)

        return Logged

    if kind == 'own_names':

        class Described(DataSpec):  # type: ignore[misc]  # its own uses of names 0.24.1 never read
            batch_transforms = ['flip', 'crop']  # what the collate applies, by name

            def microbatch_transforms(self) -> str:
                return 'no per-microbatch work'

        return Described
    if kind == 'delegating':

        class Delegating(DataSpec):  # type: ignore[misc]  # never runs the base __init__; asks an inner DataSpec
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.inner = DataSpec(*args, **kwargs)

            def __getattr__(self, name: str) -> Any:
                if name == 'inner':
                    raise AttributeError(name)
                return getattr(self.inner, name)

        return Delegating

    class Own(DataSpec):  # type: ignore[misc]  # never runs the base __init__
        def __init__(
            self, dataloader: Any, num_samples: Any = None, num_tokens: Any = None, device_transforms: Any = None
        ) -> None:
            self.dataloader, self.num_samples, self.num_tokens = dataloader, N, None
            self.device_transforms = device_transforms if device_transforms is not None else (lambda batch: batch)
            self.split_batch = _split
            self.get_num_samples_in_batch = lambda batch: len(_x(batch))
            self.get_num_tokens_in_batch = lambda batch, **kwargs: 0

    return Own


def build(p: dict[str, Any], fn: Any) -> Any:
    """The program's DataSpec, its transform given as the program says."""
    cls = spec_class(p['spec'])
    loader = DataLoader(Samples(9 if p['later'] == 'dataset' else None), batch_size=BATCH)
    given = p['given']
    if given == 'keyword':
        spec = cls(loader, device_transforms=fn)
    elif given == 'position':
        spec = cls(loader, None, None, fn)
    elif given == 'position5':  # and split_batch after it, as 0.24.1 ordered them
        spec = cls(loader, None, None, fn, _split)
    elif given == 'twice':  # by position and by keyword: a TypeError on 0.24.1
        spec = cls(loader, None, None, fn, device_transforms=fn)
    elif given == 'none':
        spec = cls(loader, device_transforms=None)
    else:
        spec = cls(loader)
    if given == 'assigned_before':
        spec.device_transforms = fn
    elif given == 'del':
        spec.device_transforms = fn
        del spec.device_transforms
    if p['spec'] == 'copy':
        spec = copy.copy(spec)
    elif p['spec'] == 'pickle':
        spec = pickle.loads(pickle.dumps(spec))
    return spec


def read(spec: Any, fn: Any) -> str:
    """What ``spec.device_transforms`` reads, in words (and, for a DataSpec describing its pipeline under the names
    0.27 took, what its own code reads there)."""
    if not isinstance(vars(type(spec)).get('batch_transforms'), list):
        return _read(spec, fn)
    try:
        own = f'{spec.batch_transforms!r} {spec.microbatch_transforms()!r}'
    except Exception as exc:  # noqa: BLE001
        own = f'raises {type(exc).__name__}'
    return f'{_read(spec, fn)}; own {own}'


def _read(spec: Any, fn: Any) -> str:
    try:
        value = spec.device_transforms
    except AttributeError:
        return 'missing'
    if value is fn:
        return 'given'
    if value is None:
        return 'None'
    probe = [torch.zeros(1, 1, 8, 8), torch.zeros(1)]
    calls = len(LOG['calls'])
    try:
        same = value(probe) is probe
    except Exception as exc:  # noqa: BLE001
        return f'raises {type(exc).__name__}'
    finally:
        del LOG['calls'][calls:]
    return 'identity' if same else f'other {type(value).__name__}'


# --- The trainer -----------------------------------------------------------------------------------------------------


def model(p: dict[str, Any]) -> Any:
    from composer.models import ComposerModel
    from torchmetrics import MeanMetric

    class Model(ComposerModel):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(1, 2)  # over the image's mean: any size an algorithm leaves
            self.metric = MeanMetric()

        def forward(self, batch: Any) -> torch.Tensor:
            x = _x(batch)
            sums = round(float(x.detach().cpu().double().sum()), 3)
            LOG['forwards'].append({'kind': _kind(batch), 'where': _places(batch), 'shape': list(x.shape), 'sum': sums})
            if p['later'] == 'model' and len(LOG['forwards']) == 2:
                raise ValueError('a bug in the model')
            x = x.flatten(1).mean(1, keepdim=True)
            return self.linear(x.to(self.linear.weight.device) if x.device != self.linear.weight.device else x)

        def loss(self, outputs: torch.Tensor, batch: Any, reduction: str = 'mean') -> torch.Tensor:
            per_sample = outputs.pow(2).mean(1)  # SelectiveBackprop asks per sample
            return per_sample if reduction == 'none' else per_sample.mean()

        def get_metrics(self, is_train: bool = False) -> dict[str, Any]:
            return {} if is_train else {'MeanMetric': self.metric}

        def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
            metric.update(outputs.detach().cpu().float().mean())

    return Model()


def callbacks(p: dict[str, Any], spec: Any, fn: Any) -> list[Any]:
    from composer.core import Callback, Event

    class Events(Callback):  # type: ignore[misc]
        def run_event(self, event: Event, state: Any, logger: Any) -> None:
            name = event.value
            if name == 'fit_start' and p['device'] == 'wrapped_fit_start':
                wrap(state.device)
            starts = ('batch_start', 'eval_batch_start', 'predict_batch_start')
            if name in starts and p['device'] == 'wrapped_mid_fit' and not LOG.get('wrapped'):
                LOG['wrapped'] = True
                wrap(state.device)
            if p['events'] != 'none' and name in (
                'after_dataloader',
                'before_forward',
                'eval_batch_start',
                'eval_before_forward',
                'predict_batch_start',
                'predict_before_forward',
            ):
                LOG['events'].append([name, _places(state.batch)])
                if p['events'] == 'move':  # a tensor of the callback's own, moved with the trainer's device
                    LOG['events'].append([f'{name} moved', _places(state.device.batch_to_device(torch.zeros(2)))])
            if name in ('batch_end', 'eval_batch_end', 'predict_batch_end') and p['given'] == 'callback':
                if not LOG.get('assigned'):
                    LOG['assigned'] = True
                    spec.device_transforms = fn
            if p['later'] == 'callback' and name in ('before_forward', 'eval_before_forward', 'predict_before_forward'):
                LOG['guards'] = LOG.get('guards', 0) + 1
                if LOG['guards'] == 2:
                    raise ValueError('the NaN guard found a NaN')

    return [Events()]


def trainer_class(p: dict[str, Any]) -> type:
    from composer import Trainer

    if p['trainer'] == 'plain':
        return Trainer

    class Mine(Trainer):  # type: ignore[misc]
        def _train_loop(self, *args: Any, **kwargs: Any) -> Any:
            return super()._train_loop(*args, **kwargs)

        def _eval_loop(self, *args: Any, **kwargs: Any) -> Any:
            return super()._eval_loop(*args, **kwargs)

        def predict(self, *args: Any, **kwargs: Any) -> Any:
            return super().predict(*args, **kwargs)

    return Mine


def _moved(batch: Any) -> None:
    LOG['moves'].append([_kind(batch), _places(batch)])


def _normalised(batch: Any) -> Any:
    """``batch`` with 1 added to every float tensor (a normalisation on the way: moving twice shows)."""
    if isinstance(batch, torch.Tensor):
        return batch + 1 if batch.is_floating_point() else batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(_normalised(item) for item in batch)
    if isinstance(batch, dict):
        return {key: _normalised(value) for key, value in batch.items()}
    return batch


def wrap(device: Any) -> None:
    """A transfer profiler's wrapper on ``device``'s own ``batch_to_device``: it logs each call."""
    inner = device.batch_to_device

    def batch_to_device(batch: Any) -> Any:
        _moved(batch)
        return inner(batch)

    device.batch_to_device = batch_to_device


def device_of(p: dict[str, Any], auto: bool) -> Any:
    """The trainer's Device as the program's user set it up (the ``device`` axis)."""
    base, kind = make_device(auto_microbatching=auto), p['device']
    if kind in ('counting', 'normalising'):

        class Users(type(base)):  # type: ignore[misc]
            def batch_to_device(self, batch: Any) -> Any:
                _moved(batch)
                moved = super().batch_to_device(batch)
                return _normalised(moved) if kind == 'normalising' else moved

        return Users()
    if kind == 'wrapped_before':
        wrap(base)
    return base


def algorithms(kind: str) -> list[Any]:
    """The program's Composer algorithm (the ``algorithm`` axis), set to act at every step of the 2-batch fit."""
    from composer import algorithms as a

    made = {
        'none': lambda: None,
        'selective_backprop': lambda: a.SelectiveBackprop(start=0, end=1, keep=0.5, interrupt=0, scale_factor=1),
        'colout': lambda: a.ColOut(p_row=0.25, p_col=0.25),
        'cutout': lambda: a.CutOut(num_holes=1, length=0.5),
        'mixup': lambda: a.MixUp(alpha=0.5),
        'label_smoothing': lambda: a.LabelSmoothing(smoothing=0.1),
        'progressive_resizing': lambda: a.ProgressiveResizing(initial_scale=0.5, finetune_fraction=0, delay_fraction=0),
    }[kind]()
    return [] if made is None else [made]


def _loop(p: dict[str, Any], spec: Any, fn: Any) -> None:
    microbatch = {'none': None, 'int': 2, 'auto': 'auto'}[p['microbatch']]
    kwargs: dict[str, Any] = {'seed': 17, 'progress_bar': False, 'precision': 'fp32', 'log_to_console': False}
    if microbatch is not None:
        kwargs['device_train_microbatch_size'] = microbatch
    kwargs['algorithms'] = algorithms(p['algorithm'])
    device = device_of(p, auto=microbatch == 'auto')
    loop, cls = p['loop'], trainer_class(p)
    cbs = callbacks(p, spec, fn)
    if loop == 'train':
        t = cls(model=model(p), device=device, train_dataloader=spec, max_duration='2ba', callbacks=cbs, **kwargs)
    else:
        t = cls(model=model(p), device=device, callbacks=cbs, **kwargs)
    LOG['state'] = t.state
    if loop == 'train':
        t.fit()
    elif loop == 'fit_args':
        t.fit(train_dataloader=spec, duration='1ba')
        if p['given'] == 'assigned_between':
            spec.device_transforms = fn
        t.fit(duration='1ba')
    elif loop in ('eval', 'eval_microbatch'):
        from composer.core import Evaluator

        own = {'device_eval_microbatch_size': 2} if loop == 'eval_microbatch' else {}
        t.eval(eval_dataloader=Evaluator(label='held', dataloader=spec, metric_names=['MeanMetric'], **own))
    else:
        t.predict(spec if loop == 'predict' else spec.dataloader, return_outputs=False)


def _error(exc: BaseException) -> dict[str, Any]:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ''
    bases = (ValueError, KeyError, TypeError, AttributeError, RuntimeError, IndexError, NotImplementedError)
    return {
        'type': type(exc).__qualname__,
        'line': re.sub(r'0x[0-9a-f]+', '0x?', text),
        'is': [base.__name__ for base in bases if isinstance(exc, base)],
        'notes': len(getattr(exc, '__notes__', ())),
    }


def run(p: dict[str, Any]) -> dict[str, Any]:
    """Run program ``p`` (with the shim as the caller left it) and return its trace."""
    LOG.clear()
    LOG.update(effect=p['effect'], calls=[], forwards=[], events=[], moves=[], state=None)
    fn = transform(p['transform'])
    trace: dict[str, Any] = {'reads': [], 'error': None, 'warned': []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        try:
            spec = build(p, None if p['given'] in ('callback', 'assigned_between') else fn)
            trace['reads'].append(read(spec, fn))
            _loop(p, spec, fn)
            trace['reads'].append(read(spec, fn))
        except Exception as exc:  # noqa: BLE001 (the trace says what ended the run)
            trace['error'] = _error(exc)
    from compatshim.errors import CompatShimWarning

    trace['warned'] = sorted({str(w.message)[:80] for w in caught if issubclass(w.category, CompatShimWarning)})
    trace.update(calls=LOG['calls'], forwards=LOG['forwards'], events=LOG['events'], moves=LOG['moves'])
    if 'property_reads' in LOG:  # 0.24.1's trainer read the attribute once per batch
        trace['property_reads'] = LOG['property_reads']
    LOG.clear()
    return trace
