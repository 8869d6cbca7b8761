"""The shared store of sparkdbn: weights, run records and staged datasets, on a local directory or HDFS.

>>> store = open_store("/tmp/sparkdbn-store")               # or "hdfs://namenode:9870/sparkdbn"
>>> weights = WeightStore(store, run="r1", key=run_key)     # run_key: the run's secret, >= 16 bytes
>>> ref = weights.put_version("rbm0", "node-a", 1, {"rbm0.W": W})
>>> weights.get_version(ref)["rbm0.W"]                     # MAC- and sha256-verified
>>> weights.consolidate("rbm0").params                     # mean of every node's newest snapshot

Everything a node or the driver acts upon (snapshots, phase results, the run record, peer
entries, metrics, the final model) is authenticated with HMAC-SHA256 under the run's key, which
never goes to the store: write access to the store alone cannot influence training.

HDFS is reached through WebHDFS (the namenode HTTP port, usually 9870) with the ``hdfs``
package.  The tests carry a small WebHDFS-protocol server on a local directory
(``tests/support/webhdfs_server.py``, started by ``scripts/webhdfs-server``), because no
Hadoop can be installed where this project is built.
"""

import logging

from ._auth import MIN_KEY_BYTES, mac_hex, sha256_hex, sign_json, verify_json, verify_mac
from ._dataset_lease import DatasetLease
from ._dataset_staging import check_split_destination, check_stage_destination, stage_arrays, stage_split_pair
from ._datasets import Dataset, open_dataset, open_split
from ._errors import (
    AuthenticationError,
    ChecksumError,
    DatasetError,
    DestinationNotEmptyError,
    FileTooLargeError,
    NoUsableSnapshotError,
    SnapshotValueError,
    StoreEntryTypeError,
    StoreError,
    StoreFullError,
    StoreNotFoundError,
    StorePathError,
    StorePermissionError,
    StoreUnavailableError,
)
from ._lease import LeaseFolder, LeaseView, run_generation_floor
from ._npz import decode_params, encode_params, snapshot_size_bound
from ._processes import (
    SAME_CLOCK_SLACK_S,
    START_TIME_SLACK_S,
    holder_process_gone,
    holder_process_running,
    holder_renews_here,
    process_identity,
)
from ._runs import RunStore, has_run_record
from ._say_once import SayOnce
from ._signed_names import SignedName, SignedNames
from ._sources import read_idx, stage_csv, stage_idx
from ._store import UNRECORDED_FILE_MAX_BYTES, Store, local_path, open_store, parse_store_url
from ._weights import DEFAULT_MAX_SNAPSHOT_BYTES, Consolidation, SnapshotRef, WeightStore

__all__ = [
    "AuthenticationError",
    "ChecksumError",
    "Consolidation",
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "Dataset",
    "DatasetLease",
    "DatasetError",
    "DestinationNotEmptyError",
    "FileTooLargeError",
    "LeaseFolder",
    "LeaseView",
    "MIN_KEY_BYTES",
    "NoUsableSnapshotError",
    "RunStore",
    "SayOnce",
    "SnapshotRef",
    "SignedName",
    "SignedNames",
    "SnapshotValueError",
    "Store",
    "StoreEntryTypeError",
    "StoreError",
    "StoreNotFoundError",
    "StorePathError",
    "StorePermissionError",
    "StoreFullError",
    "StoreUnavailableError",
    "UNRECORDED_FILE_MAX_BYTES",
    "WeightStore",
    "check_split_destination",
    "check_stage_destination",
    "decode_params",
    "encode_params",
    "has_run_record",
    "holder_process_gone",
    "holder_process_running",
    "holder_renews_here",
    "START_TIME_SLACK_S",
    "SAME_CLOCK_SLACK_S",
    "mac_hex",
    "open_dataset",
    "open_split",
    "local_path",
    "open_store",
    "parse_store_url",
    "process_identity",
    "read_idx",
    "run_generation_floor",
    "sha256_hex",
    "sign_json",
    "snapshot_size_bound",
    "stage_arrays",
    "stage_split_pair",
    "stage_csv",
    "stage_idx",
    "verify_json",
    "verify_mac",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
