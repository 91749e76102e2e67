"""ModelCatalog: list and resolve ``oci://`` model references in registries, and reconcile
ModelCatalog resources onto their status.

The OCI side: ``reference`` parses references, ``credentials`` reads a dockerconfigjson
secret, ``auth`` and ``client`` speak the OCI distribution API,
``generic``/``harbor``/``ghcr``/``ecr`` adapt it to each registry, ``sync`` builds the
entries of a set of registries. Tests use the spec-following in-process registry in
``flexinfer_common.testing.oci_registry`` (shared with the registry service's OCI provider).

The reconcile: ``secrets`` reads a registry's ``secretRef``, ``registries`` syncs a
catalog's registries one by one, ``status`` turns their results into status and
conditions, ``reconcile`` decides when a catalog is due, ``controller`` runs reconciles on
their own queue and workers, ``service`` is the admin API's CRUD, ``wiring`` builds it all.
"""
