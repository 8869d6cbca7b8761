"""A custom import-linter contract: packages use each other through their public names only.

import-linter's wildcards replace whole module names, so "any private module of another
package" (``storage._weights``, ``rbm.conv._im2col`` ...) needs a contract of its own: a module
may import a module of another of the listed packages only if no part of that module's name
after the package starts with an underscore.  The packages may be nested (``node.driver``,
``node.modes``): a module belongs to the longest listed package its name starts with.
Registered in ``.importlinter`` as ``public_only``.
"""

from __future__ import annotations

from importlinter import Contract, ContractCheck, fields, output


class PublicImportsContract(Contract):
    """Cross-package imports of ``source_packages`` must not name a private module."""

    source_packages = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph, verbose: bool) -> ContractCheck:  # noqa: ANN001 - grimp's ImportGraph
        packages = {package.name for package in self.source_packages}

        def owner(module: str) -> str | None:
            """The longest listed package that holds ``module`` (or is it)."""
            holders = [package for package in packages if module == package or module.startswith(package + ".")]
            return max(holders, key=len) if holders else None

        violations = []
        for package in sorted(packages):
            for importer in sorted(graph.find_descendants(package) | {package}):
                if owner(importer) != package:  # a module of a nested listed package: checked as its own
                    continue
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    other = owner(imported)
                    rest = imported[len(other) + 1:].split(".") if other and imported != other else []
                    if other is not None and other != package and any(part.startswith("_") for part in rest):
                        lines = [detail["line_number"] for detail in
                                 graph.get_import_details(importer=importer, imported=imported)]
                        violations.append((importer, imported, lines))
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["violations"]:
            output.print_error(f"{importer} imports the private module {imported} (line(s) "
                               f"{', '.join(map(str, lines))}): use the package's public names", bold=False)
