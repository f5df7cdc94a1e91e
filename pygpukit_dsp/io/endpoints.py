"""Network endpoints of the ``zmq`` source and sink: checked when a pipeline is loaded, resolved
when it is opened.

Built in: ``tcp://HOST:PORT`` (bind: ``tcp://*:PORT``, ``tcp://127.0.0.1:*`` for a port the OS
picks) and ``ipc://PATH`` (a relative path resolves against the YAML file's folder). Other
schemes are resolved by a function registered with :func:`register_scheme`, called at open time
with the endpoint text and whether the socket binds; it returns a ``tcp://`` or ``ipc://``
endpoint. That is where placement (e.g. Ray actors whose endpoints become node addresses) plugs
in: the YAML names a logical endpoint, and the address is known only when the stream starts.
After opening, the component's ``endpoint_bound`` holds the address a bound socket really got
(the port the OS picked for ``*``), to hand to its peers.

One such scheme is registered here: ``cluster://NAME``, a logical link between pipelines. Run in
one process (``gk-stream run FILE``, a ``Session``), every ``cluster://NAME`` resolves to the
same ipc socket in a folder of this process (removed at exit), so the pipelines of one file meet;
``gk-stream run FILE --cluster ray`` replaces it in each Ray actor by one that binds on the
actor's node address and connects to the address the binding actor reported
(:mod:`pygpukit_dsp.cluster`).
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Callable

# resolver(endpoint_text, bind) -> "tcp://..." | "ipc://..."
Resolver = Callable[[str, bool], str]
_RESOLVERS: dict[str, Resolver] = {}
BUILTIN_SCHEMES = ("tcp", "ipc")
IPC_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL

_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://(.*)$")
_HOST = re.compile(r"^(\*|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$")


def register_scheme(scheme: str, resolver: Resolver) -> None:
    """Resolve endpoints ``SCHEME://...`` with ``resolver(text, bind)`` when a component opens."""
    if scheme in BUILTIN_SCHEMES or not re.match(r"^[a-z][a-z0-9+.-]*$", scheme):
        raise ValueError(f"cannot register endpoint scheme {scheme!r}")
    _RESOLVERS[scheme] = resolver


def unregister_scheme(scheme: str) -> None:
    _RESOLVERS.pop(scheme, None)


def schemes() -> tuple[str, ...]:
    return BUILTIN_SCHEMES + tuple(sorted(_RESOLVERS))


def check(text: str, *, bind: bool) -> str:
    """Check an endpoint's form (ValueError saying what is wrong); returns it unchanged."""
    if not isinstance(text, str) or not text.strip() or text != text.strip() or any(c in text for c in "\x00\n\r"):
        raise ValueError("an endpoint is a non-empty string without spaces around it, e.g. 'tcp://127.0.0.1:5555'")
    m = _SCHEME.match(text)
    if m is None:
        raise ValueError(f"'{text}' is not an endpoint: write SCHEME://ADDRESS, e.g. 'tcp://127.0.0.1:5555' or "
                         "'ipc:///tmp/stream.ipc'")
    scheme, rest = m.groups()
    if scheme == "tcp":
        host, sep, port = rest.rpartition(":")
        if not sep or not host:
            raise ValueError(f"'{text}': a tcp endpoint needs HOST:PORT, e.g. 'tcp://127.0.0.1:5555'")
        if not _HOST.match(host):
            raise ValueError(f"'{text}': '{host}' is not a host name or address")
        if port == "*":
            if not bind:
                raise ValueError(f"'{text}': port '*' (any port) only works where the socket binds")
        elif not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"'{text}': the port must be 1..65535" + (" or '*'" if bind else ""))
        if host == "*" and not bind:
            raise ValueError(f"'{text}': host '*' (every interface) only works where the socket binds; "
                             "connect to an address such as 127.0.0.1")
        return text
    if scheme == "ipc":
        if not rest or rest.endswith("/"):
            raise ValueError(f"'{text}': an ipc endpoint needs a socket file path, e.g. 'ipc:///tmp/stream.ipc'")
        return text
    if scheme == CLUSTER_SCHEME and scheme in _RESOLVERS:
        link_name(text)
        return text
    if scheme in _RESOLVERS:
        return text
    raise ValueError(f"'{text}': unknown scheme '{scheme}'; endpoints are {', '.join(s + '://' for s in schemes())}")


def resolve(text: str, *, bind: bool, base_dir: Path) -> str:
    """The endpoint a socket binds or connects to: ipc paths made absolute, other schemes resolved."""
    scheme = text.split("://", 1)[0]
    if scheme in _RESOLVERS:
        resolved = _RESOLVERS[scheme](text, bind)
        if resolved.split("://", 1)[0] not in BUILTIN_SCHEMES:
            raise ValueError(f"the '{scheme}' resolver turned '{text}' into '{resolved}', which is not tcp:// or ipc://")
        check(resolved, bind=bind)
        text = resolved
    if text.startswith("ipc://"):
        path = Path(text[len("ipc://"):]).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        if len(str(path).encode()) > IPC_PATH_MAX:
            raise ValueError(f"the ipc socket path {path} is {len(str(path).encode())} bytes long; the system takes "
                             f"at most {IPC_PATH_MAX} (use a shorter path, e.g. under /tmp)")
        return f"ipc://{path}"
    return text


# ----------------------------------------------------------------------------- cluster://NAME

CLUSTER_SCHEME = "cluster"
_LINK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_local_dir: Path | None = None
_local_lock = threading.Lock()


def link_name(text: str) -> str | None:
    """NAME of a ``cluster://NAME`` endpoint (ValueError for a bad name); None for other schemes."""
    if not isinstance(text, str) or not text.startswith(CLUSTER_SCHEME + "://"):
        return None
    name = text[len(CLUSTER_SCHEME) + 3:]
    if not _LINK_NAME.match(name):
        raise ValueError(f"'{text}': a cluster link is named with letters, digits, '_', '.' and '-' "
                         "(at most 64), e.g. 'cluster://iq'")
    return name


def _local_cluster_dir() -> Path:
    global _local_dir
    with _local_lock:
        if _local_dir is None:
            _local_dir = Path(tempfile.mkdtemp(prefix="gkc", dir="/tmp" if Path("/tmp").is_dir() else None))
            atexit.register(shutil.rmtree, _local_dir, True)
        return _local_dir


def local_cluster_resolver(text: str, bind: bool) -> str:
    """``cluster://NAME`` in one process: an ipc socket in this process's folder (both sides alike)."""
    name = link_name(text)
    assert name is not None
    return f"ipc://{_local_cluster_dir() / name}.ipc"


_RESOLVERS[CLUSTER_SCHEME] = local_cluster_resolver
