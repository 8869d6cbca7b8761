"""MkDocs hook: the site's home page is README.md, so the front page is written once.

``docs/index.md`` is a placeholder; its Markdown is replaced by the README's, whose links into
``docs/`` (``docs/how-it-works.md``, right on GitHub) are made relative to the site's root.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_DOCS_LINK = re.compile(r"\]\(docs/")


def front_page_markdown(readme_text: str) -> str:
    """The README's Markdown with its ``docs/...`` links made relative to the docs folder."""
    return _DOCS_LINK.sub("](", readme_text)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 -- MkDocs' hook signature
    if page.file.src_uri == "index.md":
        return front_page_markdown(README.read_text(encoding="utf-8"))
    return markdown


def on_serve(server, config, builder):  # noqa: ARG001 -- MkDocs' hook signature
    server.watch(str(README))
    return server
