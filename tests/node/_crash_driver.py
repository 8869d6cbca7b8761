"""A driver process that SIGKILLs itself just before its N-th store write: ``python _crash_driver.py JSON``.

The JSON names the store URL, the run id, the write to die at and the settings of the run
(see ``test_crash_resume.py``).  It trains the harness's small DBN on local Spark, counting the
driver's store writes through :class:`crash_store.CrashingStore`.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from crash_store import CrashingStore, harness_model, harness_settings

import node
import node.driver._fit
from rbm.datasets import load_digits01


def main() -> None:
    config = json.loads(sys.argv[1])

    def die(path: str) -> None:
        print(json.dumps({"killed_before": path}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    node.driver._fit.open_checked_store = lambda url, retry_timeout_s=30.0: CrashingStore(  # the driver's store
        url, crash_at=config["crash_at"], on_crash=die)
    spark = node.get_spark_session("local[2,4]", app_name="sparkdbn-crash-driver")
    split = load_digits01()
    node.Trainer(spark, config["store_url"], run_id=config["run_id"], **harness_settings(
        lease_timeout_s=config["lease_timeout_s"])).fit(harness_model(), split.X_train, split.y_train)
    print(json.dumps({"finished": True}), flush=True)


if __name__ == "__main__":
    main()
