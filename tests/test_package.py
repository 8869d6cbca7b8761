import importlib

import pytest


@pytest.mark.parametrize("package", ["rbm", "storage", "actors", "node"])
def test_every_package_imports_and_declares_its_public_names(package):
    module = importlib.import_module(package)
    assert isinstance(module.__all__, list)
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ names {name!r} but it is missing"


def test_every_test_module_has_a_basename_of_its_own():
    # The test folders are no packages: pytest imports each test file by its basename, and a second file
    # of the same name anywhere under tests/ fails the whole run's collection ("import file mismatch").
    from collections import Counter
    from pathlib import Path

    names = Counter(path.name for path in Path(__file__).parent.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
