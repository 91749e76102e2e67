"""ModelCatalog's OCI side: list and resolve ``oci://`` model references in registries.

The modules are small siblings: ``reference`` parses references, ``credentials`` reads a
dockerconfigjson secret, ``auth`` and ``client`` speak the OCI distribution API,
``generic``/``harbor``/``ghcr``/``ecr`` adapt it to each registry, ``sync`` builds the
catalog's entries. ``testing`` is a spec-following in-process registry for tests.
"""
