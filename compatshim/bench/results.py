"""What a bench run measured, typed, and where it is stored: results, baselines, and the directories that gather them.

A :class:`BenchResult` is one env's run (``compatshim bench --out``): per leg what ran where and how fast (per window
and per round), the recipe workload's bytes, and the overhead probes' raw samples. It is stored as JSON, the raw
samples included, so that any later rule can judge it again: every metric's samples are read from these fields by its
kind (:mod:`compatshim.bench.rule`). Imports nothing heavy (no torch), so results are read and judged anywhere.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional, Union

from compatshim._support import UNAFFECTED_FAMILY

__all__ = [
    'SCHEMA',
    'BaselineExistsError',
    'BenchResult',
    'LegResult',
    'Overheads',
    'PIPELINE_DIR',
    'PipelineResult',
    'Recipe',
    'Result',
    'UnreadableResult',
    'baseline_for',
    'baseline_path',
    'gather',
    'load_baseline',
    'load_pipeline',
    'pipeline_path',
    'quartiles',
    'record_baseline',
    'save_pipeline',
]

#: The result format; a result of another schema is refused with a message (re-measure it).
SCHEMA = 4
PathLike = Union[str, 'os.PathLike[str]']


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median and upper quartile of a non-empty sample (inclusive method)."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q1, _, q3 = statistics.quantiles(samples, n=4, method='inclusive')
    return q1, statistics.median(samples), q3


class UnreadableResult(ValueError):
    """A stored result that is not one this compatshim reads (another kind, another schema): the message says which."""


@dataclasses.dataclass
class LegResult:
    """One leg of a workload: how the transform was passed, where it ran, what crossed to the device, how fast.

    ``samples_per_s`` holds one value per timed window, ``round_s`` the leg's mean window in seconds per round (what
    the same-run ratios pair); both empty for an untimed leg (the recipe workload's).
    """

    description: str
    available: bool = True
    reason: str = ''  # why the leg is not available on this release
    placement: str = ''  # 'device', 'host', 'mixed' or 'never called', from two untimed steps on an observable device
    coherence: str = ''  # 'coherent' (one call per step) or 'per microbatch (N calls/step)'
    calls_per_step: float = 0.0
    h2d_bytes_per_step: int = 0
    h2d_bytes_by_dtype: dict[str, int] = dataclasses.field(default_factory=dict)
    samples_per_s: list[float] = dataclasses.field(default_factory=list)
    round_s: list[float] = dataclasses.field(default_factory=list)
    #: A pipeline's leg: per round, the ceiling leg's window taken right beside this leg's (its ratio's other side).
    beside_s: list[float] = dataclasses.field(default_factory=list)
    #: A pipeline's leg (``compatshim bench --pipeline``), per step, medians over its windows: the transform's time
    #: (ms), the time the trainer waited for data (ms) and that as a share of the step (``None``: not measured).
    transform_ms: Optional[float] = None
    wait_ms: Optional[float] = None
    wait_share: Optional[float] = None
    #: A pipeline's leg: the transform's share of the step, the median over windows of its time in the window over the
    #: window, both on the window's clock (so never above 1).
    transform_share: Optional[float] = None
    #: What the in-run monitor said of the 2 untimed steps (where each transform ran, its time per step).
    monitor: str = ''


@dataclasses.dataclass
class Overheads:
    """One overhead probe's raw samples: per sample, the seconds ``calls`` calls of compatshim's path took and the
    seconds as many calls of the direct path took right after, and the round the sample was taken in (1-based)."""

    calls: int
    path_s: list[float] = dataclasses.field(default_factory=list)
    direct_s: list[float] = dataclasses.field(default_factory=list)
    rounds: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Recipe:
    """The recipe workload (uint8 images): what crosses per leg, and what plain ``device_transforms`` does here."""

    legs: dict[str, LegResult]
    #: Plain ``DataSpec(device_transforms=fn)`` without the shim: ``{'outcome': device|host|fails|rejected, 'words'}``.
    plain: dict[str, str]

    @property
    def bytes_shim_vs_unpatched(self) -> Optional[float]:
        shim, unpatched = self.legs['shim-batch'].h2d_bytes_per_step, self.legs['unpatched'].h2d_bytes_per_step
        return shim / unpatched if unpatched else None


@dataclasses.dataclass
class BenchResult:
    """One env's bench run (see the README, "Benchmarks")."""

    env: str  # the matrix env, e.g. composer0.28.0-cpu
    composer: str
    torch: str
    device: str
    family: str  # a Family's value ('host', 'dropped', 'rejected'), or UNAFFECTED_FAMILY
    fingerprint: dict[str, Any]  # the machine and software it ran on (reported; the size and workload version compare)
    measured_at: str
    legs: dict[str, LegResult]  # the augment workload, timed
    recipe: Recipe
    #: The overhead probes' samples, by probe (``compatshim.bench.metrics.PROBES``; no hook probe where nothing is
    #: patched).
    overheads: dict[str, Overheads]
    patched_by_enable: list[str]  # what enable() patched here (nothing, on an unaffected release)
    planted_slowdown: float = 0.0
    planted_hook_us: float = 0.0
    elapsed_s: float = 0.0
    schema: int = SCHEMA

    @property
    def affected(self) -> bool:
        return self.family != UNAFFECTED_FAMILY

    @property
    def planted(self) -> bool:
        return bool(self.planted_slowdown or self.planted_hook_us)

    @property
    def planted_text(self) -> str:
        """What was planted, in words (``''``: nothing; a measurement)."""
        parts = [f'transform {self.planted_slowdown:.0%} slower'] if self.planted_slowdown else []
        parts += [f'+{self.planted_hook_us:g} µs per hook call'] if self.planted_hook_us else []
        return f'PLANTED: {", ".join(parts)}' if parts else ''

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchResult:
        """Read a stored result (keys it does not know, such as a report's judgements, are left out); a result of
        another schema is refused, naming it."""
        if not isinstance(data, dict) or data.get('schema') != SCHEMA:
            found = data.get('schema') if isinstance(data, dict) else type(data).__name__
            raise ValueError(f'a bench result of schema {found!r}, expected {SCHEMA}: measure it again')
        data = _known(cls, data)
        legs = {name: LegResult(**_known(LegResult, leg)) for name, leg in data.pop('legs').items()}
        recipe = data.pop('recipe')
        recipe = Recipe(
            {name: LegResult(**_known(LegResult, leg)) for name, leg in recipe['legs'].items()}, recipe['plain']
        )
        overheads = {name: Overheads(**_known(Overheads, found)) for name, found in data.pop('overheads').items()}
        return cls(legs=legs, recipe=recipe, overheads=overheads, **data)


@dataclasses.dataclass
class PipelineResult:
    """One run of ``compatshim bench --pipeline``: the user's pipeline, leg by leg, on the installed Composer.

    ``legs`` are :class:`LegResult` s (``unpatched``, ``native-batch``, ``native-microbatch``, ``shim-batch``,
    ``shim-microbatch`` where the release has them, and ``ceiling``: the same steps on batches already transformed and
    on the device); ``round_s`` of each is its mean window per round, what its ratio to the ceiling pairs.
    """

    pipeline: str  # MODULE:CALLABLE
    composer: str
    torch: str
    device: str
    family: str
    #: What it ran on (versions, device, git commit of the user's repository), and what must match for a baseline to
    #: compare (``compatshim.bench.metrics.PIPELINE_COMPARABLE_BY``).
    fingerprint: dict[str, Any]
    measured_at: str
    steps: int  # per window
    legs: dict[str, LegResult]
    #: The verdicts, in words (the shim's factor, batch against microbatch, input-bound or not).
    verdicts: list[str] = dataclasses.field(default_factory=list)
    elapsed_s: float = 0.0
    kind: str = 'pipeline'
    schema: int = SCHEMA

    @property
    def affected(self) -> bool:
        return self.family != UNAFFECTED_FAMILY

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineResult:
        """Read a stored pipeline result; another schema, or another kind of result, is refused, naming it."""
        if not isinstance(data, dict) or data.get('kind') != 'pipeline':
            raise UnreadableResult('it is not a result of compatshim bench --pipeline')
        if data.get('schema') != SCHEMA:
            raise UnreadableResult(
                f'it is a pipeline result of schema {data.get("schema")}; this compatshim reads {SCHEMA}'
            )
        data = _known(cls, data)
        legs = {name: LegResult(**_known(LegResult, leg)) for name, leg in data.pop('legs').items()}
        return cls(legs=legs, **data)


#: A result the rule judges: one release's reference bench, or one run of a user's pipeline.
Result = Union[BenchResult, PipelineResult]

#: Where ``compatshim bench --pipeline --save/--compare`` keep baselines, in the repository it runs from.
PIPELINE_DIR = Path('.compatshim') / 'benchmarks'
#: A saved pipeline baseline's name: letters, digits, ``.``, ``_``, ``-`` (it is a file name).
PIPELINE_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$')


def pipeline_path(directory: PathLike, name: str) -> Path:
    """Where the pipeline baseline ``name`` lives: ``<directory>/<name>.json``.

    Raises:
        ValueError: ``name`` is not a plain file name (the message says what is allowed).
    """
    if not PIPELINE_NAME.match(name):
        raise ValueError(f'{name!r} is not a baseline name; use letters, digits, ".", "_" and "-" (e.g. main)')
    return Path(directory) / f'{name}.json'


def save_pipeline(result: PipelineResult, directory: PathLike, name: str) -> Path:
    """Write ``result`` as the pipeline baseline ``name`` (replacing one of that name)."""
    path = pipeline_path(directory, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=1) + '\n')
    return path


def load_pipeline(directory: PathLike, name: str) -> PipelineResult:
    """The pipeline baseline ``name``.

    Raises:
        ValueError: It does not exist, or cannot be read (the message names it and how to save one).
    """
    path = pipeline_path(directory, name)
    if not path.is_file():
        raise ValueError(f'no baseline {name!r} in {Path(directory).as_posix()}; save one with --save {name}')
    try:
        return PipelineResult.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = exc if isinstance(exc, UnreadableResult) else f'{type(exc).__name__}: {exc}'
        raise ValueError(f'{path.as_posix()} cannot be used: {reason}; save it again with --save {name}') from exc


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that ``cls`` has fields for (a stored result may hold fields since retired)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in fields}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def gather(paths: Iterable[PathLike]) -> list[BenchResult]:
    """Every result under ``paths`` (files or directories, searched for ``*.json``; a ``report.json`` gives the
    results it holds, without the judgements recorded beside them), sorted by device, Composer release, torch.

    Raises:
        ValueError: A path is missing, or a file is neither a bench result nor a report (the message names it).
    """
    from packaging.version import Version

    found: list[BenchResult] = []
    for root in map(Path, paths):
        if not root.exists():
            raise ValueError(f'{root}: no such file or directory')
        files = sorted(root.rglob('*.json')) if root.is_dir() else [root]
        for file in files:
            try:
                data = json.loads(file.read_text())
                entries = data['results'] if isinstance(data, dict) and 'results' in data else [data]
                found += [BenchResult.from_json(entry) for entry in entries]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f'{file} is neither a bench result (compatshim bench --out) nor a report: {exc}'
                ) from exc
    return sorted(found, key=lambda r: (r.device, Version(r.composer), Version(r.torch.split('+')[0])))


class BaselineExistsError(FileExistsError):
    """Recording would overwrite a baseline; pass ``replace=True`` (``--replace``) to do that on purpose."""


def baseline_path(root: PathLike, device: str, env: str) -> Path:
    """Where the baseline of one env lives: ``<root>/<device>/<env>.json`` (``env`` includes the device)."""
    return Path(root) / device / f'{env}.json'


def load_baseline(root: PathLike, result: BenchResult) -> Optional[BenchResult]:
    """The recorded baseline of ``result``'s env, or ``None``."""
    path = baseline_path(root, result.device, result.env)
    return BenchResult.from_json(json.loads(path.read_text())) if path.exists() else None


def baseline_for(root: PathLike, result: BenchResult) -> tuple[Optional[BenchResult], Optional[str]]:
    """``result``'s baseline under ``root``, and the line that fails the run when there is none to judge against: one
    that cannot be read (another schema), or none although its device has some (a renamed env, or a forgotten
    ``--record``). The one rule of ``compatshim report`` and ``compatshim bench --baselines``. A device with no
    baselines at all is a first run: no line (its metrics are inconclusive)."""
    path = baseline_path(root, result.device, result.env)
    record = f'tox -e bench-{result.env},report -- --record'
    elsewhere = 'compatshim report --results RESULT.json --baselines DIR --out DIR --record'
    try:
        baseline = load_baseline(root, result)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, (
            f'UNREADABLE BASELINE {result.env}: {path.as_posix()}: {exc}; re-record it: {record} --replace (outside '
            f'the matrix: {elsewhere} --replace)'
        )
    if baseline is not None or not any(path.parent.glob('*.json')):
        return baseline, None
    return None, (
        f'MISSING BASELINE {result.env}: {path.parent.as_posix()} holds baselines, but none for this env (a renamed '
        f'env, or a forgotten --record); record it: {record} (outside the matrix: {elsewhere})'
    )


def record_baseline(result: BenchResult, root: PathLike, replace: bool = False) -> Path:
    """Write ``result`` as the baseline of its env; never overwrites one unless ``replace``.

    Raises:
        BaselineExistsError: A baseline exists and ``replace`` is false.
        ValueError: The result has a planted slowdown (a check of the gate, not a measurement).
    """
    if result.planted:
        raise ValueError(f'{result.env}: a run with a planted slowdown cannot be recorded as a baseline')
    path = baseline_path(root, result.device, result.env)
    if path.exists() and not replace:
        raise BaselineExistsError(f'{result.env}: a baseline exists at {path}; pass --replace to overwrite it')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=1) + '\n')
    return path
