"""The tables that live in code (and the few prose tables shown on several pages), written into the Markdown that
shows them (README.md, docs/*.md, CONTRIBUTING.md).

A table sits between two markers, so that GitHub, PyPI and the site all show the same text::

    <!-- begin generated: support-table -->
    | Composer | ... |
    <!-- end generated: support-table -->

``python docs/tables.py`` renders every block again from the code; ``python docs/tables.py --check`` exits 1 naming
each file whose copy is stale (``tests/unit/test_docs.py`` runs the check, and the MkDocs hook refuses a stale page).
Imports compatshim only (no torch, no Composer).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compatshim import _cli, _exits  # noqa: E402
from compatshim.bench import metrics, rule  # noqa: E402
from compatshim.config import settings as _settings  # noqa: E402
from compatshim.config import support as _support  # noqa: E402
from compatshim.config.differences import DIFFERENCES  # noqa: E402

__all__ = [
    'FILES',
    'GENERATED',
    'SETTINGS',
    'STAGES',
    'THREE_WAYS',
    'VARIABLES',
    'cli_reference',
    'main',
    'refresh',
    'stale',
]


def cli_reference() -> str:
    """Every subcommand of ``compatshim`` and its options, from the argparse parsers."""
    top = _cli.parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    out: list[str] = []
    for name, sub in commands.choices.items():
        usage = ' '.join(sub.format_usage().split())
        usage = usage.removeprefix('usage: ')
        out += [f'### compatshim {name}', '', (helps.get(name) or '').strip(), '', f'`{usage}`']
        out += ['', '| option | default | meaning |', '|---|---|---|']
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = ', '.join(f'`{o}`' for o in action.option_strings) or f'`{action.metavar or action.dest}`'
            if action.choices and action.option_strings:
                choices = '\\|'.join(str(c) for c in action.choices)
                flag += f'[={choices}]' if action.nargs == '?' else f' {choices}'
            elif action.metavar and action.option_strings:
                flag += f' {action.metavar}'
            default = '' if action.default in (None, False, argparse.SUPPRESS) else f'`{action.default}`'
            meaning = (action.help or '').replace('|', '\\|').replace('\n', ' ')
            out.append(f'| {flag} | {default} | {meaning} |')
        out.append('')
    return '\n'.join(out).rstrip()


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    return '\n'.join(lines + ['| ' + ' | '.join(row) + ' |' for row in rows])


#: Tables that are prose, not code, shown in more than one file: written here once, copied into each by the markers.
THREE_WAYS = _table(
    ('way', 'use it when', 'what it covers'),
    [
        (
            '`compatshim.enable()`',
            'you own the training script',
            "this process; call it in every rank's script (Composer's launcher runs the script per rank); arguments "
            'for the stage and `allow_untested`',
        ),
        (
            '`compatshim run -- composer -n 8 train.py`',
            'you cannot or will not edit the script (a launcher, a job template)',
            'every Python process of the command that imports Composer: launcher ranks, spawn/forkserver children, '
            'subprocesses',
        ),
        (
            '`import compatshim.auto`',
            'one import is all you can add (a notebook, `PYTHONSTARTUP`, `python -c`, a list of modules to import)',
            'this process, at the import',
        ),
    ],
)
STAGES = _table(
    ('stage', 'what happens', 'device memory', 'coherence'),
    [
        (
            '`"batch"` (default; the 0.24.1 behaviour)',
            "the whole batch is moved once through the trainer's own `Device`, `fn` runs once on it, then Composer "
            'splits it (its per-microbatch move is then a no-op)',
            'the **whole batch** is on the device from `AFTER_DATALOADER` on',
            'one call per optimizer step per rank; every microbatch is a slice of one `fn(batch)`, whatever '
            "`device_train_microbatch_size` is (int or `'auto'`, out-of-memory retries included)",
        ),
        (
            '`"microbatch"`',
            'each microbatch is moved, then `fn` runs on it',
            '**one microbatch** at a time',
            'one call per microbatch: batch-level random parameters, batch statistics and mixing partners are per '
            'microbatch, and results depend on the microbatch size',
        ),
    ],
)

#: Every environment variable compatshim reads (``compatshim.config.settings`` names them): what sets it, what it means.
VARIABLES: tuple[tuple[str, str, str], ...] = (
    (
        _settings.STAGE_VAR,
        '`compatshim run --stage`',
        'the default stage of every `enable()` in the run (a stage passed in code wins)',
    ),
    (
        _settings.ALLOW_UNTESTED_VAR,
        '`compatshim run --allow-untested`',
        'patch a Composer newer than the support table if its code has a known shape',
    ),
    (
        _settings.KILL_SWITCH,
        'you',
        'the kill switch: still wins; `enable()` patches nothing and warns once per process',
    ),
    (
        _settings.MONITOR_VAR,
        '`compatshim run --monitor` (`1`), `--monitor=strict` (`strict`)',
        'attach a `TransformMonitor` to every Trainer of the run (`import compatshim.auto` honours it too); the kill '
        'switch does not turn it off',
    ),
    (
        'COMPATSHIM_BENCH_SIZE',
        'you',
        '`compatshim bench --size` when it is not given: `tiny`, `cpu`, `gpu` (unset: `cpu` on cpu, `gpu` on cuda/mps)',
    ),
)


#: Every setting: in code, environment, on the command line, default. Where several are given, the first column that
#: gives a valid value wins, from the left (a DataSpec's own stage before ``enable()``'s:
#: ``compatshim.config.settings``).
SETTINGS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        'stage',
        '`DataSpec(..., data_transfer_stage=)` for one DataSpec; `enable(stage=)`',
        f'`{_settings.STAGE_VAR}`',
        '`compatshim run --stage`, `compatshim doctor --stage`, `pytest --compatshim=STAGE`',
        '`batch`',
    ),
    (
        'allow untested releases',
        '`enable(allow_untested=True)`',
        f'`{_settings.ALLOW_UNTESTED_VAR}`',
        '`compatshim run --allow-untested`, `compatshim doctor --allow-untested`',
        'off: a release outside the support table is refused with a warning',
    ),
    ('kill switch', '—', f'`{_settings.KILL_SWITCH}`', '—', 'off; nothing overrides it when on'),
    (
        'the monitor on every Trainer',
        '`TransformMonitor(strict=...)` among your callbacks',
        f'`{_settings.MONITOR_VAR}`',
        '`compatshim run --monitor[=strict]`',
        'off',
    ),
)


def legs_table() -> str:
    """The leg vocabulary of both benches (``compatshim.bench.metrics.LEGS``): one name, one DataSpec argument."""
    return _table(
        ('leg', 'DataSpec argument', 'the shim', 'what it is', 'in'),
        [
            (
                f'`{leg.name}`',
                f'`{leg.argument}=fn`' if leg.argument else '— (no transform)',
                f'`enable(stage="{leg.stage}")`' if leg.stage else 'off',
                leg.description,
                '`bench --pipeline`' if leg.name not in metrics.REFERENCE_LEGS else '`bench`, `bench --pipeline`',
            )
            for leg in metrics.LEGS.values()
        ],
    )


def metrics_table() -> str:
    """Every metric of the reference bench (``compatshim.bench.metrics.METRICS``): its kind, where it is gated, its
    threshold, and what can move it."""
    rows = []
    for found in metrics.METRICS:
        kind = found.kind
        limit = getattr(kind, 'limit', None)
        threshold = (
            f'≤ {limit:g}% of a step'
            if limit is not None
            else f'-{kind.min_effect:.0%} and p < {rule.ALPHA:g}'
            if kind.min_effect is not None
            else 'exact'
            if kind.against_baseline and found.gate.value != 'never'
            else 'must hold'
            if found.gate.value != 'never'
            else '—'
        )
        where = found.gate.value + (
            '' if set(found.devices) == {'cpu', 'cuda', 'mps'} else f' ({", ".join(found.devices)})'
        )
        sizes = f', at the {"/".join(kind.sizes)} size' if kind.sizes else ''
        moved = kind.holds if found.gate.value != 'never' else 'reported, never judged'
        rows.append((f'`{found.id}`', kind.name, where + sizes, threshold, moved))
    return _table(('metric', 'kind', 'gated where', 'threshold', 'what can move it'), rows)


#: What each family does with the attribute ``spec.device_transforms`` without the shim (read, called, assigned).
ATTRIBUTE = {
    None: 'your callable (else an identity); one assigned later runs on device',
    _support.Family.HOST: 'your callable; one assigned later runs on the CPU',
    _support.Family.DROPPED: '`AttributeError`; one assigned later never runs',
    _support.Family.REJECTED: '`AttributeError`; one assigned later never runs',
}


def verdict(row: _support.TestedRelease) -> str:
    """What ``enable()`` does on the release of ``row``."""
    if row.family is None:
        return 'unaffected: nothing patched'
    return f'patched ({row.family.value} family): argument, attribute, subclasses as on 0.24.1'


def support_table() -> str:
    """The support table, one line per row of ``TESTED_RELEASES`` on the default Python (the Python factor's rows
    repeat a release on other interpreters): the README's and the docs'."""
    rows = [r for r in _support.TESTED_RELEASES if r.python == _support.DEFAULT_PYTHON]
    header = (
        'Composer',
        'torch (matrix)',
        'the argument without the shim',
        'the attribute without the shim',
        '`enable()`',
    )
    return _table(
        header, [(r.composer, r.torch, _support.WITHOUT_SHIM[r.family], ATTRIBUTE[r.family], verdict(r)) for r in rows]
    )


def exit_codes() -> str:
    """Every command's exit codes (``compatshim._exits.TABLE``), one column per command."""
    commands = list(dict.fromkeys(name for _, meanings in _exits.TABLE for name in meanings))
    rows = [(str(code), *(meanings.get(c, '') for c in commands)) for code, meanings in _exits.TABLE]
    return _table(('exit', *(f'`{c}`' for c in commands)), rows)


#: Every table that lives in code (or above), by the name its markers give.
GENERATED: dict[str, Callable[[], str]] = {
    'support-table': support_table,
    'exit-codes': exit_codes,
    'environment': lambda: _table(
        ('variable', 'set by', 'meaning'), [(f'`{name}`', by, meaning) for name, by, meaning in VARIABLES]
    ),
    'settings': lambda: _table(('setting', 'in code', 'environment', 'command line', 'default'), SETTINGS),
    'rule': lambda: rule.RULE,
    'legs': legs_table,
    'metrics': metrics_table,
    'cli': cli_reference,
    'three-ways': lambda: THREE_WAYS,
    'stages': lambda: STAGES,
    'differences': lambda: '\n'.join(f'- **{name}**: {text}' for name, text in DIFFERENCES.items()),
}
BLOCK = re.compile(r'(<!-- begin generated: ([a-z-]+) -->\n)(.*?)(<!-- end generated: \2 -->)', re.S)
#: The files that may hold generated blocks.
FILES = [ROOT / 'README.md', ROOT / 'CONTRIBUTING.md', *sorted((ROOT / 'docs').glob('*.md'))]


def refresh(text: str) -> str:
    """``text`` with every generated block rendered again (an unknown name is an error)."""

    def table(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in GENERATED:
            raise ValueError(f'docs: unknown generated table {name!r}; known: {", ".join(GENERATED)}')
        return f'{match.group(1)}{GENERATED[name]()}\n{match.group(4)}'

    return BLOCK.sub(table, text)


def stale(paths: Sequence[Path] = FILES) -> list[Path]:
    """The files whose generated blocks differ from what the code renders now."""
    return [path for path in paths if refresh(path.read_text()) != path.read_text()]


def main(argv: Sequence[str] = ()) -> int:
    if '--check' in argv:
        found = stale()
        for path in found:
            print(f'{path.relative_to(ROOT)}: a generated table is stale; run python docs/tables.py', file=sys.stderr)
        return 1 if found else 0
    for path in FILES:
        text = path.read_text()
        if refresh(text) != text:
            path.write_text(refresh(text))
            print(f'refreshed {path.relative_to(ROOT)}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
