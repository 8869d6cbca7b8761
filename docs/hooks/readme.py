"""MkDocs hook: the site's home page is README.md and its changelog CHANGELOG.md, each written once.

``docs/index.md`` and ``docs/changelog.md`` are placeholders; their Markdown is replaced by the
README's and the changelog's, whose links into ``docs/`` (``docs/how-it-works.md``, right on GitHub)
are made relative to the site's root, and whose links to ``CHANGELOG.md`` go to the changelog page.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
# The pages whose Markdown is a file at the repository's root.
ROOT_PAGES = {"index.md": README, "changelog.md": CHANGELOG}
_DOCS_LINK = re.compile(r"\]\(docs/")
_CHANGELOG_LINK = re.compile(r"\]\(CHANGELOG\.md")


def front_page_markdown(readme_text: str) -> str:
    """The README's Markdown with its ``docs/...`` links made relative to the docs folder."""
    return _CHANGELOG_LINK.sub("](changelog.md", _DOCS_LINK.sub("](", readme_text))


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 -- MkDocs' hook signature
    source = ROOT_PAGES.get(page.file.src_uri)
    if source is not None:
        return front_page_markdown(source.read_text(encoding="utf-8"))
    return markdown


def on_serve(server, config, builder):  # noqa: ARG001 -- MkDocs' hook signature
    for source in ROOT_PAGES.values():
        server.watch(str(source))
    return server
