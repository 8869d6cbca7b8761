"""A run in the store: its record, its lease, its key, its work folders, and reading it back.

* :mod:`._record` -- :class:`RunRecord`, the run as a sequence of steps; :mod:`._lease` -- one driver per run;
* :mod:`._keys` -- the run key; :mod:`._run_store` -- the store checked, temporaries swept;
* :mod:`._work_folders` -- a fit's claims and stored partitions; :mod:`._run_access` -- a run read back.
"""

from ._keys import RunKey, RunKeyError, resolve_run_key, stored_key_path
from ._lease import DriverLease, LeaseHeldError, LeaseLostError
from ._record import RunRecord
from ._run_access import RunView, load_run_model, newer_fit_note, open_run, run_model_arrays, skipped_records_note
from ._run_store import STALE_TEMPORARY_S, open_checked_store, sweep_temporaries
from ._work_folders import blocks_folder, claims_folder, remove_work_folders, rounds_folder

__all__ = ["RunKey", "RunKeyError", "resolve_run_key", "stored_key_path", "DriverLease", "LeaseHeldError",
           "LeaseLostError", "RunRecord", "RunView", "load_run_model", "newer_fit_note", "open_run", "run_model_arrays",
           "STALE_TEMPORARY_S", "open_checked_store", "sweep_temporaries", "blocks_folder", "claims_folder", "rounds_folder",
           "remove_work_folders", "skipped_records_note"]
