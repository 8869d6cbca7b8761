"""Keep the garbage collection Spark runs after every task cheap in a reused Python worker.

PySpark's daemon calls :func:`gc.collect` after each task a reused worker finishes.  A full
collection walks every object the collector tracks: with numpy, scikit-learn, pyarrow, a node
and its actors loaded, about 160k of them, 60-90 ms on the build machine -- more than Spark's own
cost per task (about 15 ms), paid once per partition in ``async`` mode.  What lives as long as a
worker's node or cached model (modules, the node, its actors, the model) is moved out of the
collector's reach with :func:`gc.freeze` once it exists; what a task allocates afterwards is
collected as before.
"""

from __future__ import annotations

import gc

__all__ = ["settle_worker_heap"]


def settle_worker_heap() -> None:
    """Collect what is garbage now (frozen objects included), then exempt every survivor from later collections.

    Called when a worker starts a node or caches a model: objects frozen before (a stopped
    node's) are collected if they became garbage since, and the new long-lived ones are frozen.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
