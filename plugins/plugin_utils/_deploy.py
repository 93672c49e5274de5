# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Deploying a change with a restart: the checks of the deploy, rollback and traffic variables, and
how many requests a server still runs, read from its load or metrics endpoint (``_load``'s reader,
the one that the drain on the host uses).

Private to the collection; may change at any time. Controller side: ``plugin_utils/_options`` checks
the role's variables with these, and ``plugins/filter/deploy.py`` reads a load answer, before
anything on a host is touched.
"""

from __future__ import annotations

import os.path
import re
import typing as t
import urllib.parse

from ansible_collections.inferops.runbooks.plugins.module_utils._load import running_requests

__all__ = ["deploy_option_problems", "running_requests", "url_problem"]

PREFIX = "sglang_restart_"

# A drop-in file name systemd reads: no directory part, ends in .conf.
DROPIN_NAME = re.compile(r"^[A-Za-z0-9@_.:+-]+\.conf$")
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")

# Variables (without the role prefix) by the kind of value they take.
TEXT = ("dropin_name", "dropin_content", "dropin_template", "env_file", "env_content", "env_template", "router_url", "worker_url", "load_url")
BOOLS = ("force_restart", "rollback", "verify_unit")
HOOK_LISTS = ("drain_hooks", "restore_hooks")
SECRETS = ("router_api_key",)
URLS = ("router_url", "worker_url", "load_url")


def deploy_option_problems(options: t.Mapping[str, t.Any], base_dir: str = ".") -> list[str]:
    """What is wrong with the deploy, rollback and traffic variables; an empty list when nothing is.

    ``options`` maps variable names without the ``sglang_restart_`` prefix to their values as the
    role sees them (AWX surveys send text: numbers and booleans may be strings). Relative template
    and hook paths are looked up under ``base_dir`` (the playbook's directory) on the controller.
    The timeouts are held to their floors with every other number (``_options.FLOORS``).
    """
    problems: list[str] = []
    for name in TEXT + SECRETS:
        if name in options and not isinstance(options[name], str):
            problems.append(f"{PREFIX}{name} must be text, got {_kind(options[name])}" + ("" if name in SECRETS else f" {options[name]!r}"))
    for name in BOOLS:
        if name in options and as_bool(options[name]) is None:
            problems.append(f"{PREFIX}{name} must be true or false, got {options[name]!r}")
    if problems:
        return problems
    problems += _file_problems(options, base_dir)
    problems += _url_problems(options)
    for name in HOOK_LISTS:
        problems += _hook_problems(name, options.get(name), base_dir)
    return problems


def _file_problems(options: t.Mapping[str, t.Any], base_dir: str) -> list[str]:
    problems = []
    name = options.get("dropin_name", "")
    if not DROPIN_NAME.match(name):
        problems.append(f"{PREFIX}dropin_name must be a file name ending in .conf (systemd reads nothing else), without a directory, got {name!r}")
    for kind in ("dropin", "env"):
        content, template = options.get(f"{kind}_content", ""), options.get(f"{kind}_template", "")
        if content and template:
            problems.append(f"{PREFIX}{kind}_content and {PREFIX}{kind}_template are both set: give the new content one way")
        if template and not os.path.isfile(resolve(template, base_dir)):
            problems.append(f"{PREFIX}{kind}_template: no such file on the controller: {resolve(template, base_dir)}")
    env_file = options.get("env_file", "")
    wants_env = bool(options.get("env_content") or options.get("env_template"))
    if wants_env and not env_file:
        problems.append(f"{PREFIX}env_file must name the environment file on the host when {PREFIX}env_content or {PREFIX}env_template is set")
    if env_file and not wants_env:
        problems.append(f"{PREFIX}env_file is set but neither {PREFIX}env_content nor {PREFIX}env_template gives its new content")
    if env_file and (not env_file.startswith("/") or env_file.endswith("/") or "/../" in env_file + "/" or "\n" in env_file):
        problems.append(f"{PREFIX}env_file must be an absolute path to a file, got {env_file!r}")
    return problems


def _url_problems(options: t.Mapping[str, t.Any]) -> list[str]:
    problems = []
    for name in URLS:
        value = options.get(name, "")
        if value and (problem := url_problem(value)):
            problems.append(f"{PREFIX}{name} {problem}")
    if options.get("router_api_key") and not options.get("router_url"):
        problems.append(f"{PREFIX}router_api_key is set but {PREFIX}router_url is empty: no router would be told anything")
    return problems


def _hook_problems(name: str, hooks: t.Any, base_dir: str) -> list[str]:
    if hooks in (None, "", []):
        return []
    if isinstance(hooks, str):
        hooks = split_list(hooks)
    if not isinstance(hooks, (list, tuple)) or not all(isinstance(hook, str) and hook.strip() for hook in hooks):
        return [f"{PREFIX}{name} must be a list of task files (or comma-separated text), got {hooks!r}"]
    return [f"{PREFIX}{name}: no such task file on the controller: {resolve(hook, base_dir)}" for hook in hooks if not os.path.isfile(resolve(hook, base_dir))]


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL with a host (None when it is one)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http:// or https:// URL with a host, got {url!r}"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"has a port that is not a number: {url!r}"
    if parts.username or parts.password:
        return "must not carry credentials in the URL (use the API key variable)"
    return None


def resolve(path: str, base_dir: str) -> str:
    """A controller path as the role uses it: relative paths are under the playbook's directory."""
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(base_dir, path))


def split_list(value: t.Any) -> list[t.Any]:
    """A list as given: a list stays, comma-separated text is split, empty values are []."""
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def as_bool(value: t.Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    return True if text in TRUE_WORDS else False if text in FALSE_WORDS else None


def _kind(value: t.Any) -> str:
    for kind, words in ((bool, "a boolean"), ((int, float), "a number"), (t.Mapping, "a mapping"), ((list, tuple), "a list")):
        if isinstance(value, kind):
            return words
    return type(value).__name__
