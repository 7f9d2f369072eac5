"""HTTP to a Prometheus server: the one way the dashboard fetches anything.

* Only ``http://`` and ``https://`` URLs with a host (:func:`check_url`), checked before any
  request; redirects only to such URLs. The opener has no ``file:``, ``ftp:`` or ``data:``
  handler at all.
* A failed answer becomes a :class:`SourceError` naming the HTTP status and its standard
  reason phrase: a fetched body is never put into a message (the page shows messages).
* Bodies are read up to ``MAX_BODY_BYTES``.
"""

from __future__ import annotations

import http
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from .sources import SourceError

SCHEMES = ("http", "https")
MAX_BODY_BYTES = 64 * 1024 * 1024
BAD_URL = "The Prometheus URL must be an http:// or https:// URL with a host, such as http://127.0.0.1:9090."


def check_url(url: str) -> Optional[str]:
    """None if ``url`` may be fetched, else the sentence saying why not."""
    try:
        parts = urllib.parse.urlsplit((url or "").strip())
        host = parts.hostname
    except ValueError:
        return BAD_URL
    if parts.scheme.lower() not in SCHEMES or not host:
        return BAD_URL
    return None


def _reason(code: int) -> str:
    try:
        return f"HTTP {code} {http.HTTPStatus(code).phrase}"
    except ValueError:
        return f"HTTP {code}"


class _Redirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if check_url(newurl) is not None:
            raise urllib.error.HTTPError(req.full_url, code, "redirect refused", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener() -> urllib.request.OpenerDirector:
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(), urllib.request.HTTPHandler(),
                    urllib.request.HTTPSHandler(), urllib.request.HTTPDefaultErrorHandler(), _Redirects(),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


class PrometheusHTTP:
    """GET ``/api/v1/...`` of one server; ``data`` of a successful answer, else SourceError."""

    RETRY_AFTER_S = 10.0    # after a connection failure, answer "unreachable" at once for this long

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = (url or "").strip().rstrip("/")
        self.timeout = timeout
        self._problem = check_url(self.url) if self.url else "no Prometheus URL configured (OBSERVED_PROMETHEUS_URL)"
        self._opener = _opener()
        self._down_until = 0.0
        self._down_error = ""

    def get(self, path: str, params: Optional[dict] = None):
        if self._problem:
            raise SourceError(self._problem)
        if time.monotonic() < self._down_until:       # a dead server must not stall every refresh
            raise SourceError(self._down_error)
        q = ("?" + urllib.parse.urlencode(params)) if params else ""
        try:
            with self._opener.open(self.url + path + q, timeout=self.timeout) as resp:
                raw = resp.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise SourceError(f"Prometheus {path}: {_reason(exc.code)}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            why = getattr(exc, "reason", None) or type(exc).__name__
            self._down_error = f"cannot reach Prometheus at {self.url}: {why}"
            self._down_until = time.monotonic() + self.RETRY_AFTER_S
            raise SourceError(self._down_error) from None
        if len(raw) > MAX_BODY_BYTES:
            raise SourceError(f"Prometheus {path}: the answer is larger than {MAX_BODY_BYTES // 2**20} MiB")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise SourceError(f"Prometheus {path}: the answer is not Prometheus API JSON") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise SourceError(f"Prometheus {path}: the query did not succeed")
        return body.get("data")
