#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: server_load
short_description: Wait on the managed host until an inference server runs no more requests
version_added: 0.3.0
description:
  - Reads the server's load from the managed host itself, every O(interval) seconds, until it runs and queues no
    request, or O(timeout) seconds passed (the drain before a restart). One call is the whole wait.
  - Each engine publishes its load at a few endpoints, asked in turn (the URL's own path first). SGLang - C(/v1/loads)
    (running plus waiting requests of every data-parallel rank), C(/get_load) (older servers) and C(/metrics)
    (C(sglang:num_running_reqs) plus C(sglang:num_queue_reqs), with C(--enable-metrics)). vLLM - C(/metrics)
    (C(vllm:num_requests_running) plus C(vllm:num_requests_waiting)). A URL of another path is read as given.
  - SGLang started with C(--api-key) guards every path but C(/health*) and C(/metrics) - the guarded endpoints are
    sent O(api_key) in an C(Authorization) header; an answer of 401 is reported as such, never taken for no load.
  - A read that found no figure is never taken for zero - the wait goes on until O(timeout), unless
    O(unknown_load=proceed). A refused connection ends the wait at once - nothing listens on the port, so no request
    can run there. On a node of rank 1 or more of a multi-node server (O(node_rank)), nothing is read - the
    requests enter at node 0.
  - It never fails for what it saw - RV(drain) says it, the caller decides.
author:
  - inferops.runbooks contributors (@inferops)
options:
  url:
    description:
      - The server's load URL (its scheme, host and port name the server; its path is asked first).
    type: str
    required: true
  engine:
    description: The server's engine, which says where it publishes its load and what the answers mean.
    type: str
    choices: [auto, sglang, vllm]
    default: sglang
  api_key:
    description: The server's API key, sent to the endpoints the server guards with it.
    type: str
  timeout:
    description: Seconds to wait for the server to run no request; more than 0.
    type: float
    default: 300
  interval:
    description: Seconds between two reads; more than 0.
    type: float
    default: 5
  unknown_load:
    description:
      - What to do when no endpoint gives a figure (a 401, a 404, an answer that holds none, no answer in time).
      - V(wait) reads again until O(timeout); V(proceed) ends the wait at once.
    type: str
    choices: [wait, proceed]
    default: wait
  node_rank:
    description: The node's rank in a multi-node server; on a node of rank 1 or more nothing is read.
    type: int
    default: 0
  validate_certs:
    description: Check the server's certificate (https URLs).
    type: bool
    default: true
notes:
  - The reads come from the managed host, never through a proxy.
seealso:
  - module: inferops.runbooks.wait_ready
"""

EXAMPLES = r"""
- name: Wait up to 5 minutes until the server runs no request
  inferops.runbooks.server_load:
    url: http://127.0.0.1:30000/v1/loads
    engine: sglang
    api_key: "{{ sglang_api_key }}"
    timeout: 300
  register: drain

- name: Say what the drain saw
  ansible.builtin.debug:
    msg: "{{ drain.drain.msg }}"
"""

RETURN = r"""
drain:
  description: What the wait saw.
  returned: always
  type: dict
  contains:
    load_url:
      description: The load URL given.
      type: str
    url:
      description: The URL whose answer gave the last figure (null when none did).
      type: str
    load_status:
      description: The HTTP status of that answer (else of the first endpoint asked; null without an answer).
      type: int
    running_at_start:
      description: The requests running and waiting at the first read (null when not known).
      type: int
    running_at_stop:
      description: The requests running and waiting at the last read (null when not known).
      type: int
    known:
      description: Whether the last read gave a figure.
      type: bool
    listening:
      description: False when the port refused the connection.
      type: bool
    timed_out:
      description: Whether O(timeout) ran out before the server ran no request.
      type: bool
    unknown_load:
      description: O(unknown_load) as given.
      type: str
    reads:
      description: How many reads the wait made.
      type: int
    seconds:
      description: Seconds the wait took.
      type: float
    seen:
      description: Every endpoint the last read asked, in order, with its URL, status, figure and trouble.
      type: list
      elements: dict
    node_rank:
      description: O(node_rank), when 1 or more (then nothing was read).
      type: int
    msg:
      description: The drain in one line.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall import run_module  # noqa: E402
from ansible_collections.inferops.runbooks.plugins.module_utils._hostcall.server_load import CALL  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec=CALL.spec, supports_check_mode=True)
    run_module(module, CALL)


if __name__ == "__main__":
    main()
