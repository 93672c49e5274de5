#!/usr/bin/python
# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: wait_ready
short_description: Wait until an inference server's systemd unit is really ready, or fail fast with the evidence
version_added: 0.1.0
description:
  - Waits through the cold start of an LLM inference server (SGLang, vLLM) run as a systemd unit, which can take
    from minutes to an hour, showing its progress, and passes only when the server is really ready.
  - B(Passes) when the unit is active, the health endpoint answered HTTP 200 to O(health_successes) probes in a row,
    the ready marker is in this invocation's journal, nothing fatal was logged, and the unit stays healthy (active,
    same C(MainPID), C(InvocationID) and C(NRestarts), health still 200, no fatal line) through a post-ready O(soak).
  - B(Fails fast) with a reason, a message and the evidence when a fatal line appears in the journal (a traceback is
    given a moment on the managed host to be written whole, and the other ranks' copies of a fatal line a moment to
    follow, so events are complete and deduplicated across ranks), when the unit fails, stops or is restarted by
    systemd, when no progress is seen within the stall limit of the current phase, or when the O(budget) is spent.
  - The decisions are made by a state machine on the controller from each probe's observations (unit state,
    the journal read since the last probe, health); the health endpoint is probed without credentials.
  - Runs on the controller and calls M(inferops.runbooks.service_probe) on the managed host in a loop; each call
    long-polls the journal, the unit's state and (once the port is open) health until something that matters
    changes or the next heartbeat is due, so a fatal line is seen within about a second while the wait costs one
    connection round trip about every O(heartbeat) seconds when nothing happens.
  - Prints one line per host whenever the state changes and at least every O(heartbeat) seconds, so that long waits
    are never silent (AWX and other job runners do not take them for hung jobs).
  - Survives a dropped SSH connection; the connection is reset and the probe retried after an exponential backoff with
    jitter (bounded by the remaining budget), up to O(connection_retries) times in a row.
  - Never restarts or changes anything itself; restart the unit first (for example with M(ansible.builtin.systemd_service)).
  - B(Multi-node deployments.) One SGLang server spread over several hosts (C(--nnodes), C(--node-rank)) is waited on
    as one. Run this task on every node at once (normal Ansible forks) with O(deployment), O(node_rank), O(peers) and
    O(channel). Node 0 has the full gates; a node of rank 1 or more passes when its unit is active, its own journal
    shows its schedulers ready (SGLang then starts a placeholder health server there), nothing fatal was logged, it
    stays up through the soak, and node 0 passed. The placeholder answers 200 unconditionally, so its answers are recorded
    (C(placeholder) in RV(health)) and never counted. A headless node of a vLLM data parallel deployment (C(--headless), O(engine=vllm))
    serves no HTTP at all; it is never probed (C(headless) in RV(health)), and its readiness is its engines' C(init engine ... took)
    line; a Ray worker of a vLLM deployment over Ray (C(ray start --address=... --block)) likewise, its readiness Ray's
    C(This command will now block forever ...) line. Node 0 passes only when every other node is ready.
  - The nodes' waits see each other through files on the controller (O(channel)). When one node's wait fails, the
    others take one last look (up to 3 s) at their own journal, for the consequences the failure caused there, and
    fail with reason V(peer_failed) naming the node, within seconds.
author:
  - inferops.runbooks contributors (@inferops)
extends_documentation_fragment:
  - inferops.runbooks.classifier
  - inferops.runbooks.health
attributes:
  action:
    support: full
    description: The wait runs in an action plugin on the controller.
  async:
    support: none
    description: The wait shows its progress as it goes and cannot run in the background.
  check_mode:
    support: none
    description: In check mode nothing is waited for (there is no start to wait for); the result says C(waited=false).
  diff_mode:
    support: none
    description: Nothing to compare.
  platform:
    support: full
    platforms: posix
    description: Managed hosts with systemd and journald.
options:
  unit:
    description:
      - The systemd unit of the server; C(.service) is added to a name without a unit suffix.
    type: str
    default: sglang.service
  health_url:
    description:
      - The health endpoint, probed from the managed host (so a server bound to 127.0.0.1 works), without credentials.
      - A refused connection during the cold start is normal, not a failure.
      - Use an endpoint that proves the server generates (SGLang's C(/health_generate) or C(/health); vLLM's C(/health));
        C(/v1/models) and C(/model_info) answer 200 before the server can generate.
    type: str
    default: http://127.0.0.1:30000/health_generate
  budget:
    description:
      - Seconds the whole wait may take, soak included. When it is spent the task fails with reason
        V(health_never_passed) if the server answered HTTP but health never passed, else V(budget_exhausted).
    type: float
    default: 3600
  stall_limit:
    description:
      - Seconds without new progress (a new milestone line, a progress bar that moved, a new phase) after which
        the start is declared stalled, for every phase without an entry in O(stall_limits).
      - The journal receives a progress bar that updates without newlines only in bursts, so allow for that.
      - Once the ready marker is seen, only O(budget) limits the wait for health, unless O(stall_limits) has a C(ready) entry.
    type: float
    default: 900
  stall_limits:
    description:
      - Stall limits per phase, overriding O(stall_limit); keys are phases (C(starting), C(loading_weights),
        C(allocating_kv_cache), C(capturing_cuda_graphs), C(warming_up), C(ready)), values seconds.
    type: dict
    default: {}
  history_starts:
    description:
      - The host's recent good starts of this unit on its current configuration, each with C(phases) (phase to
        seconds) and C(total) - RV(inferops.runbooks.start_history#module:good_starts).
      - "With them every progress line carries the expected time left, recalibrated at each phase - the medians of
        the phases still to come plus what the current phase usually has left (C(about 6m left) and the range of
        the last good starts, as C(last 5 good starts: 8m02s-9m40s))."
    type: list
    elements: dict
    default: []
  lease_run_id:
    description:
      - The rollout that holds the host's lease (P(inferops.runbooks.sglang_restart#role) takes it; see
        M(inferops.runbooks.run_lease)). Every look renews the lease's heartbeat, and the wait fails with reason
        C(lease_lost) once another run holds the host (it took the lease over as a dead run's).
    type: str
  health_successes:
    description:
      - Consecutive HTTP 200 answers of the health endpoint needed before the soak starts.
    type: int
    default: 2
  soak:
    description:
      - Seconds the server must stay healthy after it was found ready (same main process and invocation,
        no restart, health still 200, no fatal line) before the task passes.
    type: float
    default: 10
  poll_interval:
    description:
      - Seconds each probe may watch the managed host for a change (the long-poll window). A change that matters
        (a later phase, a fatal line, the unit's state, a different health answer) ends the window early, and
        a window also ends in time for the next O(heartbeat) line, so this only sets how often the connection is
        used when nothing happens. Progress within a phase (the percent of a bar) is shown with the heartbeat.
      - Health is probed within the window at its own pace once the server's port is open (every second until
        the health gate passed, every 5 s or O(poll_interval) during the soak).
    type: float
    default: 30
  heartbeat:
    description:
      - Print a progress line at least this often, in seconds, even when nothing changes.
    type: float
    default: 30
  invocation_id:
    description:
      - The invocation (C(InvocationID)) to watch. Default is the unit's current invocation when the wait starts.
    type: str
  previous_invocation_id:
    description:
      - The invocation before a restart. The wait first waits (up to 30 s) for the unit's C(InvocationID) to differ
        from it, then watches the new invocation. Use it when the restart may not have registered yet.
    type: str
  connection_retries:
    description:
      - How many times in a row a probe may fail on a lost connection (the connection is reset and the probe
        retried after 1, 2, 4, ... up to 10 seconds, with jitter) before the wait fails with reason V(unreachable).
    type: int
    default: 5
  deployment:
    description:
      - The name of the multi-node deployment this host is a node of. Required with O(peers).
    type: str
  node_rank:
    description:
      - This host's node rank in its deployment (SGLang's C(--node-rank)). V(0) runs the HTTP API and has the full gates;
        a rank of 1 or more is waited on with the gates of a node that serves only a placeholder health endpoint.
    type: int
    default: 0
  peers:
    description:
      - The other nodes of the deployment, as a mapping of inventory host name to node rank. Empty for a server on
        one host.
    type: dict
    default: {}
  channel:
    description:
      - A name the nodes' waits of one restart of a deployment share, new for each restart (for example the deployment's
        name and the time of the restart). The waits see each other through files (C(<inventory_hostname>.json)) in a
        directory of that name in Ansible's temporary directory of the run on the controller, removed when the run ends.
      - Required with O(peers).
    type: str
notes:
  - Reasons (RV(reason)) are V(ready) on success, and on failure V(fatal_log) (a fatal line, or with O(strict) an
    unrecognised one), V(unit_failed), V(unit_inactive), V(restarted), V(stalled), V(budget_exhausted),
    V(health_never_passed), V(soak_failed) (including a fatal line during the soak), V(journal_gap) (with O(strict),
    journal entries were rotated or vacuumed away before they were read), V(unreachable), V(probe_failed),
    V(peer_failed) (another node of the deployment failed, or did not start waiting within 60 s),
    and before anything is probed V(invalid_options) or V(invalid_rules).
seealso:
  - module: inferops.runbooks.service_probe
  - module: inferops.runbooks.journal_scan
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Restart the SGLang server
  ansible.builtin.systemd_service:
    name: sglang.service
    state: restarted

- name: Wait until it is ready (up to an hour; 20 minutes for CUDA graph capture)
  inferops.runbooks.wait_ready:
    unit: sglang.service
    health_url: http://127.0.0.1:30000/health_generate
    budget: 3600
    stall_limits:
      capturing_cuda_graphs: 1200
    extra_rules:
      - id: local-frobnicator-state
        pattern: Frobnicator returned error state \d+, continuing
        reason: Our frobnicator reports a recoverable state at start; vendor ticket 1234.
  register: ready

- name: Show what was allowlisted on the way
  ansible.builtin.debug:
    msg: "{{ ready.allowlisted | map(attribute='message') | list }}"
"""

RETURN = r"""
verdict:
  description: V(pass) or V(fail).
  returned: always
  type: str
  sample: pass
reason:
  description: V(ready), or why the wait failed (see the notes).
  returned: always
  type: str
  sample: fatal_log
msg:
  description: What happened, in one line.
  returned: always
  type: str
  sample: "fatal line in sglang.service's journal: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.99 GiB..."
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
timeline:
  description: Each start phase as the wait saw it, with C(started) (seconds since the wait began) and C(duration).
  returned: always
  type: list
  elements: dict
  sample: [{"phase": "loading_weights", "started": 0.8, "duration": 1.3}]
phase:
  description: The last phase reached.
  returned: always
  type: str
progress:
  description: The latest progress bar state (phase, description, percent, done, total, text, line), or null.
  returned: always
  type: dict
fatal:
  description:
    - Fatal events of this invocation, deduplicated across ranks and repeats, with C(message), C(count), C(ranks),
      C(rule), C(reason), C(first_line), C(last_line), timestamps, and for a traceback C(context) and C(traceback).
  returned: always
  type: list
  elements: dict
allowlisted:
  description: Alarming-looking lines a rule says are harmless, with counts and ranks, added up across probes.
  returned: always
  type: list
  elements: dict
request_error:
  description:
    - Lines about one request each (a model name that does not exist, a bad parameter, a tool-call parser failing
      on one output), with the traceback logged right after such a line, as events like RV(fatal); never a failure alone.
  returned: always
  type: list
  elements: dict
survived:
  description:
    - ERROR lines after which the engine's own code carries on (it falls back, retries, skips one item or answers
      one request with an error; read from the engine's source), as events like RV(fatal) with C(file), the engine's
      source file that logs the line - warnings, never a failure alone.
  returned: always
  type: list
  elements: dict
unrecognized:
  description: Warnings no rule knows, each with a C(suggested_rule) to paste into O(extra_rules).
  returned: always
  type: list
  elements: dict
counts:
  description: Lines per class (fatal, allowlisted, request_error, survived, unrecognized, ready, progress, info).
  returned: always
  type: dict
stale_rules:
  description: Rules past their C(expires) date.
  returned: always
  type: list
  elements: dict
lines:
  description: Journal lines of this invocation read.
  returned: always
  type: int
health:
  description: The last health probe (C(status), C(up), C(error)), the current run of C(successes), and C(history),
    the changes of the answer with C(at) (seconds since the wait began); C(placeholder=true) on a node of rank 1 or more,
    whose answers were not counted, with C(headless=true) on a vLLM headless node, never probed (no HTTP).
  returned: always
  type: dict
  sample:
    status: 200
    up: true
    error: null
    successes: 3
    history: [{"status": "connection refused", "at": 0.9}, {"status": 503, "at": 3.1}, {"status": 200, "at": 4.2}]
invocation_id:
  description: The invocation watched.
  returned: always
  type: str
restarts:
  description: How many times systemd restarted the unit during the wait (growth of C(NRestarts)).
  returned: always
  type: int
unit:
  description: The unit's last state from C(systemctl show).
  returned: always
  type: dict
probes:
  description: The number of probes made.
  returned: always
  type: int
journal_gaps:
  description:
    - One entry per gap found in the invocation's journal (entries rotated or vacuumed away before they were read).
    - The lines in between are missing from the evidence. With O(strict) a gap fails the wait.
  returned: always
  type: list
  elements: str
first_fatal:
  description:
    - The first fatal line of this invocation (C(message), C(rule), C(ranks), C(line), C(timestamp)), with C(realtime),
      the journal's C(__REALTIME_TIMESTAMP) of it in microseconds since the epoch (to find, across the nodes of a
      deployment, the line that came first). Null when nothing fatal was logged.
  returned: always
  type: dict
eta:
  description:
    - The expected time left that the progress lines gave from O(history_starts) - C(starts) (how many good starts it
      came from), C(low) and C(high) (their range of total times, in seconds), and C(given), the ETA at each phase as
      the first progress line of the phase gave it (C(phase), C(at) and C(ends_at) in seconds since the wait began,
      C(remaining) in seconds). Null without O(history_starts).
  returned: always
  type: dict
  sample: {"starts": 3, "low": 11.8, "high": 12.6, "given": [{"phase": "loading_weights", "at": 1.2, "remaining": 10.4, "ends_at": 11.6}]}
deployment:
  description: The deployment of this node.
  returned: when O(peers) was given
  type: str
node_rank:
  description: This node's rank.
  returned: when O(peers) was given
  type: int
peers:
  description: The other nodes' states as last seen through O(channel) (C(state), C(reason), C(msg), C(phase), C(first_fatal)).
  returned: when O(peers) was given
  type: dict
ended_at:
  description: When the wait ended, in seconds since the epoch (to compare with journal timestamps).
  returned: always
  type: float
lease_renewed_at:
  description: When a look last renewed the heartbeat of the lease of O(lease_run_id), in seconds since the epoch.
  returned: when O(lease_run_id) was given and a look renewed it
  type: float
detected:
  description: Seconds after the wait began when the failure was decided.
  returned: when the wait failed
  type: float
last_lines:
  description: The last lines of the invocation's journal, on failure.
  returned: when the wait failed
  type: list
  elements: str
"""
