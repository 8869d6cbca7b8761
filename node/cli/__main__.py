"""``python -m node.cli``: the ``sparkdbn`` command line."""

from . import main

raise SystemExit(main())
