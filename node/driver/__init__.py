"""The driver side: the Trainer, one fit of a run, its Spark jobs, settings and session."""
