"""A node whose loss overflowed while its weights are still finite reports the divergence once, naming itself.

A Gaussian DBN on standardized digits at learning rate 1.0 does that in its first pass over ~180 rows (6
of 6 seeds, one process): the reconstruction error is inf, the weights not yet.  Its metrics record then
failed to serialize (``ValueError: Out of range float values are not JSON compliant``) and Spark ran the
task four times before the fit failed with that line.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.preprocessing import StandardScaler
from support.spark_jobs import failed_tasks_since, newest_job

import node
import rbm

pytestmark = pytest.mark.slow


def test_a_node_whose_loss_is_inf_fails_the_fit_once_saying_it_diverged(spark, store_url, digits):
    X = StandardScaler().fit_transform(digits.X_train)
    model = rbm.DBN(hidden_layer_sizes=(64,), visible="gaussian", batch_size=10, pretrain_learning_rate=1.0,
                    random_state=0)
    before = newest_job(spark)
    trainer = node.Trainer(spark, store_url, run_id="diverged", epochs={"rbm0": 1, "finetune": 1}, partitions=8,
                           scale_rule="none", progress=False)
    with pytest.raises(node.InputDataError, match=r"diverged (on node \S+ \(phase rbm0, epoch 0, partition \d+\): "
                                                  r"its loss is (inf|nan)|in RBM pass)"):
        trainer.fit(model, X.astype(np.float32), digits.y_train)
    assert failed_tasks_since(spark, before) == 0  # reported by the node, not retried by Spark
