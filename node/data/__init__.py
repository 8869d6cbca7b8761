"""Training data: preparation into checked partitions, frames, labels, staging, outputs."""
