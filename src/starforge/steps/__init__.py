"""Platform programs that step runs start instead of an experiment's entrypoint.

``python -m starforge.steps.export`` (a checkpoint as a Hugging Face folder) and
``python -m starforge.steps.eval`` (the exported model scored on the validation data). They run
inside the job, so they import only the contract and the catalog's pure adapters (like the
runner); their command lines are compiled by :mod:`starforge.catalog.adapters.steps`.
"""
