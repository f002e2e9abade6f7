"""Executors start, watch and stop the runners of an attempt (one runner per node)."""
