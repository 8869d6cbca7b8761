import importlib

import pytest


@pytest.mark.parametrize("package", ["rbm", "storage", "actors", "node"])
def test_every_package_imports_and_declares_its_public_names(package):
    module = importlib.import_module(package)
    assert isinstance(module.__all__, list)
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ names {name!r} but it is missing"
