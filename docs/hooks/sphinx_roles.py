"""Griffe extension (mkdocs.yml, mkdocstrings' ``extensions``): Sphinx roles in docstrings become cross-references.

The code's docstrings name other objects the Sphinx way, ``:meth:`fit```, ``:class:`~rbm.RBM```,
``:mod:`rbm.boltzmann```; mkdocstrings renders Markdown and would print those roles raw.  Before a
docstring is rendered, each role becomes the object's name in code type, linked to that object where
the API page shows it (an optional autorefs reference: the name is resolved in the docstring owner's
scope, as Python would, and a name the page does not show -- a private module, a builtin -- stays
plain code instead of failing the strict build).  ``~`` shows the last part of the name only; an
explicit title, ``:meth:`the fit <Trainer.fit>```, is kept.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|meth|class|data|func|attr|exc|obj|const|term):`([^`]+)`")
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)


def role_identifier(target: str, owner: griffe.Object) -> str:
    """The full path a role's target names, resolved in ``owner``'s scope (the target itself when unknown)."""
    first, _, rest = target.partition(".")
    try:
        resolved = owner.resolve(first)
    except (griffe.NameResolutionError, ValueError, KeyError, AttributeError):
        return target
    return f"{resolved}.{rest}" if rest else resolved


def render_role(target: str, owner: griffe.Object) -> str:
    """The HTML of one role: ``<code>`` text, an optional reference to the object it names."""
    titled = TITLED.match(target)
    if titled:
        title, target = titled["title"], titled["target"]
    else:
        title = None
    target = target.strip().lstrip("!")
    short = target.startswith("~")
    target = target.lstrip("~.")
    if title is None:
        title = target.rpartition(".")[2] if short else target
    identifier = role_identifier(target, owner)
    return (f'<autoref identifier="{html.escape(identifier)}" optional>'
            f"<code>{html.escape(title)}</code></autoref>")


def convert_roles(text: str, owner: griffe.Object) -> str:
    """``text`` with every Sphinx role replaced by its reference (see ``render_role``)."""
    return ROLE.sub(lambda match: render_role(match.group(1), owner), text)


def _objects(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of a loaded package once the whole package is known."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:  # noqa: ARG002 -- Griffe's signature
        for obj in _objects(pkg):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = convert_roles(obj.docstring.value, obj)
