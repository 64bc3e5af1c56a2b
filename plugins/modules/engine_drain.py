#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_drain
short_description: Wait until an engine holds no request (after it was taken out of the router)
version_added: "0.1.0"
description:
  - Reads, every O(interval) seconds, how many requests the engine holds, from its C(/metrics) - llama.cpp
    C(llamacpp:requests_processing) plus C(llamacpp:requests_deferred), vLLM C(vllm:num_requests_running) plus
    C(vllm:num_requests_waiting), SGLang C(sglang:num_running_reqs) plus C(sglang:num_queue_reqs) - and ends when
    O(settle) seconds have passed and the last O(zero_readings) readings in a row were 0, or at O(timeout).
  - What it counts, and why. The requests the engine holds, queued ones included. llama.cpp's C(/slots) shows
    only the slots (C(llm_parallel) of them); under eight streams on two slots it read 2 while six more streams
    waited for a slot, invisible there (they are C(requests_deferred)). vLLM's and SGLang's running counts
    likewise leave out the requests waiting for a batch. The host's front is not read; the router sends its
    requests to the engine's own address (llm_engine_host:llm_engine_port), past the front, and every request a
    client sends through the front reaches the engine and is counted there.
  - Why one zero does not end it. A request the router sent just before the host left is at the engine for some
    milliseconds (the HTTP layer, the chat template, tokenizing) before any count shows it, and a stream's last
    bytes are still on their way to the router when the engine's count falls to 0. So the drain ends only after
    O(settle) seconds and O(zero_readings) zero readings in a row. A client that reads a finished reply more
    slowly than the engine wrote it is not seen by any count; the settle and the zeros give it their seconds.
  - No answer is not zero. A reading that gets no answer (connection refused, no reply in 10 s), an error
    status or a text without the count is unknown; it breaks the run of zeros and never ends the drain. An engine
    that never answers until O(timeout) ends with C(drained=false) and C(reason=no_answer).
  - Changes nothing. At the timeout it returns C(drained=false) with the reason, and the play stops the engine.
    A key the engine refuses (HTTP 401, 403), or a count it does not serve (404, 501), fails at once.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the count once and does not wait.
  diff_mode:
    support: none
options:
  url:
    description: The engine's URL as the host reaches it.
    type: str
    required: true
  engine:
    description: The engine profile.
    type: str
    choices: [vllm, sglang, llamacpp]
    required: true
  api_key:
    description: The engine's API key (its /metrics needs it).
    type: str
    default: ""
  timeout:
    description: The longest wait, in seconds.
    type: int
    default: 300
  interval:
    description: Seconds between readings.
    type: float
    default: 0.5
  settle:
    description:
      - Seconds from the start before the drain may end (at most O(timeout)), so that a request the router sent
        just before the host left has reached the engine's count.
    type: float
    default: 2.0
  zero_readings:
    description: Readings of 0 in a row, the last of them after O(settle), that end the drain.
    type: int
    default: 3
"""

EXAMPLES = r"""
- name: Wait for the engine's requests to end
  gpuserve.llm.engine_drain:
    url: http://127.0.0.1:18020
    engine: llamacpp
    api_key: "{{ llm_api_key }}"
    timeout: 300
    settle: 2
    zero_readings: 3
"""

RETURN = r"""
drained:
  description: Whether the drain ended on O(zero_readings) zero readings in a row after O(settle).
  returned: always
  type: bool
reason:
  description:
    - Empty when drained; C(running) when the last reading gave a count above 0, or a 0 with fewer zeros in a row
      than O(zero_readings); C(no_answer) when no reading gave a count, or the last one did not.
  returned: always
  type: str
message:
  description: What happened, in words (the play's line).
  returned: always
  type: str
running:
  description:
    - Requests the engine held at the first reading that answered, at the last one, and at most; C(null) where no
      reading answered.
  returned: always
  type: dict
  sample: {"first": 8, "last": 0, "max": 8}
readings:
  description:
    - Every reading in order, as runs of [count, times]; C(null) for a reading without an answer. The last 40 runs.
  returned: always
  type: list
  sample: [[8, 4], [6, 3], [null, 1], [2, 5], [0, 3]]
zero_readings:
  description: Zero readings in a row at the end.
  returned: always
  type: int
unanswered:
  description: Readings that got no answer, and the last one's error.
  returned: always
  type: dict
  sample: {"count": 1, "last_error": "timed out"}
waited_s:
  description: Seconds waited.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import engines
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client

READ_TIMEOUT = 10  # seconds one reading may take: an engine busy in a long decode step answers late
KEPT_RUNS = 40
# Statuses that waiting does not mend: the key refused, the count not served.
FATAL = {401: "the engine refused the key (check llm_api_key)", 403: "the engine refused the key (check llm_api_key)",
         404: "the engine does not serve its count there", 501: "the engine does not serve its count there"}


class Drain(object):
    """The readings so far, and the rule that ends the drain."""

    def __init__(self, settle, zero_readings):
        self.settle, self.needed = settle, zero_readings
        self.runs, self.streak, self.unanswered, self.last_error = [], 0, 0, ""
        self.first = self.last = self.peak = None
        self.unknown_last = False  # the latest reading got no count

    def add(self, count, error=""):
        if count is None:
            self.unanswered += 1
            self.last_error, self.streak, self.unknown_last = error, 0, True
        else:
            self.first = count if self.first is None else self.first
            self.last, self.peak = count, max(count, self.peak or 0)
            self.streak = self.streak + 1 if count == 0 else 0
            self.unknown_last = False
        if self.runs and self.runs[-1][0] == count:
            self.runs[-1][1] += 1
        else:
            self.runs.append([count, 1])

    def done(self, waited):
        return self.streak >= self.needed and waited >= self.settle

    def reason(self):
        return "no_answer" if self.first is None or self.unknown_last else "running"

    def message(self, drained, waited, timeout):
        if drained:
            return "%s request(s) at the first reading, none after %s s (%d zero readings)" % (
                self.first, waited, self.streak)
        if self.first is None:
            return "the engine gave the drain no count in %s s (router_drain_timeout %s; last: %s): whether it " \
                   "runs requests is not known; the engine stops now" % (waited, timeout, self.last_error)
        if self.unknown_last:
            return "the engine stopped giving the drain a count (%s request(s) at its last; then %s) and gave none " \
                   "until %s s (router_drain_timeout): whether it still runs requests is not known; the engine " \
                   "stops now" % (self.last, self.last_error, waited)
        if self.last:
            return "%s request(s) still running after %s s (router_drain_timeout); the engine stops now" % (
                self.last, waited)
        return "only %d zero reading(s) in a row of %d after %s s (router_drain_timeout); the engine stops now" % (
            self.streak, self.needed, waited)


def read(client, path, engine, timeout):
    """(HTTP status or None, the count or None, why there is no count)."""
    status, text = client.call(path, timeout=timeout)
    if status is None:
        return None, None, "no answer: %s" % text
    if status != 200:
        return status, None, "HTTP %s" % status
    count = engines.running_requests(engine, text)
    return status, count, "" if count is not None else "%s does not say how many requests it holds" % path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            engine=dict(type="str", choices=sorted(engines.PROFILES), required=True),
            api_key=dict(type="str", default="", no_log=True),
            timeout=dict(type="int", default=300),
            interval=dict(type="float", default=0.5),
            settle=dict(type="float", default=2.0),
            zero_readings=dict(type="int", default=3),
        ),
        supports_check_mode=True,
    )
    params = module.params
    engine, client = params["engine"], Client(params["url"], params["api_key"])
    path = engines.PROFILES[engine]["running"]["path"]
    drain = Drain(min(max(params["settle"], 0.0), params["timeout"]), max(params["zero_readings"], 1))
    started = time.monotonic()
    deadline = started + params["timeout"]
    while True:
        status, count, why = read(client, path, engine, max(1.0, min(READ_TIMEOUT, deadline - time.monotonic())))
        if status in FATAL:
            module.fail_json(msg="E_ENDPOINT: %s%s answered HTTP %s while draining: %s" % (
                params["url"], path, status, FATAL[status]), drained=False)
        drain.add(count, why)
        # Check mode reads once: a 0 is all it can say.
        drained = drain.done(time.monotonic() - started) or (module.check_mode and drain.streak > 0)
        if drained or module.check_mode or time.monotonic() >= deadline:
            break
        time.sleep(max(0.0, min(params["interval"], deadline - time.monotonic())))
    waited = round(time.monotonic() - started, 2)
    module.exit_json(changed=False, drained=drained, reason="" if drained else drain.reason(),
                     message=drain.message(drained, waited, params["timeout"]),
                     running={"first": drain.first, "last": drain.last, "max": drain.peak},
                     readings=drain.runs[-KEPT_RUNS:], zero_readings=drain.streak,
                     unanswered={"count": drain.unanswered, "last_error": drain.last_error}, waited_s=waited)


if __name__ == "__main__":
    main()
