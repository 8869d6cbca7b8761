"""Training modes: how the nodes combine their progress (async, sync, sharing), and work stealing."""
