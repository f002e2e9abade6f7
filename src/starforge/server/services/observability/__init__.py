"""What a run shows: its logs, metrics, curves it spooled, its output folder, and how runs
differ."""
