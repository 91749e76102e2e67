"""TCP ports that fail in the two ways a peer can without a proxy: refused, and hanging.

``free_port`` is a port nothing listens on (connects are refused); ``unaccepting_listener``
is a port whose accept queue is full, so a connect hangs in the SYN stage, which is what a
connect timeout is for.
"""

from __future__ import annotations

import contextlib
import select
import socket
from collections.abc import Iterator


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def unaccepting_listener(host: str = "127.0.0.1") -> Iterator[int]:
    """A port that listens but never accepts, its queue full: new connects hang in SYN.

    Linux drops a SYN while the listener's accept queue is full, so a client's connect
    neither succeeds nor fails until its own timeout. The queue is filled with connections
    of our own, until one more does not complete within a short wait.
    """
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind((host, 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(16):
            filler = socket.socket()
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect((host, port))
            if not _connects_within(filler, 0.3):
                break
        else:
            raise RuntimeError("the accept queue never filled: connects would not hang")
        yield port
    finally:
        for sock in fillers:
            sock.close()
        listener.close()


def _connects_within(sock: socket.socket, timeout_s: float) -> bool:
    _, writable, _ = select.select([], [sock], [], timeout_s)
    return bool(writable) and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
