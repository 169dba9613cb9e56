"""Every exit code of the ``compatshim`` commands, in one table (docs/tables.py writes :data:`TABLE` into
docs/doctor.md). Exit 2 means one thing everywhere: *nothing was done*, and a one-line message says why.
"""

from __future__ import annotations

__all__ = ['AFFECTED', 'CANNOT_RUN', 'NOT_DONE', 'NOT_FIXED', 'NOT_FOUND', 'OK', 'REGRESSION', 'TABLE']

#: Their meanings, command by command: :data:`TABLE`.
OK, NOT_DONE = 0, 2
AFFECTED, NOT_FIXED = 1, 3  # the doctor
REGRESSION = 1  # the bench and the report
CANNOT_RUN, NOT_FOUND = 126, 127  # compatshim run, as a shell says them

#: code -> what it means for each command (a command that never exits with the code has no entry).
TABLE: tuple[tuple[int, dict[str, str]], ...] = tuple(
    {
        0: {
            'compatshim doctor': 'fine: unaffected, or affected and the shim fixes it and is enabled in this process '
            '(by compatshim.enable(), compatshim.auto, or compatshim run: compatshim run -- compatshim doctor)',
            'compatshim run -- COMMAND': "COMMAND's own exit code, whatever it is (the run replaces itself with it)",
            'compatshim bench': 'measured (and, with --baselines or --pipeline --compare, judged: no regression)',
            'compatshim report': 'judged and written: no regression',
        },
        1: {
            'compatshim doctor': 'affected, and the shim fixes it here: add the one line (or use compatshim run); '
            'also when COMPATSHIM_DISABLE is set',
            'compatshim bench': 'with --baselines: a regression, or no baseline for this env where DIR holds some for '
            'its device; with --pipeline --compare: something worsened against the baseline (the lines name each; '
            'the result is written all the same, a pipeline baseline is not replaced)',
            'compatshim report': 'a regression, or a release without a baseline where its device has some (the last '
            'lines name each; the report is written all the same)',
        },
        2: {
            'compatshim doctor': 'nothing checked: a setting that is not allowed, Composer or torch missing, a release '
            'outside the support table without --allow-untested, or the --device asked for absent',
            'compatshim run -- COMMAND': 'nothing run: a setting that is not allowed, or no COMMAND given',
            'compatshim bench': 'nothing measured: a setting that is not allowed (a COMPATSHIM_ variable), bad input '
            '(an unknown size or device, a planted value out of range, a missing --baselines directory; with '
            '--pipeline: a bad MODULE:CALLABLE, an import error in your module, a callable that returns no pipeline, '
            'a bad or missing baseline name, a pipeline baseline that is not comparable: refused before any leg '
            'runs), no Composer, or the --device asked for absent',
            'compatshim report': 'nothing judged: a setting that is not allowed (a COMPATSHIM_ variable), bad input '
            '(a file that is not a result, no results, a missing baselines directory without --record), or no '
            'matplotlib for the charts without --no-png',
        },
        3: {'compatshim doctor': 'affected, and the shim does not fix it here: please report the output'},
        126: {'compatshim run -- COMMAND': 'COMMAND was found but cannot be run (not executable), as a shell says it'},
        127: {'compatshim run -- COMMAND': 'COMMAND was not found, as a shell says it'},
    }.items()
)
