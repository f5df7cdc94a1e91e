"""What ``gk-stream run --view`` does around a Session: check the address and the token, find the
view sinks, start the server before the first block, stop it after the summary.

Nothing listens before every rule is checked: a non-loopback address without a token is a
ConfigError (exit 2), and so is a view sink in a run without --view (nothing would draw it).
The server (aiohttp) runs in a process of its own (view/server.py starts it), only when a view is
served.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import secrets
from typing import Any

from ..errors import ConfigError

DEFAULT_VIEW = "127.0.0.1:8750"


def parse_address(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` (host default 127.0.0.1)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"--view expects [HOST:]PORT, got {text!r}",
                          hint=f"e.g. --view {DEFAULT_VIEW}, --view 8751, or --view alone for {DEFAULT_VIEW}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"--view port must be 0..65535, got {port}", hint="0 takes a free port")
    return host, port


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost; any other name or address counts as reachable from outside."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(text: str | None) -> str | None:
    """``--view-token``: None, ``auto`` (a fresh random token), or the token as given."""
    if text is None:
        return None
    if text == "auto":
        return secrets.token_urlsafe(18)
    if not text.strip():
        raise ConfigError("--view-token is empty", hint="give a token, or 'auto' for a random one")
    return text


def view_sinks(pipelines: list) -> dict[str, Any]:
    """Every view sink of the run by its name (``PIPELINE/SINK`` when several pipelines have them)."""
    from ..io.view_sink import ViewSink

    found = [(p.name, name, sink) for p in pipelines for name, sink in p.topology().sinks.items()
             if isinstance(sink, ViewSink)]
    several = len({p for p, _, _ in found}) > 1
    out: dict[str, Any] = {}
    for pipeline, name, sink in found:
        key = f"{pipeline}/{name}" if several else name
        sink.name = key
        out[key] = sink
    return out


def start_view(args: Any, pipelines: list, session: Any, say: Any) -> Any:
    """The started ViewServer of ``--view`` (None without it), listening before the first block."""
    sinks = view_sinks(pipelines)
    if args.view is None:
        if args.view_token is not None:
            raise ConfigError("--view-token applies to a run with --view", hint=f"add --view (default {DEFAULT_VIEW})")
        if sinks:
            first = next(iter(sinks.values()))
            raise ConfigError(f"sink 'view' ({next(iter(sinks))}) is drawn on the page of gk-stream run --view",
                              where=first.where, hint=f"add --view (default {DEFAULT_VIEW}), or use another sink")
        return None
    host, port = parse_address(args.view)
    token = resolve_token(args.view_token)
    if token is None and not is_loopback(host):
        raise ConfigError(f"--view {args.view} listens beyond this machine and needs a token",
                          hint="add --view-token TOKEN (or --view-token auto), or listen on 127.0.0.1")
    missing = next((m for m in ("aiohttp",) if importlib.util.find_spec(m) is None), None)
    if missing is not None:  # the server process would fail to start: say why here, before it
        raise ConfigError(f"--view needs the 'view' extra ({missing} is not installed)",
                          hint="pip install 'pygpukit-dsp[view]'")
    from .health import SessionHealth
    from .server import ViewServer

    title = ", ".join(p.name for p in pipelines)
    server = ViewServer(host, port, token=token, sinks=sinks, health=SessionHealth(session), title=title).start()
    if args.view_token == "auto":
        say(f"view: {server.url}")
    else:
        say(f"view: {server.url.split('?')[0]}" + (" (with its token: ?token=...)" if token else ""))
    return server
