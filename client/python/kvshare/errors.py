"""kvshare's errors as Python exceptions.

Every failing call raises an Error (or a subclass) carrying the library's
negative code (`code`, a KVS_E_* value or -errno) and its name as
kvs_strerror() gives it (`name`).
"""

from __future__ import annotations

import errno as _errno

from . import _abi
from ._lib import lib

# The KVS_E_* codes of kvs_types.h (every one: test_abi.py checks).
E_PROTO = _abi.KVS_E_PROTO
E_VERSION = _abi.KVS_E_VERSION
E_OPCODE = _abi.KVS_E_OPCODE
E_TOOBIG = _abi.KVS_E_TOOBIG
E_TOOMANY = _abi.KVS_E_TOOMANY
E_LAYOUT = _abi.KVS_E_LAYOUT
E_ATTACHED = _abi.KVS_E_ATTACHED
E_NOTATTACHED = _abi.KVS_E_NOTATTACHED
E_NOLEASE = _abi.KVS_E_NOLEASE
E_NOTOWNER = _abi.KVS_E_NOTOWNER
E_LEASEKIND = _abi.KVS_E_LEASEKIND
E_FULL = _abi.KVS_E_FULL
E_LIMIT = _abi.KVS_E_LIMIT
E_DISCONNECTED = _abi.KVS_E_DISCONNECTED
E_NODAEMON = _abi.KVS_E_NODAEMON
E_DAEMON_RUNNING = _abi.KVS_E_DAEMON_RUNNING
E_CONFIG = _abi.KVS_E_CONFIG
E_INTERNAL = _abi.KVS_E_INTERNAL
E_PERM = _abi.KVS_E_PERM


class Error(Exception):
    """A kvshare call failed: `code` is the negative error code, `name` the
    library's name for it."""

    def __init__(self, code: int, what: str = "") -> None:
        self.code = code
        self.name = strerror(code)
        super().__init__(f"{what}: {self.name} ({code})" if what else f"{self.name} ({code})")


class NoDaemonError(Error):
    """Nothing listens on the socket (KVS_E_NODAEMON)."""


class DisconnectedError(Error):
    """The daemon went away (KVS_E_DISCONNECTED); Client.reconnect() attaches again."""


class LayoutError(Error):
    """The layout is invalid or differs from the connection's (KVS_E_LAYOUT, KVS_E_ATTACHED)."""


class FullError(Error):
    """No slot could be made: every evictable block is pinned (KVS_E_FULL)."""


class LimitError(Error):
    """A per-client or per-request limit was reached (KVS_E_LIMIT, KVS_E_TOOMANY)."""


class PermissionDenied(Error):
    """The daemon does not serve this process, or this request of it: not an
    operator, or another tenant's namespace (KVS_E_PERM, -EACCES)."""


class LeaseError(Error):
    """A lease is unknown, not this connection's, or of the wrong kind."""


class InvalidArgument(Error):
    """An argument the library refused (-EINVAL)."""


class OutOfRange(Error):
    """A page id or block outside its bounds (-ERANGE)."""


class NoDevice(Error):
    """Device memory without a usable CUDA device (-ENODEV)."""


class ProtocolError(Error):
    """The daemon's reply or version is not understood (KVS_E_PROTO, KVS_E_VERSION)."""


class LeaseReleased(Error):
    """The lease has ended (released, committed or aborted): its blocks may
    hold someone else's KV now, so nothing is read or written through it."""

    def __init__(self, what: str = "lease already ended") -> None:
        Exception.__init__(self, what)
        self.code = 0
        self.name = "released"


_BY_CODE: dict[int, type[Error]] = {
    E_NODAEMON: NoDaemonError,
    E_DISCONNECTED: DisconnectedError,
    E_LAYOUT: LayoutError,
    E_ATTACHED: LayoutError,
    E_FULL: FullError,
    E_LIMIT: LimitError,
    E_TOOMANY: LimitError,
    E_PERM: PermissionDenied,
    -_errno.EACCES: PermissionDenied,
    E_NOLEASE: LeaseError,
    E_NOTOWNER: LeaseError,
    E_LEASEKIND: LeaseError,
    -_errno.EINVAL: InvalidArgument,
    -_errno.ERANGE: OutOfRange,
    -_errno.ENODEV: NoDevice,
    E_PROTO: ProtocolError,
    E_VERSION: ProtocolError,
}


def strerror(code: int) -> str:
    """kvs_strerror(): the library's name of an error code."""
    return lib.kvs_strerror(code).decode()


def error(code: int, what: str = "") -> Error:
    """The exception for a negative return code."""
    return _BY_CODE.get(code, Error)(code, what)


def check(rc: int, what: str) -> int:
    """Return rc when it is not an error, raise its exception otherwise."""
    if rc < 0:
        raise error(rc, what)
    return rc
