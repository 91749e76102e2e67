"""Registry logic, free of any web framework, gRPC, cloud SDK or database client.

Downloads (exactly once per cluster), the on-disk cache, file serving, eviction and the P2P
source metadata of ModelExpress's ``ModelService`` and ``P2pService``; the small interfaces
the edges implement (:mod:`.store`, :mod:`.providers.base`); and the rules every name and
identity a client sends is checked against (:mod:`.paths`, :mod:`.identity`,
:mod:`.file_sources`). Import-linter contracts in the repository's ``pyproject.toml`` keep
foreign clients out of this package.
"""
