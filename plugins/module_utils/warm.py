# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The warm-up a new engine gets before it is said LIVE.

A GPU engine compiles some kernels on first use, per shape: vLLM's fused-MoE Triton kernels per
batch-size bucket, torch.compile's and the sampler's shapes, SGLang's alike. Whoever sends the first
request at a new concurrency pays for it (seen on an H200: a first token at 16 streams 1.7 s cold,
40 ms warm). So each concurrency the engine will serve gets two rounds of that many concurrent
requests, distinct prompts, a short reply: the first pays the compilation, the second shows what a
user then sees; and one long prompt takes the chunked-prefill path. The whole is bounded in time:
what the budget leaves out is named, never a failure of the engine (it serves, only colder).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import time

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuserve.llm.plugins.module_utils import prompts
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import EndpointError

# Special tokens shown, so that burn-in weights (which pick them) stream a chunk per token, as in bench.
GREEDY = {"temperature": 0, "ignore_eos": True, "skip_special_tokens": False}


class WarmError(Exception):
    """A warm-up request that the engine refused or did not answer."""


def levels(parallel, start=1):
    """1, 2, 4, ... below `parallel`, and `parallel` itself: the concurrencies a recipe serves."""
    out, n = [], max(1, start)
    while n < parallel:
        out.append(n)
        n *= 2
    return out + [max(1, parallel)]


def _ms(seconds):
    return None if seconds is None else round(1000.0 * seconds, 1)


def _median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


class Warmer(object):
    def __init__(self, client, reply_tokens=16, budget_s=600, log=None, clock=time.time):
        self.client = client
        self.reply_tokens = reply_tokens
        self.budget_s = budget_s
        self.log = log or (lambda line: None)
        self.clock = clock
        self.counter = 0

    def _one(self, content, max_tokens):
        try:
            s = self.client.stream([{"role": "user", "content": content}], max_tokens=max_tokens, **GREEDY)
        except EndpointError as e:
            raise WarmError(str(e))
        except (socket.error, OSError) as e:  # a timeout while the reply streams
            raise WarmError("%s/v1/chat/completions stopped answering: %s" % (self.client.url, e))
        if s["first"] is None:  # nothing shown (special tokens only): the user waited for the whole reply
            s["first"] = s["end"]
        return s

    def round(self, n):
        """n requests at once, each its own prompt: (median, highest) time to first token in seconds."""
        base = self.counter
        self.counter += n
        with ThreadPoolExecutor(max_workers=n) as pool:
            streams = list(pool.map(lambda i: self._one(prompts.decode_prompt("prose", base + i),
                                                        self.reply_tokens), range(n)))
        ttfts = [s["first"] - s["start"] for s in streams]
        return _median(ttfts), max(ttfts)

    def long_prompt(self, tokens):
        """One prompt of about `tokens` tokens, twice with different text: (first, second) time to first
        token and the prompt tokens the engine counted."""
        try:  # the engine's own count of a sample sizes the filler for its tokenizer
            sizer = prompts.Sizer(lambda text: int(self.client.chat(
                [{"role": "user", "content": text}], max_tokens=1, **GREEDY)[0]["usage"]["prompt_tokens"]))
        except EndpointError as e:
            raise WarmError(str(e))
        except (KeyError, TypeError, ValueError):
            raise WarmError("%s/v1/chat/completions did not count the prompt's tokens (usage)" % self.client.url)
        out = []
        for _i in range(2):
            self.counter += 1
            text = prompts.filler(7919 * self.counter, sizer.chars(tokens, 16)) + "\nSum the text up."
            s = self._one(text, 4)
            out.append((s["first"] - s["start"], int((s.get("usage") or {}).get("prompt_tokens") or 0)))
        return out

    def run(self, concurrency, long_prompt_tokens=0):
        start = self.clock()
        result = {"levels": [], "long_prompt": None, "left_out": []}
        shapes = [("streams", n) for n in concurrency] + ([("prompt", long_prompt_tokens)] if long_prompt_tokens else [])
        for kind, n in shapes:
            if self.clock() - start > self.budget_s:
                result["left_out"].append("%d %s" % (n, "streams" if kind == "streams" else "prompt tokens"))
                continue
            t = self.clock()
            if kind == "streams":
                first, first_max = self.round(n)
                then, then_max = self.round(n)
                row = {"requests": n, "ttft_ms_first": _ms(first), "ttft_ms_first_max": _ms(first_max),
                       "ttft_ms_then": _ms(then), "ttft_ms_then_max": _ms(then_max),
                       "seconds": round(self.clock() - t, 2)}
                result["levels"].append(row)
                self.log("warm %d streams: first token %s ms, then %s ms" % (n, row["ttft_ms_first"], row["ttft_ms_then"]))
            else:
                (first, tokens), (then, _tokens) = self.long_prompt(n)
                result["long_prompt"] = {"prompt_tokens": tokens, "ttft_ms_first": _ms(first),
                                         "ttft_ms_then": _ms(then), "seconds": round(self.clock() - t, 2)}
        result["seconds"] = round(self.clock() - start, 2)
        result["complete"] = not result["left_out"]
        return result


def summary(result):
    """One line for the play's summary: what was warmed, in how long, and the first token's change."""
    if not result:
        return "warm-up: off"
    parts = ["%d stream%s %s -> %s ms" % (r["requests"], "" if r["requests"] == 1 else "s", r["ttft_ms_first_max"],
                                          r["ttft_ms_then_max"])
             for r in result["levels"]]
    if result.get("long_prompt"):
        lp = result["long_prompt"]
        parts.append("a %d-token prompt %s -> %s ms" % (lp["prompt_tokens"], lp["ttft_ms_first"], lp["ttft_ms_then"]))
    line = "warm-up in %s s, slowest first token cold -> warm: %s" % (result["seconds"], "; ".join(parts) or "nothing")
    if result["left_out"]:
        line += " (left out, over the time budget: %s)" % ", ".join(result["left_out"])
    return line
