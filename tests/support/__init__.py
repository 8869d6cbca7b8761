"""Test support that is not part of the product: servers and harnesses the tests (and demos) start.

``tests/`` is on ``sys.path`` while pytest runs (rootdir conftest), so tests import these as
``support.<module>``; scripts add ``<repo>/tests`` to ``sys.path`` themselves.
"""
