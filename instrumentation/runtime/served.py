"""Limits that follow ``loopwatch serve`` (docs/runtime.md, "Limits from serve").

``LimitPolicy.from_url(url)`` gives a :class:`FollowedPolicy`: a ``LimitPolicy`` whose content is
the limits version serve holds. A background thread polls serve with ``If-None-Match`` (the
version's ETag: an unchanged version costs a 304 and no parsing); a new version replaces the
content at once, so runs that start after it arrives get it, and runs in flight keep what they
resolved at their start. Each good version is written to a cache file; at start the cache is read
first, so a process that starts while serve is unreachable runs under the last good set. A run
never waits for the network: it reads the content from memory.

Standard library only (``urllib``), like the rest of the runtime.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .limits import LIMITS_ENV, LimitPolicy, LoopLimits
from .settings import env_str

__all__ = [
    "DEFAULT_POLL_S",
    "LIMITS_CACHE_ENV",
    "LIMITS_POLL_ENV",
    "LIMITS_URL_ENV",
    "FollowedPolicy",
    "follow",
    "followed_from_env",
    "limits_endpoint",
]

LIMITS_URL_ENV: Final = "LOOPWATCH_LIMITS_URL"
"""Environment variable naming serve (``http://host:4318``) or its limits endpoint; runs
without limits then follow it (before ``LOOPWATCH_LIMITS``, which becomes the fallback)."""
LIMITS_CACHE_ENV: Final = "LOOPWATCH_LIMITS_CACHE"
"""Environment variable naming the file the last good served limits are kept in."""
LIMITS_POLL_ENV: Final = "LOOPWATCH_LIMITS_POLL_S"
"""Environment variable: seconds between two polls (default :data:`DEFAULT_POLL_S`)."""
DEFAULT_POLL_S: Final = 10.0
"""Seconds between two polls: a new version reaches every agent within this."""
_PATH: Final = "/api/v1/limits"


def limits_endpoint(url: str) -> str:
    """The limits endpoint of ``url``: serve's address (``http://127.0.0.1:4318``) gets
    ``/api/v1/limits``; a URL with a path is taken as it is."""
    base = url.rstrip("/")
    scheme_end = base.find("://")
    if scheme_end < 0 or not base.startswith(("http://", "https://")):
        raise ValueError(f"limits URL must start with http:// or https://, got {url!r}")
    return base if "/" in base[scheme_end + 3 :] else base + _PATH


def _default_cache(endpoint: str) -> Path:
    root = env_str("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256(endpoint.encode()).hexdigest()[:16]
    return Path(root) / "loopwatch" / f"limits-{digest}.json"


@dataclass(frozen=True, slots=True)
class _Held:
    policy: LimitPolicy
    version: int | None
    etag: str | None


class FollowedPolicy(LimitPolicy):
    """A ``LimitPolicy`` that follows the limits version ``loopwatch serve`` holds (see the
    module). Build it with :meth:`LimitPolicy.from_url`; :meth:`close` stops the polling."""

    url: str
    """The limits endpoint polled."""
    poll_s: float
    cache_path: Path
    """Where the last good version is kept."""
    last_error: str | None
    """Why the last poll failed (``None``: it did not)."""
    last_contact: float | None
    """When serve last answered (Unix time)."""
    _token: str | None
    _timeout_s: float
    _lock: threading.Lock
    _stop: threading.Event
    _first: threading.Event
    _held: _Held
    _thread: threading.Thread | None

    def __init__(
        self,
        url: str,
        *,
        poll_s: float = DEFAULT_POLL_S,
        cache_path: str | os.PathLike[str] | None = None,
        token: str | None = None,
        timeout_s: float = 5.0,
        fallback: LimitPolicy | None = None,
        start: bool = True,
    ) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s must be positive, got {poll_s!r}")
        endpoint = limits_endpoint(url)
        set_ = object.__setattr__
        set_(self, "url", endpoint)
        set_(self, "poll_s", float(poll_s))
        set_(self, "cache_path", Path(cache_path) if cache_path else _default_cache(endpoint))
        set_(self, "_token", token)
        set_(self, "_timeout_s", timeout_s)
        set_(self, "_lock", threading.Lock())
        set_(self, "_stop", threading.Event())
        set_(self, "_first", threading.Event())
        set_(self, "last_error", None)
        set_(self, "last_contact", None)
        held = self._read_cache() or _Held(fallback or LimitPolicy(), None, None)
        set_(self, "_held", held)
        set_(self, "_thread", None)
        if start:
            thread = threading.Thread(target=self._poll, name="loopwatch-limits", daemon=True)
            set_(self, "_thread", thread)
            thread.start()

    # --- what runs read: one snapshot, from memory -----------------------------------------

    def current(self) -> LimitPolicy:
        """The limits version held now (a plain ``LimitPolicy`` that never changes)."""
        return self._held.policy

    def snapshot(self) -> tuple[LimitPolicy, int | None]:
        """The policy held now and its serve version, read together."""
        held = self._held
        return held.policy, held.version

    @property
    def served_version(self) -> int | None:
        """The serve version held now (``None``: the fallback, nothing served yet)."""
        return self._held.version

    @property
    def defaults(self) -> LoopLimits:
        return self.current().defaults

    @property
    def task_types(self) -> Mapping[str, LoopLimits]:
        return self.current().task_types

    @property
    def shadow_defaults(self) -> Mapping[str, Any]:
        return self.current().shadow_defaults

    @property
    def shadow(self) -> Mapping[str, Mapping[str, Any]]:
        return self.current().shadow

    def for_task(self, task_type: str) -> LoopLimits:
        return self.current().for_task(task_type)

    def shadow_for(self, task_type: str) -> LoopLimits | None:
        return self.current().shadow_for(task_type)

    def to_toml(self) -> str:
        return self.current().to_toml()

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"FollowedPolicy({self.url!r}, version={self.served_version})"

    # --- following serve ----------------------------------------------------------------

    def wait_for_first(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the first answer from serve (for a process start; runs
        never call it). True if serve answered."""
        return self._first.wait(timeout_s)

    def refresh(self) -> bool:
        """Ask serve now (a conditional GET); True when a new version was taken. Never raises:
        a failure is kept in ``last_error`` and the held version stays."""
        held = self._held
        headers = {"Accept": "application/json"}
        if held.etag:
            headers["If-None-Match"] = held.etag
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(self.url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                body = response.read()
                etag = response.headers.get("ETag")
            data = json.loads(body)
            policy = LimitPolicy.from_toml(str(data["toml"]))
            version = int(data["version"])
        except urllib.error.HTTPError as exc:
            answered = exc.code in (304, 404)
            self._contact(None if answered else f"HTTP {exc.code} from {self.url}")
            return False
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._contact(f"{type(exc).__name__}: {exc}", reached=False)
            return False
        object.__setattr__(self, "_held", _Held(policy, version, etag))
        self._contact(None)
        self._write_cache(version, etag, policy)
        return True

    def close(self) -> None:
        """Stop polling (the held version stays usable)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._timeout_s + 1)

    def _contact(self, error: str | None, *, reached: bool = True) -> None:
        object.__setattr__(self, "last_error", error)
        if reached:
            object.__setattr__(self, "last_contact", time.time())
            self._first.set()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.poll_s)

    def _read_cache(self) -> _Held | None:
        try:
            data = json.loads(Path(self.cache_path).read_text(encoding="utf-8"))
            if data.get("url") != self.url:
                return None
            return _Held(LimitPolicy.from_toml(str(data["toml"])), int(data["version"]), None)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # no cache, or a damaged one: serve or the fallback decides

    def _write_cache(self, version: int, etag: str | None, policy: LimitPolicy) -> None:
        path = Path(self.cache_path)
        data = {"url": self.url, "version": version, "etag": etag, "toml": policy.to_toml()}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with self._lock, contextlib.suppress(OSError):  # a read-only disk never stops the agent
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, path)


def follow(
    url: str,
    *,
    poll_s: float = DEFAULT_POLL_S,
    cache_path: str | os.PathLike[str] | None = None,
    token: str | None = None,
    fallback: LimitPolicy | None = None,
    wait_s: float = 0.0,
) -> FollowedPolicy:
    """``LimitPolicy.from_url``: limits that follow serve at ``url``, polled in the background
    every ``poll_s`` seconds with ``If-None-Match``; a new version applies to runs that start
    after it arrives. The last good version is kept in ``cache_path`` and used from the next
    start on while serve is unreachable; before any version, ``fallback`` (default
    ``LimitPolicy()``). ``wait_s``: wait that long here for serve's first answer (runs never
    wait)."""
    followed = FollowedPolicy(
        url, poll_s=poll_s, cache_path=cache_path, token=token, fallback=fallback
    )
    if wait_s > 0:
        followed.wait_for_first(wait_s)
    return followed


_followed: dict[tuple[str, str | None, str | None], FollowedPolicy] = {}
_followed_lock = threading.Lock()


def followed_from_env(environ: Mapping[str, str] | None = None) -> FollowedPolicy | None:
    """The policy following ``LOOPWATCH_LIMITS_URL``, one per process (``None`` when unset).

    Options from the environment: ``LOOPWATCH_LIMITS_CACHE``, ``LOOPWATCH_LIMITS_POLL_S``, the
    read token ``LOOPWATCH_TOKEN``; the ``LOOPWATCH_LIMITS`` file, if set, is the fallback until
    serve first answers (when there is no cache)."""
    url = env_str(LIMITS_URL_ENV, environ)
    if not url:
        return None
    cache = env_str(LIMITS_CACHE_ENV, environ)
    token = env_str("LOOPWATCH_TOKEN", environ)
    key = (url, cache, token)
    with _followed_lock:
        found = _followed.get(key)
        if found is None:
            poll = env_str(LIMITS_POLL_ENV, environ)
            path = env_str(LIMITS_ENV, environ)
            fallback = LimitPolicy.from_toml(Path(path).expanduser()) if path else None
            found = FollowedPolicy(
                url,
                poll_s=float(poll) if poll else DEFAULT_POLL_S,
                cache_path=cache,
                token=token,
                fallback=fallback,
            )
            _followed[key] = found
        return found
