"""The ``sparkdbn`` command line (console script ``sparkdbn = node.cli:main``; also ``python -m node.cli``)."""

from ._main import build_parser, main
from ._options import UsageError, load_config
from ._train_inputs import TRAIN_DEFAULTS, build_model

__all__ = ["main", "build_parser", "build_model", "load_config", "UsageError", "TRAIN_DEFAULTS"]
