"""The client's one error type for a failed call."""

from __future__ import annotations

import grpc


class CallError(Exception):
    """A call failed; ``code`` is its gRPC status, ``details`` says why in one line.

    Raised for what goes wrong below gRPC (unreachable server, broken protocol, deadline)
    as well as for a non-OK status the server sent (see :mod:`.grpc_stream`).
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
