"""The StarForge control plane: HTTP API, admission, queue, scheduler, executors, storage.

It may import ``starforge.contract`` and ``starforge.catalog``; it never imports the CLI, the
client's project code or the runner. Layers call one step down: ``api`` (thin routers) ->
``services`` -> ``statemachine`` / ``db`` / ``executors`` / ``storage``.
"""
