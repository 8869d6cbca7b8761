"""A driver process that stops itself just before its N-th store write: ``python _crash_driver.py JSON``.

The JSON names the store URL, the run id, the write to stop at (``crash_at``, its number, or
``crash_on``, a regular expression its path matches), what to do there (``action``:
``"kill"``, SIGKILL itself; ``"pause"``, SIGSTOP its whole process group -- the JVM and the Python
workers too, as Ctrl-Z or a frozen VM would -- and carry on with the write once continued) and the
run's lease timeout (see ``test_crash_resume.py`` and ``test_fencing.py``).  It trains the harness's
small DBN on local Spark, counting the driver's store writes through :class:`crash_store.CrashingStore`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys

from crash_store import CrashingStore, harness_model, harness_settings

import node
import node.driver._fit
from rbm.datasets import load_digits01


def main() -> None:
    config = json.loads(sys.argv[1])
    action = config.get("action", "kill")

    def stop(path: str) -> None:
        print(json.dumps({"killed_before" if action == "kill" else "paused_before": path}), flush=True)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            os.killpg(os.getpgrp(), signal.SIGSTOP)  # until the test sends SIGCONT: then the write goes ahead

    crash_on = config.get("crash_on")
    node.driver._fit.open_checked_store = lambda url, retry_timeout_s=30.0: CrashingStore(  # the driver's store
        url, crash_at=config.get("crash_at"), on_crash=stop,
        crash_when=None if crash_on is None else lambda writes: re.search(crash_on, writes[-1]) is not None)
    spark = node.get_spark_session("local[2,4]", app_name="sparkdbn-crash-driver")
    split = load_digits01()
    node.Trainer(spark, config["store_url"], run_id=config["run_id"], **harness_settings(
        lease_timeout_s=config["lease_timeout_s"])).fit(harness_model(), split.X_train, split.y_train)
    print(json.dumps({"finished": True}), flush=True)


if __name__ == "__main__":
    main()
