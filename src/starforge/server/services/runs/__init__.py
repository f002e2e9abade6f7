"""A run's life: admission, the user's view and actions, what runners report, the reconciler's
decisions, the reactions a change sets off, and what a new run starts from."""
