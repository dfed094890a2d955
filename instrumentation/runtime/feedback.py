"""Send a run's task success to ``loopwatch serve`` (docs/runtime.md, "Task-success feedback").

Labels come after the run — an evaluator's verdict, a user's thumbs-up — and are sent to
``POST /api/v1/runs/{run_id}/feedback``; serve stores them beside the run (also when the run's
spans have not arrived yet) and every verdict and recommendation then counts the run as
successful or not by its label. Sending the same label twice stores it once.

Standard library only. This is an explicit call, not part of a run: it waits for serve's answer
(``timeout_s``) and raises :class:`FeedbackError` when serve refuses the label or cannot be
reached, so the caller can retry or keep the label for later.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Final, Protocol

from .settings import env_str

__all__ = ["SERVE_URL_ENV", "FeedbackError", "send_feedback"]

SERVE_URL_ENV: Final = "LOOPWATCH_SERVE_URL"
"""Environment variable naming serve's address (``http://127.0.0.1:4318``) for feedback."""


class FeedbackError(Exception):
    """Serve refused the label (``status`` set) or could not be reached (``status`` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _HasRunId(Protocol):
    @property
    def run_id(self) -> str: ...


def _base_url(url: str | None, environ: Mapping[str, str] | None) -> str:
    found = url or env_str(SERVE_URL_ENV, environ) or env_str("LOOPWATCH_LIMITS_URL", environ)
    if not found:
        raise FeedbackError(f"no serve address: pass url= or set {SERVE_URL_ENV}")
    parts = urllib.parse.urlsplit(found)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FeedbackError(f"serve address must be an http(s) URL, got {found!r}")
    return f"{parts.scheme}://{parts.netloc}"


def send_feedback(
    run: _HasRunId | str,
    success: bool,
    *,
    score: float | None = None,
    comment: str | None = None,
    source: str | None = None,
    url: str | None = None,
    token: str | None = None,
    timeout_s: float = 5.0,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Label a run (a ``RunResult`` or its run id) as a task success or failure.

    ``url``: serve's address (default ``$LOOPWATCH_SERVE_URL``, else the address of
    ``$LOOPWATCH_LIMITS_URL``); ``token``: the write token (default ``$LOOPWATCH_WRITE_TOKEN``,
    else ``$LOOPWATCH_TOKEN``). Returns serve's answer: ``{"run_id", "run_known", "changed"}``.
    """
    run_id = run if isinstance(run, str) else run.run_id
    if not isinstance(success, bool):
        raise TypeError(f"success must be True or False, got {success!r}")
    base = _base_url(url, environ)
    token = (
        token or env_str("LOOPWATCH_WRITE_TOKEN", environ) or env_str("LOOPWATCH_TOKEN", environ)
    )
    body = {"success": success, "score": score, "comment": comment, "source": source}
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    target = f"{base}/api/v1/runs/{urllib.parse.quote(run_id, safe='')}/feedback"
    request = urllib.request.Request(
        target, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise FeedbackError(f"serve refused the label ({exc.code}): {detail}", exc.code) from None
    except (OSError, ValueError) as exc:
        raise FeedbackError(f"cannot reach serve at {base}: {exc}") from None
