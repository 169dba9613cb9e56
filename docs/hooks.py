"""MkDocs hooks: a page whose generated tables are stale fails the build (``python docs/tables.py`` renders them
into the Markdown itself, so that GitHub and PyPI show the same text as the site)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # docs/tables.py, beside this file


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if tables.refresh(markdown) != markdown:
        page = kwargs.get('page')
        where = getattr(getattr(page, 'file', None), 'src_path', 'a page')
        raise ValueError(f'docs: a generated table in {where} is stale; run python docs/tables.py')
    return markdown
