"""kvshare's errors as Python exceptions.

Every failing call raises an Error (or a subclass) carrying the library's
negative code (`code`, a KVS_E_* value or -errno) and its name as
kvs_strerror() gives it (`name`).
"""

from __future__ import annotations

import errno as _errno

from ._lib import lib

# The KVS_E_* codes of kvs_types.h (included by kvshare.h).
E_PROTO = -2001
E_VERSION = -2002
E_OPCODE = -2003
E_TOOBIG = -2004
E_TOOMANY = -2005
E_LAYOUT = -2006
E_ATTACHED = -2007
E_NOTATTACHED = -2008
E_NOLEASE = -2009
E_NOTOWNER = -2010
E_LEASEKIND = -2011
E_FULL = -2012
E_LIMIT = -2013
E_DISCONNECTED = -2014
E_NODAEMON = -2015
E_DAEMON_RUNNING = -2016
E_CONFIG = -2017
E_INTERNAL = -2018
E_PERM = -2019


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
    """The daemon does not serve this process (KVS_E_PERM, -EACCES)."""


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
