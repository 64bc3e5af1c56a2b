# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The recipe's performance tables, measured from the client over the streaming API.

Decode: N concurrent requests, distinct prompts, greedy, a fixed reply length (ignore_eos; the
structured rows end where their schema ends): aggregate tok/s (all reply tokens over the wall time
from the first request out to the last token in), median per-request tok/s (reply tokens after the
first over the time from the first to the last content chunk), median time to first content token.
Prefill: cold prompts, each with its own prefix: prompt tokens over the time to the first token.
Prompt reuse: a conversation growing turn by turn, each turn's time to first token, against a cold
prompt as long as the last turn.

Every row is measured warm and more than once: first a warm-up pass of the same shape, not timed (the
row's concurrency and prompt kind, its reply length; a cold prompt of the row's size; a whole
conversation), so that kernels compiled or captured on first use, grammars compiled for a schema and
the like are paid before the clock runs; then `repeats` timed passes, each with prompts of its own.
A row gives each figure's median over the passes and its spread, the lowest and highest pass
(`range`); the passes themselves and the warm-up's figures are kept beside.

Beside each row, where the engine reports them: its own figures (llama.cpp's per-request timings,
vLLM's and SGLang's Prometheus histograms over the row), and the client's CPU use (this process's
CPU seconds over the row's wall seconds), which shows that the client is not the bottleneck.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time
import uuid
import zlib

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuserve.llm.plugins.module_utils import prompts
from ansible_collections.gpuserve.llm.plugins.module_utils.engines import draft_counts, prom_total

# Special tokens are shown so that every generated token is a timed chunk: burn-in weights pick them
# under greedy decoding, and a real model's replies past an ignored end of stream can hold them too
# (engines that skip them send no chunk for them).
GREEDY = {"temperature": 0, "top_p": 1, "skip_special_tokens": False}
# (histogram base name, what it is) per engine; the mean over a row is delta(sum) / delta(count).
ENGINE_HISTOGRAMS = {
    "ttft_ms": ["vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"],
    "itl_ms": ["vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
               "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"],
}


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


def rnd(value, digits=1):
    return None if value is None else round(value, digits)


def spread(passes, keys, digits=1):
    """Each key's median over the passes and its range, [lowest, highest], leaving out passes without
    it: ({key: median}, {key: [low, high]}); a key no pass has is None in both."""
    medians, ranges = {}, {}
    for key in keys:
        values = [p[key] for p in passes if p.get(key) is not None]
        medians[key] = rnd(median(values), digits)
        ranges[key] = [min(values), max(values)] if values else None
    return medians, ranges


def engine_spread(passes):
    """The engine's own figures over the passes, as spread() gives them for the client's."""
    keys = sorted(set(k for p in passes for k in p["engine"]))
    return spread([p["engine"] for p in passes], keys, 3)


def engine_figures(before, after, streams):
    """What the engine itself says about a row: its histograms' means over the row, its draft
    acceptance, and llama.cpp's per-request timings (median)."""
    out = {}
    for key, names in ENGINE_HISTOGRAMS.items():
        for name in names:
            count = prom_total(after, name + "_count") - prom_total(before, name + "_count")
            if count > 0:
                out[key] = rnd(1000.0 * (prom_total(after, name + "_sum") - prom_total(before, name + "_sum")) / count, 2)
                break
    if "itl_ms" in out and out["itl_ms"]:
        out["decode_tok_s"] = rnd(1000.0 / out["itl_ms"])
    accepted, drafted = draft_counts(before, after)
    if drafted > 0:
        out["draft_acceptance"] = rnd(accepted / drafted, 3)
    timings = [s["timings"] for s in streams if s.get("timings")]
    if timings:
        out["decode_tok_s"] = rnd(median(t.get("predicted_per_second") for t in timings))
        out["prompt_tok_s"] = rnd(median(t.get("prompt_per_second") for t in timings))
        out["prompt_ms"] = rnd(median(t.get("prompt_ms") for t in timings))
    return out


class Bench(object):
    def __init__(self, client, opts, log=None):
        self.client = client
        self.o = opts
        self.log = log or (lambda line: None)
        self.nonce = uuid.uuid4().hex[:12]  # cold prompts of this run share no prefix with any earlier run
        self.sizer = None
        self.counter = 0
        self.repeats = max(1, int(opts.get("repeats", 3)))
        self.warmup = bool(opts.get("warmup", True))

    def _passes(self, what, measure):
        """The warm-up pass (when asked for; its figures kept, never counted), then the timed passes."""
        warm = None
        if self.warmup:
            self.log("%s: warm-up" % what)
            warm = measure("warm")
        passes = []
        for i in range(self.repeats):
            self.log("%s: pass %d of %d" % (what, i + 1, self.repeats))
            passes.append(measure(i))
        return warm, passes

    def _stream(self, messages, max_tokens, **params):
        return self.client.stream(messages, max_tokens=max_tokens, **dict(GREEDY, **params))

    def _window(self, fn, items, workers):
        """Run fn over items on `workers` threads; (results, wall seconds, client CPU cores, metrics before, after)."""
        before = self.client.metrics()
        cpu0, wall0 = time.process_time(), time.time()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            results = list(pool.map(fn, items))
        wall = time.time() - wall0
        cpu = time.process_time() - cpu0
        return results, wall, (cpu / wall if wall > 0 else None), before, self.client.metrics()

    # -- decode -------------------------------------------------------------------------------

    def decode(self, kind, n):
        """A decode row: n concurrent requests of a kind, warmed up at that shape, median and range over
        the timed passes."""
        warm, passes = self._passes("decode %s x%d" % (kind, n), lambda _i: self.decode_row(kind, n))
        medians, ranges = spread(passes, ("aggregate_tok_s", "per_request_tok_s", "ttft_ms", "mean_reply_tokens",
                                          "mean_prompt_tokens", "wall_s"))
        engine, engine_range = engine_spread(passes)
        kept = ("aggregate_tok_s", "per_request_tok_s", "ttft_ms", "wall_s", "engine")
        row = {"kind": kind, "requests": n, "repeats": len(passes), "spread": "min-max",
               "reply_tokens": int(median([p["reply_tokens"] for p in passes])),
               "client_cpu_cores": max(p["client_cpu_cores"] or 0 for p in passes),
               "range": ranges, "engine": engine, "engine_range": engine_range,
               "warmup": warm and dict((k, warm[k]) for k in kept),
               "passes": [dict((k, p[k]) for k in kept) for p in passes]}
        row.update(medians)
        return row

    def decode_row(self, kind, n):
        """One pass of a decode row: n requests at once, each a distinct prompt (no pass repeats another's)."""
        reply = self.o["reply_tokens"]
        base = self.counter
        self.counter += n

        def one(i):
            content = prompts.decode_prompt(kind, base + i)
            params = {}
            if kind == "structured":
                params["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "article", "schema": prompts.ARTICLE_SCHEMA}}
            elif self.o["ignore_eos"]:
                params["ignore_eos"] = True
            return self._stream([{"role": "user", "content": content}], reply, **params)

        streams, wall, cores, before, after = self._window(one, range(n), n)
        tokens = [self._tokens(s) for s in streams]
        prompt_tokens = [self._prompt_tokens(s) for s in streams]
        start = min(s["start"] for s in streams)
        end = max(s["end"] for s in streams)
        per_request = [(t - 1) / (s["last"] - s["first"]) for s, t in zip(streams, tokens)
                       if s["first"] is not None and s["last"] > s["first"] and t > 1]
        ttfts = [s["first"] - s["start"] for s in streams if s["first"] is not None]
        return {
            "kind": kind, "requests": n, "reply_tokens": sum(tokens), "mean_reply_tokens": rnd(sum(tokens) / float(n)),
            "mean_prompt_tokens": rnd(sum(prompt_tokens) / float(n)) if all(prompt_tokens) else None,
            "aggregate_tok_s": rnd(sum(tokens) / (end - start)) if end > start else None,
            "per_request_tok_s": rnd(median(per_request)), "ttft_ms": rnd(1000 * median(ttfts)) if ttfts else None,
            "wall_s": rnd(wall, 2), "client_cpu_cores": rnd(cores, 3), "engine": engine_figures(before, after, streams),
        }

    @staticmethod
    def _tokens(s):
        usage = s.get("usage") or {}
        return int(usage.get("completion_tokens") or s["chunks"])

    @staticmethod
    def _prompt_tokens(s):
        return int((s.get("usage") or {}).get("prompt_tokens") or 0)

    # -- prefill and reuse ----------------------------------------------------------------------

    def _count(self, text):
        data, _seconds = self.client.chat([{"role": "user", "content": text}], max_tokens=1, **GREEDY)
        return int(data["usage"]["prompt_tokens"])

    def _cold_text(self, tokens, tag):
        if self.sizer is None:
            self.sizer = prompts.Sizer(self._count)
        prefix = "[%s %s] " % (self.nonce, tag)  # a prefix no earlier request had: nothing to reuse
        return prefix + prompts.filler(zlib.crc32(tag.encode("utf-8")), self.sizer.chars(tokens, 40)) + \
            "\n\nSummarize the text above in one sentence."

    def _first_token(self, messages):
        s = self._stream(messages, self.o["prefill_reply_tokens"])
        first = s["first"] if s["first"] is not None else s["end"]
        return s, first - s["start"]

    def prefill(self, size):
        """A prefill row: a cold prompt of the size first (not timed), then one cold prompt a pass."""
        warm, passes = self._passes("prefill %d" % size, lambda i: self.prefill_row(size, i))
        medians, ranges = spread(passes, ("prompt_tokens", "ttft_s", "prefill_tok_s"), 3)
        engine, engine_range = engine_spread(passes)
        row = {"size": size, "repeats": len(passes), "spread": "min-max", "range": ranges,
               "client_cpu_cores": max(p["client_cpu_cores"] or 0 for p in passes),
               "engine": engine, "engine_range": engine_range,
               "warmup": warm and dict((k, warm[k]) for k in ("prompt_tokens", "ttft_s", "prefill_tok_s")),
               "passes": [dict((k, p[k]) for k in ("prompt_tokens", "ttft_s", "prefill_tok_s")) for p in passes]}
        row.update(medians)
        row["prompt_tokens"] = int(row["prompt_tokens"] or 0)
        row["prefill_tok_s"] = rnd(row["prefill_tok_s"])
        return row

    def prefill_row(self, size, label=0):
        """One cold prompt of `size` tokens; `label` tells the passes' prompts apart (each its own prefix)."""
        text = self._cold_text(size, "prefill-%d-%s" % (size, label))
        results, wall, cores, before, after = self._window(
            lambda _item: self._first_token([{"role": "user", "content": text}]), [0], 1)
        s, ttft = results[0]
        prompt_tokens = self._prompt_tokens(s)
        return {"size": size, "prompt_tokens": prompt_tokens, "ttft_s": rnd(ttft, 3),
                "prefill_tok_s": rnd(prompt_tokens / ttft) if ttft > 0 and prompt_tokens else None,
                "client_cpu_cores": rnd(cores, 3), "engine": engine_figures(before, after, [s])}

    def reuse(self):
        """Prompt reuse: a whole conversation first (not timed), then one conversation a pass."""
        warm, passes = self._passes("prompt reuse", self.reuse_rows)
        medians, ranges = spread(passes, ("first_time_s", "next_time_s", "matched_cold_s", "speedup"), 3)
        out = dict((k, passes[0][k]) for k in ("first_turn_tokens", "next_turn_tokens", "matched_cold_tokens"))
        out.update(medians, repeats=len(passes), spread="min-max", range=ranges, passes=passes,
                   warmup=warm and dict((k, warm[k]) for k in ("first_time_s", "next_time_s", "matched_cold_s")))
        out["speedup"] = rnd(out["speedup"])
        return out

    def reuse_rows(self, label=0):
        """One conversation growing turn by turn; `label` gives each pass's conversation its own prefix."""
        size, turns = self.o["reuse_tokens"], self.o["reuse_turns"]
        messages = [{"role": "user", "content": self._cold_text(size, "reuse-%s" % label)}]
        times, sizes = [], []
        for turn in range(turns):
            s, ttft = self._first_token(messages)
            times.append(ttft)
            sizes.append(self._prompt_tokens(s))
            follow_up = "Now name one more detail of the text, turn %d." % (turn + 2)
            messages = messages + [{"role": "assistant", "content": s["text"] or "(no reply)"},
                                   {"role": "user", "content": follow_up}]
        # A cold prompt as long as the last turn: the matched first-time figure.
        cold = self._cold_text(sizes[-1], "reuse-matched-%s" % label)
        matched, matched_ttft = self._first_token([{"role": "user", "content": cold}])
        return {"first_turn_tokens": sizes[0], "first_time_s": rnd(times[0], 3),
                "next_turn_tokens": sizes[1:], "next_times_s": [rnd(t, 3) for t in times[1:]],
                "next_time_s": rnd(median(times[1:]), 3),
                "matched_cold_tokens": self._prompt_tokens(matched),
                "matched_cold_s": rnd(matched_ttft, 3),
                "speedup": rnd(matched_ttft / median(times[1:]), 1) if median(times[1:]) else None}

    # -- all ----------------------------------------------------------------------------------

    def run(self):
        out = {"decode": [], "prefill": [], "reuse": None}
        # One short request first: the engine's first request may compile or warm caches.
        self._stream([{"role": "user", "content": "Warm up."}], 8)
        for kind in self.o["kinds"]:
            for n in self.o["concurrency"]:
                out["decode"].append(self.decode(kind, n))
        for size in self.o["prefill_sizes"]:
            out["prefill"].append(self.prefill(size))
        if self.o["reuse_turns"] > 1 and self.o["reuse_tokens"] > 0:
            out["reuse"] = self.reuse()
        return out


# Before and after: the figures of the host's last report (reports/<host>/bench.json) against this run's, row by row.
# (section, the figure, its unit, True where higher is better)
COMPARED = (("decode", "aggregate_tok_s", "tok/s", True), ("decode", "per_request_tok_s", "tok/s per request", True),
            ("decode", "ttft_ms", "ms to first token", False), ("prefill", "prefill_tok_s", "tok/s", True),
            ("prefill", "ttft_s", "s to first token", False), ("reuse", "next_time_s", "s to a next turn", False))
# What a reader needs to know changed between the two runs, beside the figures.
CONTEXT = ("engine", "image", "config", "model", "dummy", "settings", "options")


def _rows(result):
    """{(endpoint, section, row label): row} of a report."""
    rows = {}
    for ep in result.get("endpoints") or []:
        name = ep.get("name")
        for row in ep.get("decode") or []:
            rows[(name, "decode", "%s x%s" % (row.get("kind"), row.get("requests")))] = row
        for row in ep.get("prefill") or []:
            rows[(name, "prefill", "prefill %s tokens" % row.get("prompt_tokens"))] = row
        if ep.get("reuse"):
            rows[(name, "reuse", "prompt reuse")] = ep["reuse"]
    return rows


def _beyond_spread(old_range, new_range, higher):
    """("beyond", True/False) where the passes' ranges do not overlap (every pass of one run better than every
    pass of the other), ("within", None) where they do, ("not known", None) where a run has no range."""
    if not all(isinstance(r, (list, tuple)) and len(r) == 2 and all(isinstance(v, (int, float)) for v in r)
               for r in (old_range, new_range)):
        return "not known", None
    if new_range[0] > old_range[1]:
        return "beyond", higher
    if new_range[1] < old_range[0]:
        return "beyond", not higher
    return "within", None


def _verdict(spread, better):
    """What the report says beside a change: None where it says nothing (no change, no spread known)."""
    if spread == "within":
        return "within the spread"
    if better is None:
        return None
    return ("better" if better else "worse") + ("" if spread == "beyond" else "; no spread to judge by")


def changes(previous_text, current):
    """The last report (its JSON text, "" when there is none) against this run's result:
    {"since": its time, "differs": [what else changed], "rows": [{endpoint, row, figure, unit, before, now,
    change_pct, spread, better, verdict}]} for every figure both runs have, in this run's order; {"since": None, "note": why}
    when there is nothing to compare. A change is better or worse only beyond the spread (the two runs' ranges of
    passes apart); within it, better is None; where a run timed one pass or kept no range, spread is "not known"
    and better follows the figure alone."""
    if not previous_text or not previous_text.strip():
        return {"since": None, "note": "no earlier report", "differs": [], "rows": []}
    try:
        previous = json.loads(previous_text)
        before = _rows(previous)
    except (ValueError, AttributeError, TypeError) as e:
        return {"since": None, "note": "the earlier report could not be read (%s)" % e, "differs": [], "rows": []}
    differs = []
    for key in CONTEXT:
        old, new = previous.get(key), current.get(key)
        if key in ("settings", "options") and isinstance(old, dict) and isinstance(new, dict):
            differs += ["%s %s -> %s" % (k, json.dumps(old.get(k)), json.dumps(new.get(k)))
                        for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        elif old != new:
            differs.append("%s %s -> %s" % (key, str(old)[:19], str(new)[:19]))
    rows = []
    for key, row in _rows(current).items():
        old_row = before.get(key)
        if old_row is None:
            continue
        for section, figure, unit, higher in COMPARED:
            if section != key[1]:
                continue
            old, new = old_row.get(figure), row.get(figure)
            if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
                continue
            pct = round((new - old) * 100.0 / old, 1) if old else None
            one_pass = min(int(old_row.get("repeats") or 2), int(row.get("repeats") or 2)) < 2  # a range of one
            judged = ("not known", None) if one_pass else _beyond_spread(
                (old_row.get("range") or {}).get(figure), (row.get("range") or {}).get(figure), higher)
            better = judged[1] if judged[0] != "not known" else (None if not pct else (pct > 0) == higher)
            rows.append({"endpoint": key[0], "row": key[2], "figure": figure, "unit": unit, "before": old, "now": new,
                         "change_pct": pct, "spread": judged[0], "better": better,
                         "verdict": _verdict(judged[0], better)})
    return {"since": previous.get("time") or "time not recorded", "differs": differs, "rows": rows}
