# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Alertmanager's silences (API v2), called from the controller: a planned restart silences its host's
alerts before the host is taken out, and expires the silence once the host serves again (or at once
when its start failed, so that its alerts fire).

Private to the collection; may change at any time. Controller side (ansible-core's ``open_url``).

``POST /api/v2/silences`` creates a silence (matchers, start, end, who, a comment) and answers its id;
``DELETE /api/v2/silence/{id}`` expires it. A silence matches the host's alerts by the label
``inventory_host`` (the rule ``extensions/prometheus/inference_server.rules.yml`` and its scrape
configuration give every alert of a server that label), and optionally ``engine``.

An optional bearer key and extra headers (a proxy's authentication) go with every call and never into a
message. Every failure is an :class:`AlertmanagerError` with a message that says what was asked and
what came back; :func:`silence_host` and :func:`expire_silence` turn it into a warning, since a
restart does not fail because Alertmanager cannot be reached.
"""

from __future__ import annotations

import datetime
import http.client
import json
import time
import typing as t
import urllib.error
import urllib.parse
from dataclasses import dataclass, field

from ansible.module_utils.urls import ConnectionError as RequestFailed
from ansible.module_utils.urls import open_url

from ansible_collections.inferops.runbooks.plugins.module_utils._history import eta, human

DEFAULT_TIMEOUT = 10.0
CREATED_BY = "inferops.runbooks"
HOST_LABEL = "inventory_host"
ENGINE_LABEL = "engine"
# a silence lasts the expected start times this, at least MIN_SILENCE seconds, at most the budget
DEFAULT_MARGIN = 1.5
MIN_SILENCE = 300.0
MSG_LIMIT = 300


class AlertmanagerError(Exception):
    """Alertmanager did not do what was asked; ``status`` is its HTTP status, None when nothing answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class SilenceDuration:
    """How long a planned restart's silence lasts, and why."""

    seconds: float
    source: str  # "history" (the start history's ETA with the margin) or "budget" (no good start known)
    detail: str


def silence_duration(
    starts: t.Sequence[t.Mapping[str, t.Any]],
    budget: float,
    margin: float = DEFAULT_MARGIN,
    before_start: float = 0.0,
    minimum: float = MIN_SILENCE,
) -> SilenceDuration:
    """The seconds a restart's silence lasts: the time before the start (``before_start``: the drain and
    the stop), then the start: its ETA from the host's good starts (``_history.good_starts``) times
    ``margin``, at least ``minimum``, never more than the start's ``budget``; the budget when no good
    start is known. The run expires the silence once the host passed; this bound only keeps a silence
    from outliving a run that died."""
    budget = max(float(budget), 0.0)
    estimate = eta(starts, "starting", 0.0)
    before = max(float(before_start), 0.0)
    prefix = f"{human(before)} before the start, then " if before else ""
    if estimate is None:
        return SilenceDuration(before + budget, "budget", f"{prefix}the start's budget of {human(budget)} (no good start to learn from)")
    expected = max(float(estimate["remaining"]), float(estimate["high"] or 0.0))
    start = min(max(expected * margin, minimum), budget)
    detail = f"{prefix}{margin:g}x the expected start of {human(expected)} ({estimate['starts']} good start{'s' if estimate['starts'] != 1 else ''})"
    if start == budget and expected * margin > budget:
        detail += f", cut to the budget of {human(budget)}"
    elif start == minimum and expected * margin < minimum:
        detail += f", raised to {human(minimum)}"
    return SilenceDuration(before + start, "history", detail)


def silence_comment(run_id: str, host: str, duration: SilenceDuration | None = None) -> str:
    """The comment a planned restart's silence carries: who made it, for which run and host, and why it
    lasts as long as it does."""
    comment = f"Planned restart of {host} by inferops.runbooks, run {run_id}: expired when the host serves again"
    return f"{comment}; lasts {duration.detail}" if duration else comment


def host_matchers(host: str, engine: str | None = None) -> list[dict[str, t.Any]]:
    """The matchers of one host's alerts (equality, no regular expression)."""
    labels = [(HOST_LABEL, host)] + ([(ENGINE_LABEL, engine)] if engine else [])
    return [{"name": name, "value": value, "isRegex": False, "isEqual": True} for name, value in labels]


def rfc3339(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, tz=datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Answer:
    status: int | None
    msg: str
    body: t.Any = None

    def said(self) -> str:
        return f"could not be reached ({self.msg})" if self.status is None else f"answered {self.status} ({self.msg})"


@dataclass
class Alertmanager:
    """One Alertmanager's API v2; every call times out after ``timeout`` seconds."""

    url: str
    bearer_token: str | None = None
    headers: t.Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    clock: t.Callable[[], float] = time.time

    def __post_init__(self) -> None:
        base = str(self.url).strip().rstrip("/")
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AlertmanagerError(f"The Alertmanager URL {self.url!r} is not an http:// or https:// URL")
        self.url = base
        bad = [name for name, value in dict(self.headers).items() if not isinstance(name, str) or not isinstance(value, str)]
        if bad:
            raise AlertmanagerError(f"Alertmanager's extra headers must map names to strings (header {bad[0]!r} does not)")

    def create_silence(self, matchers: t.Sequence[t.Mapping[str, t.Any]], seconds: float, comment: str, created_by: str = CREATED_BY) -> str:
        """Silences the alerts the matchers match, from now for ``seconds``; the new silence's id."""
        if seconds <= 0:
            raise AlertmanagerError(f"A silence must last more than 0 seconds, got {seconds!r}")
        now = self.clock()
        body = {"matchers": list(matchers), "startsAt": rfc3339(now), "endsAt": rfc3339(now + seconds), "createdBy": created_by, "comment": comment}
        answer = self._call("POST", "/api/v2/silences", body)
        silence_id = answer.body.get("silenceID") if answer.status == 200 and isinstance(answer.body, dict) else None
        if not isinstance(silence_id, str) or not silence_id:
            raise AlertmanagerError(f"Alertmanager {self.url} {answer.said()} when asked for a silence ({_matched(matchers)})", answer.status)
        return silence_id

    def expire_silence(self, silence_id: str) -> None:
        """Expires a silence (its alerts notify again); one already expired is no error."""
        answer = self._call("DELETE", f"/api/v2/silence/{urllib.parse.quote(silence_id, safe='')}")
        if answer.status == 200 or (answer.status == 500 and "already expired" in answer.msg):
            return
        raise AlertmanagerError(f"Alertmanager {self.url} {answer.said()} when asked to expire silence {silence_id}", answer.status)

    def silence(self, silence_id: str) -> dict[str, t.Any]:
        """One silence as Alertmanager shows it (``status.state``: active, pending or expired)."""
        answer = self._call("GET", f"/api/v2/silence/{urllib.parse.quote(silence_id, safe='')}")
        if answer.status != 200 or not isinstance(answer.body, dict):
            raise AlertmanagerError(f"Alertmanager {self.url} {answer.said()} when asked for silence {silence_id}", answer.status)
        return answer.body

    # -- the calls ------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: t.Mapping[str, t.Any] | None = None) -> Answer:
        """One call; never raises: what Alertmanager answered, or why nothing answered."""
        data = None if body is None else json.dumps(body).encode()
        try:
            with open_url(
                f"{self.url}{path}", data=data, method=method, headers=self._headers(body), timeout=self.timeout, follow_redirects="safe"
            ) as response:
                return Answer(int(response.status), str(response.reason or "OK"), _json(response.read()))
        except urllib.error.HTTPError as error:
            with error:
                raw = error.read()
            return Answer(error.code, self._clean(_error_text(raw) or str(error.reason)), _json(raw))
        except urllib.error.URLError as error:
            return Answer(None, self._clean(str(error.reason)))
        except (RequestFailed, OSError, http.client.HTTPException, ValueError) as error:  # TLS, proxy, timeout while reading, reset
            return Answer(None, self._clean(str(error) or type(error).__name__))

    def _headers(self, body: t.Mapping[str, t.Any] | None) -> dict[str, str]:
        headers = {"Accept": "application/json", **dict(self.headers)}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.bearer_token:
            headers["Authorization"] = f"Bearer {self.bearer_token}"
        return headers

    def _clean(self, text: str) -> str:
        """Alertmanager's words without the key or a header's value, on one line, shortened."""
        for secret in (self.bearer_token, *dict(self.headers).values()):
            if secret:
                text = text.replace(secret, "********")
        text = " ".join(text.split())
        return text if len(text) <= MSG_LIMIT else text[: MSG_LIMIT - 3] + "..."


def silence_host(
    alertmanager: Alertmanager, host: str, seconds: float, run_id: str, engine: str | None = None, comment: str | None = None
) -> tuple[str | None, str | None]:
    """Silences one host's alerts for ``seconds``: (the silence's id, None), or (None, a warning that says
    why the alerts of ``host`` are not silenced). Never raises."""
    try:
        silence_id = alertmanager.create_silence(host_matchers(host, engine), seconds, comment or silence_comment(run_id, host))
    except AlertmanagerError as error:
        return None, f"{host}'s alerts are not silenced during its restart: {error.message}"
    return silence_id, None


def expire_silence(alertmanager: Alertmanager, silence_id: str, host: str) -> str | None:
    """Expires a host's silence: None, or a warning that says the silence stays until its end. Never raises."""
    try:
        alertmanager.expire_silence(silence_id)
    except AlertmanagerError as error:
        return f"{host}'s silence {silence_id} was not expired (it ends by itself at its end time): {error.message}"
    return None


def _matched(matchers: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    return ", ".join(f"{m.get('name')}{'=' if m.get('isEqual', True) else '!='}{'~' if m.get('isRegex') else ''}{m.get('value')!r}" for m in matchers)


def _json(raw: bytes) -> t.Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _error_text(raw: bytes) -> str:
    """Alertmanager's own words in an error answer: a JSON string, ``{"message": ...}``, or plain text."""
    payload = _json(raw)
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("message"), str):
        return str(payload["message"])
    return raw.decode("utf-8", errors="replace").strip()[:MSG_LIMIT] if raw else ""
