# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router's worker API, called from the controller: take a host's worker out of rotation before
its server stops, and add it back once it serves again.

Private to the collection; may change at any time. Controller side (ansible-core's ``open_url``).

The SGLang Model Gateway (``smg``; ``sglang-router`` until its 0.3.2) lists its workers at
``GET /workers``, removes one with ``DELETE /workers/{id}`` and adds one with ``POST /workers``; both
changes are accepted (202) and applied a moment later, so each is followed by a wait until the list
shows it. Where the two differ:

* ``smg`` drains a removed worker first (about 5 s, listed with ``"status": "draining"`` and sent no
  new request), then drops it; ``sglang-router`` drops it at once. A draining worker is still listed
  (not yet out) and not in rotation (not yet back).
* ``smg`` answers 409 (``WORKER_ALREADY_EXISTS``, ``WORKER_CREATE_IN_PROGRESS``) to the addition of
  a worker it lists or is adding already (an earlier run added it back before it died);
  ``sglang-router`` answers 202. Either way the wait that follows sees it listed.
* ``smg`` lists a worker only once it answered the gateway's health check and model discovery: an
  added worker that does not serve is never listed.

With an admin key, every call carries it as a bearer token. No message ever carries the admin key
or the server's API key: the router's own words are cleaned of both before they are shown.
"""

from __future__ import annotations

import http.client
import json
import time
import typing as t
import urllib.error
import urllib.parse
from dataclasses import dataclass

from ansible.module_utils.urls import ConnectionError as RequestFailed
from ansible.module_utils.urls import open_url

# what the run record keeps of the router's listing, to add the worker back as it was
REGISTRATION_KEYS = ("priority", "cost", "worker_type", "bootstrap_port")
LISTED = (200,)
REMOVED = (200, 202, 204)
ADDED = (200, 201, 202)
# smg's codes (with 409) for the addition of a worker it lists already, or is adding already
ALREADY_ADDED = ("WORKER_ALREADY_EXISTS", "WORKER_CREATE_IN_PROGRESS")
# a listed worker the gateway sends no new request: being removed
DRAINING = "draining"
POLL_DELAY = 1.0
DEFAULT_TIMEOUT = 30
# the router's own words are shown up to this length
MSG_LIMIT = 300

Worker = dict[str, t.Any]


class RouterError(Exception):
    """The router did not do what was asked; the message says what it answered and what it means.

    ``status`` is the router's HTTP status (None when nothing answered); ``removed`` is True when the
    router accepted the worker's removal before the failure (the worker may be out of rotation)."""

    def __init__(self, message: str, status: int | None = None, *, removed: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.removed = removed

    def then(self, consequence: str, *, removed: bool | None = None) -> RouterError:
        """The same failure, with what it means for the host."""
        return RouterError(f"{self.message}: {consequence}", self.status, removed=self.removed if removed is None else removed)


@dataclass(frozen=True)
class Answer:
    """What the router answered to one call: status None when nothing answered."""

    status: int | None
    msg: str
    body: t.Any = None

    def said(self) -> str:
        return f"{'nothing' if self.status is None else self.status} ({self.msg})"


def registration(worker_url: str, listed_worker: t.Mapping[str, t.Any] | None) -> Worker:
    """The worker's registration, as the run record keeps it: its URL and the keys of the router's
    listing that adding it back must repeat (never a key)."""
    listed = listed_worker or {}
    return {"url": worker_url, **{key: listed[key] for key in REGISTRATION_KEYS if key in listed}}


def worker_spec(kept: t.Mapping[str, t.Any], api_key: str | None) -> Worker:
    """What ``POST /workers`` is sent: the registration, and the server's API key when it has one
    (the router asks the server for its model with it)."""
    return {**kept, "api_key": api_key} if api_key else dict(kept)


def router_base(url: str) -> str:
    """The router's URL without trailing slashes; RouterError when it is not an http(s) URL."""
    base = url.strip().rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RouterError(f"The router URL {url!r} is not an http:// or https:// URL")
    return base


def attempts(retries: int) -> int:
    """How often a wait looks, as ansible-core's until/retries: once, and once more per retry."""
    return retries + 1 if retries > 0 else 1


class Router:
    """One router's worker API; every call times out after ``timeout`` seconds."""

    def __init__(
        self,
        url: str,
        admin_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        clock: t.Callable[[], float] = time.monotonic,
        sleep: t.Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = router_base(url)
        self.admin_key = admin_key or None
        self.timeout = timeout
        self.clock = clock
        self.sleep = sleep

    # -- single calls ---------------------------------------------------------------------------

    def workers(self) -> list[Worker]:
        """The workers the router lists; RouterError when it cannot be read."""
        answer = self._call("GET", "/workers")
        listed = _listed(answer)
        if listed is None:
            reason = answer if answer.status not in LISTED else Answer(answer.status, "its answer has no list of workers")
            raise self._error(f"The router {self.url}/workers answered {reason.said()}", reason.status)
        return listed

    def find(self, worker_url: str) -> Worker | None:
        """The router's entry of the worker at ``worker_url``; None when it is not listed."""
        found = next((worker for worker in self.workers() if worker.get("url") == worker_url), None)
        if found is not None and not (isinstance(found.get("id"), str) and found["id"]):
            raise self._error(f"The router {self.url}/workers answered 200 (it lists {worker_url} without an id)", 200)
        return found

    def remove(self, worker_id: str, worker_url: str | None = None) -> None:
        """Asks the router to remove a worker; RouterError when it refuses."""
        answer = self._call("DELETE", f"/workers/{urllib.parse.quote(worker_id, safe='')}")
        if answer.status not in REMOVED:
            raise self._error(f"The router {self.url} answered {answer.said()} to the removal of {worker_url or 'worker ' + worker_id}", answer.status)

    def add(self, spec: t.Mapping[str, t.Any]) -> None:
        """Asks the router to add a worker; RouterError when it refuses."""
        api_key = spec.get("api_key")
        secrets = (api_key,) if isinstance(api_key, str) and api_key else ()
        answer = self._call("POST", "/workers", dict(spec), secrets)
        if answer.status not in ADDED and not _already_added(answer):
            raise self._error(f"The router {self.url} answered {answer.said()} when {spec.get('url')} was added back", answer.status, secrets)

    def wait_listed(self, worker_url: str, listed: bool, retries: int) -> float:
        """Looks once a second until the router lists the worker in rotation (``listed``) or no
        longer lists it at all; the seconds it took. RouterError when it is not so after ``retries``
        more looks; a look the router does not answer counts as not yet."""
        started = self.clock()
        last = Answer(None, "not asked")
        for attempt in range(attempts(retries)):
            if attempt:
                self.sleep(POLL_DELAY)
            last = self._call("GET", "/workers")
            workers = _listed(last)
            if workers is not None and _shows(workers, worker_url, listed):
                return self.clock() - started
        waited = self.clock() - started
        state = "still listed" if not listed else "did not list"
        looks = attempts(retries)
        tried = f"{looks} look{'s' if looks > 1 else ''} a second apart; last answer: {last.said()}"
        raise self._error(f"The router {self.url} {state} {worker_url} after {waited:.0f} s ({tried})", last.status)

    # -- whole operations -----------------------------------------------------------------------

    def take_out(
        self,
        worker_url: str,
        known_registration: t.Mapping[str, t.Any] | None,
        host: str,
        retries: int,
        keep: t.Callable[[Worker], None] | None = None,
    ) -> dict[str, t.Any]:
        """Takes the worker out of rotation: finds it, removes it, waits until it is no longer listed.

        Returns ``{"registration": ..., "removed": bool}``. A worker an earlier run took out is not
        listed: its registration is ``known_registration`` (the run record's), nothing is removed,
        and that is no error. ``keep`` is called with the registration before the removal (to keep it
        in the run record, so that a run that dies after the removal can still add it back); when it
        raises, nothing is removed and its error is passed on."""
        try:
            listed = self.find(worker_url)
        except RouterError as error:
            raise error.then(f"{host} was not taken out of rotation and nothing was stopped.") from None
        if listed is None:
            return {"registration": registration(worker_url, known_registration), "removed": False}
        kept = registration(worker_url, listed)
        if keep is not None:
            keep(kept)
        try:
            self.remove(str(listed["id"]), worker_url)
        except RouterError as error:
            raise error.then("nothing was stopped.") from None
        try:
            self.wait_listed(worker_url, listed=False, retries=retries)
        except RouterError as error:
            raise error.then("its removal was accepted, and nothing was stopped.", removed=True) from None
        return {"registration": kept, "removed": True}

    def put_back(self, kept: t.Mapping[str, t.Any], api_key: str | None, retries: int) -> None:
        """Adds the worker back with its registration and waits until the router lists it again."""
        consequence = "the server runs, but the router does not send it traffic."
        worker_url = kept.get("url")
        if not isinstance(worker_url, str) or not worker_url:
            raise self._error(f"The worker's registration {dict(kept)!r} has no URL: {consequence}", None, (api_key,) if api_key else ())
        try:
            self.add(worker_spec(kept, api_key))
            self.wait_listed(worker_url, listed=True, retries=retries)
        except RouterError as error:
            raise error.then(consequence) from None

    # -- the calls ------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: t.Mapping[str, t.Any] | None = None, secrets: t.Sequence[str] = ()) -> Answer:
        """One call to the router; never raises: what it answered, or why nothing answered."""
        data = None if body is None else json.dumps(body).encode()
        try:
            # as the uri module called it: proxies from the environment, redirects for reads only
            with open_url(
                f"{self.url}{path}", data=data, method=method, headers=self._headers(body), timeout=self.timeout, follow_redirects="safe"
            ) as response:
                return Answer(int(response.status), str(response.reason or "OK"), _json(response.read()))
        except urllib.error.HTTPError as error:
            with error:
                raw = error.read()
                plain = str(error.headers.get("Content-Type") or "").startswith("text/plain") if error.headers else False
            payload = _json(raw)
            words = _error_text(payload) or (raw.decode(errors="replace").strip() if plain else "")
            return Answer(error.code, self._clean(words or str(error.reason), secrets), payload)
        except urllib.error.URLError as error:
            return Answer(None, self._clean(f"no answer: {error.reason}", secrets))
        except (RequestFailed, OSError, http.client.HTTPException, ValueError) as error:  # a TLS or proxy failure, a timeout while reading, a reset
            return Answer(None, self._clean(f"no answer: {error or type(error).__name__}", secrets))

    def _headers(self, body: t.Mapping[str, t.Any] | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.admin_key:
            headers["Authorization"] = f"Bearer {self.admin_key}"
        return headers

    def _clean(self, text: str, secrets: t.Sequence[str] = ()) -> str:
        """The router's words without the keys (taken out before shortening), on one line."""
        text = " ".join(_redact(text, (self.admin_key, *secrets)).split())
        return text if len(text) <= MSG_LIMIT else text[: MSG_LIMIT - 3] + "..."

    def _error(self, message: str, status: int | None, secrets: t.Sequence[str] = ()) -> RouterError:
        return RouterError(_redact(message, (self.admin_key, *secrets)), status)


def _json(raw: bytes) -> t.Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _error_text(payload: t.Any) -> str:
    """The router's own words in an error answer (``{"error": ...}`` or ``{"message": ...}``)."""
    if isinstance(payload, dict):
        for name in ("error", "message", "detail"):
            if isinstance(payload.get(name), str) and payload[name]:
                return str(payload[name])
    return ""


def _already_added(answer: Answer) -> bool:
    return answer.status == 409 and isinstance(answer.body, dict) and answer.body.get("code") in ALREADY_ADDED


def _shows(workers: list[Worker], worker_url: str, in_rotation: bool) -> bool:
    """Whether the listing shows the worker in rotation (listed, not draining), or, when not
    ``in_rotation``, no longer shows it at all."""
    entries = [worker for worker in workers if worker.get("url") == worker_url]
    if in_rotation:
        return any(worker.get("status") != DRAINING for worker in entries)
    return not entries


def _listed(answer: Answer) -> list[Worker] | None:
    """The workers a listing names; None when the answer is not a list of workers."""
    listed = answer.body.get("workers") if answer.status in LISTED and isinstance(answer.body, dict) else None
    if not isinstance(listed, list):
        return None
    return [worker for worker in listed if isinstance(worker, dict)]


def _redact(text: str, secrets: t.Iterable[str | None]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    return text
