"""A custom import-linter contract: packages use each other through their public names only.

import-linter's wildcards replace whole module names, so "any private module of another
package" (``storage._weights``, ``rbm.conv._im2col`` ...) needs a contract of its own: a module
may import a module of another root package only if no part of that module's name after the
package starts with an underscore.  Registered in ``.importlinter`` as ``public_only``.
"""

from __future__ import annotations

from importlinter import Contract, ContractCheck, fields, output


class PublicImportsContract(Contract):
    """Cross-package imports of ``source_packages`` must not name a private module."""

    source_packages = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph, verbose: bool) -> ContractCheck:  # noqa: ANN001 - grimp's ImportGraph
        packages = {package.name for package in self.source_packages}
        violations = []
        for package in sorted(packages):
            for importer in sorted(graph.find_descendants(package) | {package}):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    root, *rest = imported.split(".")
                    if root in packages and root != package and any(part.startswith("_") for part in rest):
                        lines = [detail["line_number"] for detail in
                                 graph.get_import_details(importer=importer, imported=imported)]
                        violations.append((importer, imported, lines))
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["violations"]:
            output.print_error(f"{importer} imports the private module {imported} (line(s) "
                               f"{', '.join(map(str, lines))}): use the package's public names", bold=False)
