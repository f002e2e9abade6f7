"""Platform programs that a run's steps run after training (``python -m starforge.steps.X``)."""
