"""Remote targets: the same engine requests as a local target, run on a host over SSH
(docs/remote.md)."""

from __future__ import annotations

import shlex
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from .protocol import NOTHING_RAN
from .transport import SshSpec, run_engine

DEFAULT_PYTHON = "python3"
URL_SYNTAX = "ssh://[user@]host[:port]/absolute/path"


@dataclass(frozen=True)
class RemoteTarget:
    """A target whose roots live on an SSH host (fields: docs/api.md). ``cli_options``: the
    options that name this target, for the ``patchkit status`` a lost connection's message gives."""

    spec: SshSpec
    roots: Mapping[str, str]
    python: str | None = None
    modules: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    timeout: float | None = None
    cli_options: tuple[str, ...] | None = field(default=None, compare=False)

    is_remote = True

    def __post_init__(self) -> None:
        roots = dict(self.roots)
        if not roots:
            raise UsageError(f"remote target {self.spec.url} has no roots: give at least one")
        for name, path in roots.items():
            if not isinstance(name, str) or not name:
                raise UsageError(f"remote target {self.spec.url}: root names must be non-empty strings")
            what = f"root {name!r} of {self.spec.url}"
            if not isinstance(path, str) or not (path.startswith("/") or path.startswith("python:/")):
                raise UsageError(f"{what}: {path!r} is not an absolute path on the host (or "
                                 "python:/path/to/bin/python, whose sglang the host finds)")
            if "\0" in path:
                raise UsageError(f"{what}: {path!r} contains a NUL byte")
        object.__setattr__(self, "roots", roots)
        if self.python is not None and (not isinstance(self.python, str) or not self.python.strip()):
            raise UsageError(f"remote target {self.spec.url}: python must be a non-empty string")

    @property
    def description(self) -> str:
        roots = ", ".join(f"{name}={path}" for name, path in self.roots.items())
        return f"{self.spec.url} ({roots})"

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Run one engine request on the host; the target's roots replace the request's. An
        error about the host's own paths (a root, an interpreter, no sglang there) says which
        host: the same words about a local path would send the user to the wrong machine."""
        out = run_engine(self.spec, dict(request, roots=dict(self.roots), python=self.python),
                         python=self.python or DEFAULT_PYTHON, modules=self.modules,
                         timeout=self.timeout, status_command=self.status_command)
        err = out.get("error")
        if (isinstance(err, dict) and err.get("type") == "TargetError"
                and self.spec.url not in str(err.get("message"))):
            out = dict(out, error=dict(err, message=f"on {self.spec.url}: {err.get('message')}"))
        return out

    def left_behind(self, writes: bool, answered: bool) -> str:
        """What an interrupt of the client left on the host, said after "interrupted by
        SIGINT": one outside a session, or before its go-ahead (after it, the session raises
        ``ConnectionLost``). ``writes``: the run writes; ``answered``: the host answered it."""
        if not writes:
            return "; it writes nothing to the target, which is as it was"
        if not answered:
            return f" before the request reached the engine on {self.spec.url}; {NOTHING_RAN}"
        return (f" after the engine on {self.spec.url} had answered: the change is complete. "
                f"Run `{self.status_command}` to see the target")

    @property
    def status_command(self) -> str:
        """The ``patchkit status`` command line that shows this target's state."""
        options = self.cli_options
        if options is None:
            if "sglang" not in self.roots:
                return "patchkit status"  # a URL names the sglang root; no other way to say it
            root = self.roots["sglang"]
            options = ("--target", self.spec.url + ("/" + root if root.startswith("python:")
                                                   else urllib.parse.quote(root)))
            for name, path in self.roots.items():
                if name != "sglang":
                    options += ("--root", f"{name}={path}")
            if self.spec.program != "ssh":
                options += ("--ssh-program", self.spec.program)
        return shlex.join(("patchkit", "status", *options))


def parse_ssh_url(url: str) -> tuple[SshSpec, str]:
    """Split ``ssh://[user@]host[:port]/abs/path`` into how to connect and the root path."""

    def bad(why: str) -> UsageError:
        return UsageError(f"malformed SSH target {url!r}: {why}; expected {URL_SYNTAX}", url=url)

    if not isinstance(url, str) or not url[:6].lower() == "ssh://":
        raise bad("it does not start with ssh://")
    rest = url[6:]
    if "?" in rest or "#" in rest:
        raise bad("'?' and '#' are not allowed (percent-encode them in the path)")
    netloc, slash, path = rest.partition("/")
    path = urllib.parse.unquote(slash + path)
    user = None
    if "@" in netloc:
        user, netloc = netloc.rsplit("@", 1)
        if not user:
            raise bad("empty user name before '@'")
        if ":" in user:
            raise bad("passwords are not supported in the URL; use SSH keys")
        user = urllib.parse.unquote(user)
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise bad("unclosed '[' around the host")
        host, port_text = urllib.parse.unquote(netloc[1:end]), netloc[end + 1 :]
    else:
        host, colon, port_text = netloc.partition(":")
        port_text = colon + port_text
    if not host:
        raise bad("no host")
    port = None
    if port_text:
        digits = port_text[1:]
        if not port_text.startswith(":") or not digits.isdigit() or not 0 < int(digits) < 65536:
            raise bad(f"the port {port_text[1:]!r} is not a number in 1-65535 (IPv6 goes in brackets)")
        port = int(digits)
    if path.startswith("/python:"):  # ssh://host/python:/venv/bin/python: that python's sglang
        path = path[1:]
    if not path or path == "/":
        raise bad("no root path after the host")
    if path.startswith("/~"):
        raise bad("'~' is not expanded; give the root's absolute path")
    if "\0" in path:
        raise bad("the path contains a NUL byte")
    try:
        spec = SshSpec(host=host, user=user, port=port)
    except UsageError as exc:
        raise bad(exc.message) from None
    return spec, path

