"""The pods/log subresource: the stored text, its tail, and ``follow=true`` streams.

A follow stream sends the text (or its tail), then every later ``append_pod_log`` of the
same pod, until the client disconnects, the pod is deleted or the server stops, as the
kubelet's stream ends when its container does.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

from flexinfer_common.testing.kube_apiserver.errors import not_found
from flexinfer_common.testing.kube_apiserver.objects import ObjectStore, key_of
from flexinfer_common.testing.kube_apiserver.types import ResourceType

# How often a quiet follow looks whether its client hung up; a real kubelet notices at
# its next write, but a test's follow may stay quiet until the client is gone.
_DISCONNECT_CHECK_S = 0.1


@dataclass(frozen=True)
class LogFollow:
    """A ``follow=true`` read: the pod, and how much of its text was already answered."""

    rt: ResourceType
    namespace: str
    name: str
    offset: int


def read(
    store: ObjectStore, rt: ResourceType, namespace: str, name: str, tail: str | None
) -> tuple[str, int]:
    """The log text (its last ``tail`` lines) and the offset that follows it (404: no pod)."""
    with store.cond:
        if store.get(key_of(rt, namespace, name)) is None:
            raise not_found(rt.qualified, name)
        text = store.logs.get((namespace, name), "")
    offset = len(text)
    if tail is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
    return text, offset


def follow(store: ObjectStore, request: LogFollow, conn: socket.socket) -> Iterator[str]:
    """The text appended after ``request.offset``, as it comes, until the stream ends."""
    key, offset = key_of(request.rt, request.namespace, request.name), request.offset
    while True:
        with store.cond:
            text = store.logs.get((request.namespace, request.name), "")
            if len(text) == offset and store.get(key) is not None and not store.closed:
                store.cond.wait(_DISCONNECT_CHECK_S)
                text = store.logs.get((request.namespace, request.name), "")
            gone = store.get(key) is None or store.closed
        if len(text) < offset:  # replaced by set_pod_log: follow the new text from its end
            offset = len(text)
        if len(text) > offset:
            yield text[offset:]
            offset = len(text)
        if gone or _hung_up(conn):
            return


def _hung_up(conn: socket.socket) -> bool:
    """Whether the client closed its side (a follow's client sends nothing after its GET)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
