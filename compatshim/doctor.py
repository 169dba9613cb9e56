"""``compatshim doctor``: am I affected, and does the shim fix it here, on my device, now? (docs/doctor.md)

Its live self-check runs in a child process, so that the calling process's shim state is exactly what it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Sequence
from typing import Any, Optional

from compatshim import _exits
from compatshim.config import settings as _settings
from compatshim.config.support import Family
from compatshim.devices.accelerator import ACCELERATORS, accelerator, best_present
from compatshim.errors import CompatShimWarning
from compatshim.shim import api
from compatshim.shim.api import Verdict
from compatshim.shim.registry import STATE

__all__ = ['SelfCheck', 'conclude', 'diagnose', 'text']

#: The doctor's exit codes (every command's are in :mod:`compatshim._exits`).
EXIT_OK, EXIT_AFFECTED, EXIT_UNKNOWN, EXIT_NOT_FIXED = _exits.OK, _exits.AFFECTED, _exits.NOT_DONE, _exits.NOT_FIXED


@dataclasses.dataclass
class SelfCheck:
    """One self-check run: where the probe saw its batch in each loop, and whether training was coherent."""

    shim: bool
    train: str = 'not run'
    eval: str = 'not run'
    predict: str = 'not run'
    coherent: Optional[bool] = None
    error: Optional[str] = None
    #: What the in-run monitor said, one line per loop.
    monitor: list[str] = dataclasses.field(default_factory=list)

    def fixed(self, stage: str) -> bool:
        """On the device in train, eval and predict, without error, and batch-coherent where the stage promises it."""
        placed = self.error is None and self.train == self.eval == self.predict == 'device'
        return placed and (self.coherent is True or (stage == 'microbatch' and self.shim))


class _Workload:
    """A loader of 16 samples with a probe ``device_transforms`` (train's puts one random draw per call in column 0),
    and a model that records what each training forward saw of that column."""

    def __init__(self) -> None:
        self.draws: list[float] = []
        self.seen: list[Any] = []

    def model(self) -> Any:
        import torch
        from composer.models import ComposerClassifier

        seen = self.seen

        class Spy(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                if self.training:
                    seen.append(x[:, 0].detach().cpu().clone())
                return x

        return ComposerClassifier(torch.nn.Sequential(Spy(), torch.nn.Linear(4, 2)), num_classes=2)

    def spec(self, mode: str) -> Any:
        import torch
        from composer.core import DataSpec
        from torch.utils.data import DataLoader, TensorDataset

        def transform(batch: Any) -> Any:
            x, y = batch
            x = x.clone()
            if mode == 'train':
                self.draws.append(float(torch.rand(())))
                x[:, 0] = self.draws[-1]
            return x, y

        gen = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(16, 4, generator=gen), torch.randint(0, 2, (16,), generator=gen))
        return DataSpec(DataLoader(data, batch_size=8), device_transforms=transform)

    def coherent(self) -> bool:
        """One draw per step, and every microbatch of the step carries it."""
        return len(self.draws) == 2 and [float(v) for s in self.seen for v in s] == [
            d for d in self.draws for _ in range(8)
        ]


def _self_check(kind: str, shim: bool) -> SelfCheck:
    """A 2-step fit (microbatches of 4), an eval and a predict of the probe on ``kind``'s observable device: where each
    loop's transform ran comes from the in-run monitor; the probe only records its random draws (coherence)."""
    leg, work, monitor = SelfCheck(shim=shim), _Workload(), None
    try:
        from composer import Trainer

        from compatshim.monitor import TransformMonitor
        from compatshim.testing import observable_device

        monitor = TransformMonitor()  # imported before the DataSpecs are built: it knows what each was given
        trainer = Trainer(
            model=work.model(),
            device=observable_device(kind),
            max_duration='2ba',
            device_train_microbatch_size=4,
            train_dataloader=work.spec('train'),
            progress_bar=False,
            precision='fp32',
            seed=0,
            callbacks=[monitor],
        )
        trainer.fit()
        trainer.eval(eval_dataloader=work.spec('eval'))
        trainer.predict(work.spec('predict'))
    except Exception as e:  # noqa: BLE001 - the message is the finding (e.g. 0.29+ TypeError without the shim)
        leg.error = f'{type(e).__name__}: {e}'
    found = {} if monitor is None else {summary.label: summary for summary in monitor.summaries}
    for mode in ('train', 'eval', 'predict'):
        summary = found.get(mode)
        transform = None if summary is None else summary.transforms.get('device_transforms')
        setattr(leg, mode, transform.where if transform is not None else 'error' if leg.error else 'never called')
    leg.monitor = [summary.text for summary in found.values()]
    if work.draws and work.seen and not leg.error:
        leg.coherent = work.coherent()
    return leg


def _child_main(argv: Sequence[str]) -> int:
    """The self-check, in its own process: ``DEVICE|'' STAGE 0|1`` -> one JSON object on stdout."""
    device, stage, untested = argv[0] or None, argv[1], argv[2] == '1'
    out: dict[str, Any] = {'devices': {}, 'kind': None, 'missing': None, 'enable_error': None, 'patched': []}
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter('ignore')
        import composer  # noqa: F401 - first, so that a compatshim run hook fires now, and is undone just below

        api.disable()
        present = {name: found.is_host or found.absent() is None for name, found in ACCELERATORS.items()}
        kind = device or best_present().name
        out['devices'], out['kind'] = present, kind
        if not present[kind]:
            out['missing'] = f'--device {kind} was asked for, but torch finds no {kind} device here: cannot tell.'
        else:
            out['without_shim'] = dataclasses.asdict(_self_check(kind, shim=False))
            try:
                api.enable(stage, allow_untested=untested)
            except Exception as exc:  # noqa: BLE001 - the message is the finding (shape error, bad kill switch)
                out['enable_error'] = f'{type(exc).__name__}: {exc}'
            out['patched'] = list(api.status().patches)
            out['with_shim'] = dataclasses.asdict(_self_check(kind, shim=True))
    print(json.dumps(out))
    return 0


def _run_child(device: Optional[str], stage: str, untested: bool) -> dict[str, Any]:
    """Run :func:`_child_main` in this interpreter, on this process's exact ``sys.path``, without the run hook."""
    from compatshim._bootstrap import BOOTSTRAP_DIR, without_bootstrap

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != BOOTSTRAP_DIR]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(without_bootstrap(os.environ.get('PYTHONPATH', '')))}
    code = (
        'import json, sys; sys.path[:] = json.loads(sys.argv[1]); from compatshim.doctor import _child_main; '
        'sys.exit(_child_main(sys.argv[2:]))'
    )
    proc = subprocess.run(
        [sys.executable, '-c', code, json.dumps(path), device or '', stage, '1' if untested else '0'],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        return {'crashed': f'the self-check process exited {proc.returncode}: {proc.stderr.strip()[-800:]}'}


def diagnose(
    device: Optional[str] = None, *, stage: Optional[str] = None, allow_untested: Optional[bool] = None
) -> dict[str, Any]:
    """Gather the doctor's findings as a JSON-ready dict (its fields: docs/doctor.md).

    Never changes the calling process's shim state: the self-check runs in a child process.

    Args:
        device: ``cpu`` (the fake accelerator), ``cuda`` or ``mps``; default: the best one present.
        stage: The stage the with-shim leg enables; default: this process's stage if enabled, else ``enable()``'s.
        allow_untested: Check a release outside the support table; default: as this process was enabled, else
            ``enable()``'s default.
    """
    from compatshim._bootstrap import armed

    before = api.status()
    enabled_by = before.enabled_by or ('compatshim run' if armed() else None)
    settings = _settings.resolve(
        stage if stage is not None else before.stage,  # this process's stage, if enabled, counts as given
        allow_untested if allow_untested is not None else (True if STATE.allow_untested else None),
    )
    for message in settings.ignored:
        warnings.warn(message, CompatShimWarning, stacklevel=2)
    stage, untested = settings.stage, settings.allow_untested
    report: dict[str, Any] = {
        'python': platform.python_version(),
        'torch': before.torch_version,
        'composer': before.composer_version,
        'devices': {},
        'verdict': before.verdict.value,
        'family': before.family,
        'detail': before.detail,
        'stage': stage,
        'allow_untested': untested,
        'enabled_by': enabled_by,
        'would_patch': [],
        'kill_switch': os.environ.get(_settings.KILL_SWITCH),
        'self_check': None,
        'exit_code': EXIT_UNKNOWN,
        'summary': '',
    }
    if before.composer_version is None or before.torch_version is None:
        report['summary'] = 'Composer or torch is not installed: nothing to check.'
        return report
    if before.verdict is Verdict.UNSUPPORTED and not untested:
        report['summary'] = (
            f'Composer {before.composer_version} is outside the support table: cannot tell. Pass '
            '--allow-untested to check whether the shim patches it here.'
        )
        return report
    if before.family is not None:  # what enable() patches for its family, also under the kill switch
        from compatshim.shim import data_spec, loops

        report['would_patch'] = [*data_spec.targets(Family(before.family)), *loops.TARGETS]
    return _checked(report, _run_child(device, stage, untested), enabled_by, killed=settings.killed)


def _checked(report: dict[str, Any], child: dict[str, Any], enabled_by: Optional[str], killed: bool) -> dict[str, Any]:
    """``report`` with the child's self-check, the exit code and the summary (or why the child could not tell)."""
    if 'crashed' in child:
        report['summary'] = child['crashed']
        return report
    report['devices'], report['would_patch'] = child['devices'], child['patched'] or report['would_patch']
    if child['missing']:
        report['summary'] = child['missing']
        return report
    without, with_shim = SelfCheck(**child['without_shim']), SelfCheck(**child['with_shim'])
    legs = {key: child[key] for key in ('without_shim', 'with_shim', 'enable_error')}
    report['self_check'] = {'device': accelerator(child['kind']).label, **legs}
    report['exit_code'], report['summary'] = conclude(
        without, with_shim, report['stage'], enabled_by=enabled_by, killed=killed, enable_error=child['enable_error']
    )
    return report


def conclude(
    without: SelfCheck,
    with_shim: SelfCheck,
    stage: str,
    *,
    enabled_by: Optional[str],
    killed: bool,
    enable_error: Optional[str],
) -> tuple[int, str]:
    """The exit code and the one-line summary, from the two self-check legs and what enabled the shim in this process
    (``None``: nothing; the doctor's rules, in one place)."""
    if without.fixed('batch'):
        return EXIT_OK, 'Unaffected: device_transforms runs on the device.'
    if with_shim.fixed(stage) and not killed:
        if enabled_by is not None:
            return EXIT_OK, f'Affected; the shim fixes it here and is enabled in this process (by {enabled_by}).'
        return EXIT_AFFECTED, (
            'Affected; the shim fixes it here: add `import compatshim; compatshim.enable()` to your script, '
            'or start it with `compatshim run -- ...`.'
        )
    if killed:
        return EXIT_AFFECTED, (
            f'Affected; {_settings.KILL_SWITCH} is set, so enable() patches nothing here. Unset it to let the shim fix '
            'this.'
        )
    reason = f' ({enable_error})' if enable_error else ''
    return EXIT_NOT_FIXED, f'Affected, and the shim did NOT fix it here{reason}: please report this output.'


def text(report: dict[str, Any]) -> str:
    lines = [
        'compatshim doctor',
        f'  Python {report["python"]}, torch {report["torch"] or "not installed"}, '
        f'Composer {report["composer"] or "not installed"}',
    ]
    if report['devices']:
        lines.append('  devices: ' + ', '.join(f'{k}: {"yes" if v else "no"}' for k, v in report['devices'].items()))
    lines.append(f'  verdict: {report["verdict"]}' + (f' ({report["family"]} family)' if report['family'] else ''))
    lines.append(f'  {report["detail"]}')
    if report['would_patch']:  # Class.method
        lines.append('  enable() patches: ' + ', '.join('.'.join(t.rsplit('.', 2)[-2:]) for t in report['would_patch']))
    if report['family'] in ('dropped', 'rejected'):
        lines.append(
            '  build DataSpecs after enable() (or start the job with compatshim run): on this release one built '
            'before loses its device_transforms (0.27-0.28 drop it without a trace, 0.29+ raise TypeError)'
        )
    check, legs = report['self_check'], (('without shim', 'without_shim'), ('with shim', 'with_shim'))
    if check:
        lines.append(f'  self-check on {check["device"]} (2-step fit, eval, predict):')
        lines.append(f'    {"":14}{"train":14}{"eval":14}{"predict":14}coherent')
        for name, key in legs:
            leg = check[key]
            coherent = {True: 'yes', False: 'no', None: '-'}[leg['coherent']]
            lines.append(f'    {name:14}{leg["train"]:14}{leg["eval"]:14}{leg["predict"]:14}{coherent}')
            if leg['error']:
                lines.append(f'      {leg["error"][:160]}')
        lines.append('  what the in-run monitor (compatshim.monitor.TransformMonitor) saw:')
        for name, key in legs:
            for line in check[key].get('monitor') or ['(nothing: the run failed before a loop ended)']:
                lines.append(f'    {name}: {line}')
    lines.append(f'  result: {report["summary"]} (exit {report["exit_code"]})')
    return '\n'.join(lines)
