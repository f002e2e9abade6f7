"""What follows or spans training runs: pipelines and their steps, eval gates, exports, sweeps and
ASHA."""
