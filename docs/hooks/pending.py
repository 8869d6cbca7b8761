"""MkDocs hook: pages that other work is writing join the site when their file exists, not before.

``extra.pending_pages`` in mkdocs.yml names them.  While such a file is missing, its nav entry is
left out and a link to it in a page becomes its plain text with the file's path, so
``mkdocs build --strict`` passes; once the file is there this hook changes nothing, and the
page's nav entry and links are checked like every other.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.pending")


def _missing(config) -> set[str]:
    pending = (config.get("extra") or {}).get("pending_pages") or []
    return {name for name in pending if not (Path(config["docs_dir"]) / name).exists()}


def _prune(items, missing: set[str]):
    kept = []
    for item in items:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, list):
                value = _prune(value, missing)
                if not value:
                    continue
            elif value in missing:
                log.info("nav: %s (%s) is not written yet; left out", title, value)
                continue
            kept.append({title: value})
        elif item not in missing:
            kept.append(item)
    return kept


def on_config(config):
    missing = _missing(config)
    if missing and config.get("nav"):
        config["nav"] = _prune(config["nav"], missing)
    config["extra"]["pending_missing"] = sorted(missing)
    return config


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 -- MkDocs' hook signature
    missing = config["extra"].get("pending_missing") or []
    for name in missing:
        link = re.compile(r"\[([^\]]+)\]\((?:\.\./)*" + re.escape(name) + r"(#[^)]*)?\)")
        markdown = link.sub(lambda match: f"{match.group(1)} (`docs/{name}`, being written)", markdown)
    return markdown
