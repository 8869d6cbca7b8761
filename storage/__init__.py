"""The shared store of sparkdbn: weights, run records and staged datasets, on a local directory or HDFS.

>>> store = open_store("/tmp/sparkdbn-store")               # or "hdfs://namenode:9870/sparkdbn"
>>> weights = WeightStore(store, run="r1")
>>> ref = weights.put_version("rbm0", "node-a", 1, {"rbm0.W": W})
>>> weights.get_version(ref)["rbm0.W"]                     # sha256-verified

HDFS is reached through WebHDFS (the namenode HTTP port, usually 9870) with the ``hdfs``
package.  :mod:`storage.webhdfs_server` is a small WebHDFS-protocol server on a local
directory for tests and demos, because no Hadoop is installed here.
"""

import logging

from ._datasets import Dataset, open_dataset, stage_arrays
from ._errors import (
    ChecksumError,
    DatasetError,
    SnapshotValueError,
    StoreError,
    StoreNotFoundError,
    StorePathError,
    StorePermissionError,
    StoreUnavailableError,
)
from ._runs import RunStore
from ._sources import RECIPES, read_idx, stage_csv, stage_dataframe, stage_idx, stage_recipe
from ._store import Store, open_store, parse_store_url
from ._weights import SnapshotRef, WeightStore

__all__ = [
    "RECIPES",
    "ChecksumError",
    "Dataset",
    "DatasetError",
    "RunStore",
    "SnapshotRef",
    "SnapshotValueError",
    "Store",
    "StoreError",
    "StoreNotFoundError",
    "StorePathError",
    "StorePermissionError",
    "StoreUnavailableError",
    "WeightStore",
    "open_dataset",
    "open_store",
    "parse_store_url",
    "read_idx",
    "stage_arrays",
    "stage_csv",
    "stage_dataframe",
    "stage_idx",
    "stage_recipe",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
