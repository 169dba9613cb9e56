"""MkDocs hooks: the tables that exist in code are rendered from it, never copied (``<!-- generated: NAME -->``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compatshim import _exits, _settings, _support
from compatshim.bench import rule

GENERATED = {
    'support-table': _support.markdown_table,
    'exit-codes': _exits.markdown,
    'environment': _settings.variables_markdown,
    'rule': lambda: rule.RULE,
}
MARKER = re.compile(r'<!-- generated: ([a-z-]+) -->')


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced by its table (an unknown marker is an error)."""

    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATED:
            raise ValueError(f'docs: unknown generated table {name!r}; known: {", ".join(GENERATED)}')
        return GENERATED[name]()

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
