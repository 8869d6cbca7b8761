"""A process that takes or holds run leases: ``python _lease_process.py JSON`` (see ``test_lease.py``).

Modes (the JSON's ``mode``):

* ``race``: for each trial ``i`` in turn, wait on a barrier with the other racers (files in
  ``barrier``), then try to take run ``<prefix><i>``'s lease; print ``{"trial", "token",
  "generation"}`` or ``{"trial", "token", "refused"}``, and keep the lease renewed until every
  racer is done with the trial.
* ``hold``: take run ``run``'s lease (after ``delay_s`` seconds, 0 by default), print
  ``{"held": generation}``, and keep renewing it until killed.
* ``take``: try once to take run ``run``'s lease and print ``{"took": generation}`` or
  ``{"refused": message}``.

Its wall clock may be shifted (``time.time``) by the ``sitecustomize`` the clock-skew tests put on
``PYTHONPATH``; leases must not care.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import node
import storage
from node.run import DriverLease

BARRIER_POLL_S = 0.0005
#: The run key of the leases (test_lease.KEY).
KEY = b"lease-test-run-key-32-bytes-long"


def barrier(folder: str, point: str, parties: int) -> None:
    """Wait until ``parties`` processes reached ``point`` (a file each in ``folder``)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{point}-{os.getpid()}"), "w"):
        pass
    prefix = f"{point}-"
    while sum(name.startswith(prefix) for name in os.listdir(folder)) < parties:
        time.sleep(BARRIER_POLL_S)  # another process: no event to wait on


def main() -> None:
    config = json.loads(sys.argv[1])
    store = storage.open_store(config["store_url"])
    timeout_s = float(config["timeout_s"])
    if config["mode"] == "race":
        for trial in range(int(config["trials"])):
            barrier(config["barrier"], f"go-{trial}", int(config["parties"]))
            lease = DriverLease(store, f"{config['prefix']}{trial}", KEY, timeout_s)
            try:
                lease.acquire()
                outcome = {"generation": lease.generation}
            except node.LeaseHeldError as error:
                outcome = {"refused": str(error)}
            print(json.dumps({"trial": trial, "token": lease.token, "pid": os.getpid(), **outcome}), flush=True)
            barrier(config["barrier"], f"done-{trial}", int(config["parties"]))  # renewing until both are done
            lease._stop.set()  # then neither renew nor release: the next trial is another run
    elif config["mode"] == "hold":
        time.sleep(float(config.get("delay_s", 0.0)))  # as a driver takes its lease well after its process started
        lease = DriverLease(store, config["run"], KEY, timeout_s)
        lease.acquire()
        print(json.dumps({"held": lease.generation, "time": time.time()}), flush=True)
        threading.Event().wait()  # renewing in the lease's thread until the test kills this process
    else:
        try:
            lease = DriverLease(store, config["run"], KEY, timeout_s)
            lease.acquire()
            print(json.dumps({"took": lease.generation, "time": time.time()}), flush=True)
            lease.release()
        except node.LeaseHeldError as error:
            print(json.dumps({"refused": str(error), "time": time.time()}), flush=True)


if __name__ == "__main__":
    main()
