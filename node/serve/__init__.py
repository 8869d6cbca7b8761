"""Serving a trained model: distributed evaluation and inference, the Spark ML estimator."""
