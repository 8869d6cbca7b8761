"""The executor side: the node of a fit inside a Spark Python worker, its data and its address."""
