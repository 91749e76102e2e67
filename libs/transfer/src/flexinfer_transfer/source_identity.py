"""SourceIdentity on the wire: ``flexinfer_common.mx_identity.SourceIdentity`` to and from
``model_express.p2p.SourceIdentity`` (this package's copy of the p2p stubs).

The identity and its ``mx_source_id`` live in libs/common, shared with the registry, so a
worker and the registry can never hash one identity two ways.
"""

from __future__ import annotations

import dataclasses

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer._generated import p2p_pb2


def identity_to_proto(identity: SourceIdentity) -> p2p_pb2.SourceIdentity:
    """The wire message."""
    return p2p_pb2.SourceIdentity(**dataclasses.asdict(identity))


def identity_from_proto(message: p2p_pb2.SourceIdentity) -> SourceIdentity:
    """From the wire message."""
    values = {f.name: getattr(message, f.name) for f in dataclasses.fields(SourceIdentity)}
    values["extra_parameters"] = dict(message.extra_parameters)
    return SourceIdentity(**values)
