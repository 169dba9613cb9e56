"""Where a transform saw its batch: the one vocabulary of the recorder, the monitor, the probes, the bench and the rule.

Imports nothing heavy (results and rules read it without torch).
"""

from __future__ import annotations

import enum

__all__ = ['Placement', 'Word']


class Word(str, enum.Enum):
    """A closed vocabulary whose members are their words: in JSON, in text, in comparisons."""

    def __str__(self) -> str:
        return str(self.value)


class Placement(Word):
    """Where a transform saw its batch, or why it saw none: the one vocabulary of the monitor, the probes, the bench
    and the rule (a ``str``, so it is its value in JSON and text)."""

    DEVICE = 'device'
    HOST = 'host'
    MIXED = 'mixed'
    #: A batch with no tensor in it.
    EMPTY = 'empty'
    NEVER_CALLED = 'never called'
    #: A leg given no transform (the pipeline bench's ceiling).
    NO_TRANSFORM = 'no transform'
    #: Called, on a device where placement cannot be seen (Composer's plain ``DeviceCPU``: host and device are one).
    UNOBSERVABLE = 'not observable'
