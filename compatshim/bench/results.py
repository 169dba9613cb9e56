"""What a bench run measured and where it is kept: one record (:class:`Result`, a :class:`LegResult` per leg, and
what only each bench has), stored as JSON with its raw samples so that a later rule can judge it again, and one
baseline store (:class:`Store`). Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Optional, Union

from compatshim.bench.work import Work
from compatshim.config.support import UNAFFECTED_FAMILY
from compatshim.observe.placement import Placement, Word

__all__ = [
    'SCHEMA', 'BenchResult', 'Cause', 'LegResult', 'Missing', 'PipelineResult', 'Result', 'Store', 'gather', 'read',
    'reference_store'
]  # fmt: skip

#: The result format; another schema is refused, naming it. 5: one record for both benches, one leg vocabulary.
SCHEMA = 5
#: The placement schema 5 stores for a leg that was never built (not on this release, or rejected).
UNAVAILABLE = 'unavailable'
PathLike = Union[str, 'os.PathLike[str]']


class UnreadableResult(ValueError):
    """A stored result this compatshim does not read: of another kind or ``schema`` (0.1.0 was never published: a
    result of an older schema is measured or saved again, never converted)."""

    def __init__(self, message: str, schema: Any = None) -> None:
        super().__init__(message)
        self.schema = schema


class Cause(Word):
    """Why a leg did not run on this release."""

    NOT_HERE = 'not on this release'  # the argument or the shim's stage does not exist on this release
    REJECTED = 'rejected'  # DataSpec raised TypeError (0.29+: device_transforms removed)
    FAILED = 'fails'  # the run raised (the model failed on what it was given)


@dataclasses.dataclass(frozen=True)
class Missing:
    """A leg that did not run: its cause and the line that says why. Every missing leg compares alike."""

    cause: Cause = dataclasses.field(compare=False)
    reason: str = dataclasses.field(compare=False)

    def __str__(self) -> str:
        return f'{UNAVAILABLE} ({self.reason})'


@dataclasses.dataclass
class LegResult:
    """One leg: placement, calls and bytes from the check steps (or why it did not run), and per timed round its mean
    window (``round_s``) and each partner's window beside it (``beside``, by the partner's name)."""

    description: str
    missing: Optional[Missing] = None
    placement: Placement = Placement.NEVER_CALLED
    calls_per_step: float = 0.0
    h2d_bytes_per_step: int = 0
    h2d_bytes_by_dtype: dict[str, int] = dataclasses.field(default_factory=dict)
    beside: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    round_s: list[float] = dataclasses.field(default_factory=list)
    samples_per_s: list[float] = dataclasses.field(default_factory=list)
    #: Per step, medians over the timed windows: the transform's ms and share of the window, the wait for data (ms,
    #: wall time) and its share.
    transform_ms: Optional[float] = None
    transform_share: Optional[float] = None
    wait_ms: Optional[float] = None
    wait_share: Optional[float] = None
    monitor: str = ''  # what the in-run monitor said of the check steps
    #: The transform's work per call in the check steps (``None``: none ran); ``work_failed``: why it was not counted.
    work: Optional[Work] = None
    work_failed: str = ''

    @property
    def available(self) -> bool:
        return self.missing is None

    @property
    def reason(self) -> str:
        return '' if self.missing is None else self.missing.reason

    @property
    def coherence(self) -> str:
        """One call per step keeps every batch-level draw shared: ``coherent``."""
        calls = self.calls_per_step
        if calls == 1:
            return 'coherent'
        return f'per microbatch ({calls:g} calls/step)' if calls else str(self.placement)

    def to_json(self) -> dict[str, Any]:
        """As schema 5 stores a leg (:data:`STORED`): one partner at most (``ValueError`` for two)."""
        if len(self.beside) > 1:
            raise ValueError(f'{self.description}: timed beside {", ".join(self.beside)}; a result holds one partner')
        built = self.missing is None or self.missing.cause is Cause.FAILED
        (partner, beside_s), *_ = [*self.beside.items(), ('', [])]
        stored = {
            **dataclasses.asdict(self),
            'status': str(self.missing.cause) if self.missing else 'ran',
            'reason': self.reason,
            'placement': self.placement if built else UNAVAILABLE,
            'partner': partner,
            'beside_s': list(beside_s),
        }
        counted = {'work': self.work.to_json()} if self.work is not None else {}
        failed = {'work_failed': self.work_failed} if self.work_failed else {}
        return {**{key: stored[key] for key in STORED}, **counted, **failed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LegResult:
        measured = cls(**known(cls, {k: v for k, v in data.items() if k != 'work'}))
        measured.work = Work.from_json(data['work']) if data.get('work') else None
        status, placement = data.get('status', 'ran'), data.get('placement', Placement.NEVER_CALLED)
        measured.missing = None if status == 'ran' else Missing(Cause(status), data.get('reason', ''))
        measured.placement = Placement.NEVER_CALLED if placement == UNAVAILABLE else Placement(placement)
        measured.beside = {data['partner']: list(data.get('beside_s', []))} if data.get('partner') else {}
        return measured


#: A leg's keys in a stored result (schema 5), in their order.
STORED = tuple(
    'description status reason placement calls_per_step h2d_bytes_per_step h2d_bytes_by_dtype partner round_s '
    'beside_s samples_per_s transform_ms transform_share wait_ms wait_share monitor'.split()
)


@dataclasses.dataclass
class Overheads:
    """One probe's raw samples: seconds of ``calls`` calls of compatshim's path and of the direct path, and the round
    (1-based) of each sample."""

    calls: int
    path_s: list[float] = dataclasses.field(default_factory=list)
    direct_s: list[float] = dataclasses.field(default_factory=list)
    rounds: list[int] = dataclasses.field(default_factory=list)

    def add(self, path_s: float, direct_s: float, round_: int) -> None:
        self.path_s.append(path_s)
        self.direct_s.append(direct_s)
        self.rounds.append(round_)


@dataclasses.dataclass
class Result:
    """One run of the engine on one release; Composer, torch and device are read from the fingerprint."""

    family: str  # a Family's value, or UNAFFECTED_FAMILY
    fingerprint: dict[str, Any]  # what it ran on, and what a baseline must match
    measured_at: str
    legs: dict[str, LegResult]
    elapsed_s: float = 0.0
    schema: int = SCHEMA
    kind: ClassVar[str] = ''
    command: ClassVar[str] = ''

    @property
    def composer(self) -> str:
        return str(self.fingerprint['composer'])

    @property
    def torch(self) -> str:
        return str(self.fingerprint['torch'])

    @property
    def device(self) -> str:
        return str(self.fingerprint['device'])

    @property
    def affected(self) -> bool:
        return self.family != UNAFFECTED_FAMILY

    @property
    def work_counting(self) -> Optional[int]:
        """How its work was counted (a result that does not say: 1); ``None``: it counted none."""
        legs = [*self.legs.values(), *self.legs_of(recipe=True).values()]
        return int(self.fingerprint.get('work_counting', 1)) if any(m.work for m in legs) else None

    def step_ms(self, name: str) -> list[float]:
        """A leg's step time per round, in ms (empty: not timed)."""
        measured, steps = self.legs.get(name), self.fingerprint['size']['steps']
        return [] if measured is None or not measured.available else [s * 1e3 / steps for s in measured.round_s]

    # What only the reference bench has: the recipe's legs, a probe's samples, what enable() patched.
    def legs_of(self, recipe: bool = False) -> dict[str, LegResult]:
        return {} if recipe else self.legs

    def probe(self, name: str) -> Optional[Overheads]:
        return None

    def patched(self) -> Optional[list[str]]:
        return None

    def to_json(self) -> dict[str, Any]:
        repeated = {'composer': self.composer, 'torch': self.torch, 'device': self.device}
        data = {'kind': self.kind, **repeated, **dataclasses.asdict(self)}
        for group in ('legs', 'recipe'):
            if group in data:
                data[group] = {name: measured.to_json() for name, measured in getattr(self, group).items()}
        return data

    @classmethod
    def from_json(cls, data: Any) -> Any:
        """A stored result of this kind at :data:`SCHEMA`; anything else is refused, saying what it is."""
        if not isinstance(data, dict) or not isinstance(data.get('fingerprint'), dict) or 'legs' not in data:
            raise UnreadableResult(f'it is not a result of {cls.command}')
        schema = data.get('schema', 'none')
        if schema != SCHEMA:
            newer = isinstance(schema, int) and schema > SCHEMA
            said = f'it is a result at schema {schema}; this compatshim reads {SCHEMA} only'
            raise UnreadableResult(said + (' (a newer compatshim wrote it: upgrade this one)' if newer else ''), schema)
        kinds: dict[str, type[Result]] = {BenchResult.kind: BenchResult, PipelineResult.kind: PipelineResult}
        kind = kinds.get(str(data.get('kind')))
        if kind is not cls:
            raise UnreadableResult(f'it is a result of {kind.command}, not of {cls.command}' if kind else
                                   f'it is not a result of {cls.command}')  # fmt: skip
        fields = known(cls, data)
        for group in ('legs', 'recipe'):
            if group in fields:
                fields[group] = {name: LegResult.from_json(stored) for name, stored in fields[group].items()}
        if 'overheads' in fields:
            fields['overheads'] = {n: Overheads(**known(Overheads, o)) for n, o in fields['overheads'].items()}
        return cls(**fields)


@dataclasses.dataclass
class BenchResult(Result):
    """One env's reference bench: the augment legs timed, the recipe's checked, the probes, what was planted."""

    env: str = ''  # the matrix env, e.g. composer0.28.0-cpu
    recipe: dict[str, LegResult] = dataclasses.field(default_factory=dict)
    overheads: dict[str, Overheads] = dataclasses.field(default_factory=dict)
    patched_by_enable: list[str] = dataclasses.field(default_factory=list)
    planted_slowdown: float = 0.0
    planted_hook_us: float = 0.0
    planted_work: bool = False  # both transforms one op heavier over a tenth of each batch
    planted_tensor_us: float = 0.0  # the monitor's byte counter slower per tensor moved
    kind: ClassVar[str] = 'bench'
    command: ClassVar[str] = 'compatshim bench'

    def legs_of(self, recipe: bool = False) -> dict[str, LegResult]:
        return self.recipe if recipe else self.legs

    def probe(self, name: str) -> Optional[Overheads]:
        return self.overheads.get(name)

    def patched(self) -> Optional[list[str]]:
        return self.patched_by_enable

    @property
    def planted(self) -> bool:
        return bool(self.planted_text)

    @property
    def planted_text(self) -> str:
        """What was planted, in words (``''``: nothing; a measurement)."""
        parts = [f'transform {self.planted_slowdown:.0%} slower'] if self.planted_slowdown else []
        parts += [f'+{self.planted_hook_us:g} µs per hook call'] if self.planted_hook_us else []
        parts += ['transforms one op heavier over a tenth of each batch'] if self.planted_work else []
        parts += [f'+{self.planted_tensor_us:g} µs per tensor the monitor counts'] if self.planted_tensor_us else []
        return f'PLANTED: {", ".join(parts)}' if parts else ''


@dataclasses.dataclass
class PipelineResult(Result):
    """One run of ``compatshim bench --pipeline``, with its verdicts in words."""

    verdicts: list[str] = dataclasses.field(default_factory=list)
    kind: ClassVar[str] = 'pipeline'
    command: ClassVar[str] = 'compatshim bench --pipeline'

    @property
    def pipeline(self) -> str:
        return str(self.fingerprint['pipeline'])

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        verdicts = data.pop('verdicts')
        return {**data, 'pipeline': self.pipeline, 'verdicts': verdicts}


def known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that ``cls`` has fields for (a stored result may hold retired ones)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in fields}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


class BaselineExistsError(FileExistsError):
    """Saving would overwrite a baseline that the caller did not ask to replace."""


#: A baseline's name: letters, digits, ``.``, ``_``, ``-`` (it is a file name).
NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$')
#: Where ``compatshim bench --pipeline --save/--compare`` keep baselines, in the repository it runs from.
PIPELINE_DIR = Path('.compatshim') / 'benchmarks'


class Store:
    """Baselines of one kind of result in ``<root>/<name>.json``, replaced only when the caller asks."""

    def __init__(self, root: PathLike, kind: type[Result]) -> None:
        self.root, self.kind = Path(root), kind

    def path(self, name: str) -> Path:
        """Where the baseline ``name`` (``main`` or ``main.json``) lives; ``ValueError``: not a plain file name."""
        if not NAME.match(name):
            raise ValueError(f'{name!r} is not a baseline name; use letters, digits, ".", "_" and "-" (e.g. main)')
        return self.root / (name if name.endswith('.json') else f'{name}.json')

    def absent(self, name: str) -> str:
        """What to say when there is no baseline ``name``: those there are, and the one a typo meant."""
        import difflib

        there = sorted(path.stem for path in self.root.glob('*.json') if NAME.match(path.stem))
        where = f'no baseline {name!r} in {self.root.as_posix()}'
        if not there:
            return f'{where} (it holds none yet); save one with --save {name}'
        held = f'{where}, which holds {", ".join(there)}'
        meant = difflib.get_close_matches(name, there, n=1)
        if meant:
            return f'{held}: did you mean --compare {meant[0]}? (--save {name} saves a new one)'
        return f'{held}; save one with --save {name}'

    def load(self, name: str) -> Optional[Any]:
        """The baseline ``name`` (``None``: none); :class:`UnreadableResult` if it cannot be read."""
        path = self.path(name)
        if not path.is_file():
            return None
        try:
            return self.kind.from_json(json.loads(path.read_text()))
        except UnreadableResult:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UnreadableResult(f'{type(exc).__name__}: {exc}') from exc

    def save(self, result: Result, name: str, replace: bool = False) -> Path:
        """Write ``result`` as the baseline ``name``; :class:`BaselineExistsError` if one exists and not ``replace``."""
        path = self.path(name)
        if path.exists() and not replace:
            raise BaselineExistsError(f'{name}: a baseline exists at {path.as_posix()}; pass --replace to overwrite it')
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.to_json(), indent=1) + '\n')
        return path


def read(paths: Iterable[PathLike]) -> tuple[list[BenchResult], list[str]]:
    """Every reference result under ``paths`` (files, or directories of ``*.json``; a ``report.json`` gives those it
    holds), sorted by device, Composer and torch, and every problem, one line each (files alike in one line)."""
    from packaging.version import Version

    found: list[BenchResult] = []
    problems: dict[str, list[str]] = {}  # what is wrong -> the files (none: the message is whole)
    neither = ' is neither a bench result (compatshim bench --out) nor a report: '
    again = 'measure it again with this compatshim (compatshim bench --out FILE, or tox -m report)'
    for root in map(Path, paths):
        if not root.exists():
            problems.setdefault(f'{root}: no such file or directory', [])
            continue
        for file in sorted(root.rglob('*.json')) if root.is_dir() else [root]:
            try:
                data = json.loads(file.read_text())
                entries = data['results'] if isinstance(data, dict) and 'results' in data else [data]
                found += [BenchResult.from_json(entry) for entry in entries]
            except UnreadableResult as exc:
                what = f': {exc}; {again}' if exc.schema is not None else f'{neither}{exc}'
                problems.setdefault(what, []).append(str(file))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.setdefault(f'{neither}{type(exc).__name__}: {exc}', []).append(str(file))
    more = {what: f' (and {len(files) - 1} more files)' if files[1:] else '' for what, files in problems.items()}
    lines = [f'{files[0]}{more[what]}{what}' if files else what for what, files in problems.items()]
    return sorted(found, key=lambda r: (r.device, Version(r.composer), Version(r.torch.split('+')[0]))), lines


def gather(paths: Iterable[PathLike]) -> list[BenchResult]:
    """:func:`read`, where any problem is a ``ValueError`` naming every one."""
    found, problems = read(paths)
    if problems:
        raise ValueError('\n'.join(problems))
    return found


def reference_store(root: PathLike, device: str) -> Store:
    """The reference bench's baselines of ``device``: ``<root>/<device>/<env>.json``."""
    return Store(Path(root) / device, BenchResult)


def baseline_for(root: PathLike, result: BenchResult) -> tuple[Optional[BenchResult], Optional[str]]:
    """``result``'s baseline under ``root``, and the line that fails the run where there is none to judge against:
    one that cannot be read, or none although its device has some (a device with none at all is a first run)."""
    store = reference_store(root, result.device)
    record = f'tox -e bench-{result.env},report -- --record'
    elsewhere = 'compatshim report --results RESULT.json --baselines DIR --out DIR --record'
    try:
        baseline = store.load(result.env)
    except UnreadableResult as exc:
        return None, (
            f'UNREADABLE BASELINE {result.env}: {store.path(result.env).as_posix()}: {exc}; re-record it: {record} '
            f'--replace (outside the matrix: {elsewhere} --replace)'
        )
    if baseline is not None or not any(store.root.glob('*.json')):
        return baseline, None
    return None, (
        f'MISSING BASELINE {result.env}: {store.root.as_posix()} holds baselines, but none for this env (a renamed '
        f'env, or a forgotten --record); record it: {record} (outside the matrix: {elsewhere})'
    )


def record_baseline(result: BenchResult, root: PathLike, replace: bool = False) -> Path:
    """Write ``result`` as its env's baseline (never over one unless ``replace``; never a planted run)."""
    if result.planted:
        raise ValueError(f'{result.env}: a run with a planted slowdown cannot be recorded as a baseline')
    return reference_store(root, result.device).save(result, result.env, replace)
