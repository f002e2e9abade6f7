"""Built-in methods: ``<framework>/<method>/method.yaml`` plus a ``template/`` folder each, and a
framework's ``shared/`` folder for what its templates have in common (copied with each).

The same catalog ships in the client and the server, so local validation and admission read one
declaration. See :mod:`starforge.catalog.loader`.
"""
