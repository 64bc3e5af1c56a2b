# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The recipe's "Exact replies" and "Quality checks", run against one served engine.

Exactness (within one configuration, greedy decoding): replies served together equal the same
requests served alone; drafted replies equal undrafted ones (no engine here can switch drafting off
per request, so against a second, undrafted server of the same configuration); long prompts give
the token hashes saved by the first run of this configuration.

Media (when vision is on): images and video as data URLs are accepted and counted in the prompt's
tokens (more pixels, more tokens; two images, twice one), and what must be refused is refused with a
client error while the engine goes on serving: a corrupt image or video, and an http(s) URL that
llm_media_urls does not allow.

Quality, with counts: tool calls (a call counts when it names the tool and its arguments validate
against the tool's schema), JSON by instruction only, JSON with response_format, needles in long
prompts, images' colours (real weights only), and tool bursts with the default and the required tool
choice.

Each check gives passed/total and pass, fail or not_run (with why). Exactness and media checks always
count; quality checks count only with real weights (burn-in weights have no knowledge to measure).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re
import time

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuserve.llm.plugins.module_utils import prompts
from ansible_collections.gpuserve.llm.plugins.module_utils.engines import draft_counts
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import EndpointError

EXACTNESS = ["concurrent_solo", "drafted_undrafted", "long_prompt_hashes"]
MEDIA = ["image_input", "video_input"]
QUALITY = ["tool_calls", "json_instruction", "json_response_format", "needles", "images", "tool_bursts"]
CHECKS = EXACTNESS + MEDIA + QUALITY
TITLES = {
    "concurrent_solo": "Concurrent replies equal solo replies",
    "drafted_undrafted": "Drafted replies equal undrafted replies",
    "long_prompt_hashes": "Long prompts give the saved token hashes",
    "image_input": "Images by data URL: accepted, counted, refused",
    "video_input": "Video by data URL: accepted, counted, refused",
    "tool_calls": "Tool calls",
    "json_instruction": "JSON, instruction only",
    "json_response_format": "JSON with response_format",
    "needles": "Needles in long prompts",
    "images": "Images",
    "tool_bursts": "Tool bursts, default choice / required",
}
GREEDY = {"temperature": 0, "top_p": 1}


def validator(schema):
    """A function telling whether a value validates against a JSON schema (None) or why not."""
    import jsonschema  # the host virtualenv's requirement; imported here so the module loads without it
    v = jsonschema.Draft202012Validator(schema)

    def check(value):
        errors = sorted(v.iter_errors(value), key=lambda e: list(e.path))
        return None if not errors else "%s at %s" % (errors[0].message, "/".join(str(p) for p in errors[0].path) or "top")
    return check


def parse_json_reply(text):
    """The JSON value of a reply, allowing a code fence around it (JSON by instruction)."""
    text = (text or "").strip()
    m = re.match(r"^```(?:json)?\s*(.*?)\s*```$", text, re.S)
    return json.loads(m.group(1) if m else text)


def result(name, passed, total, counted=True, why="", examples=None, **extra):
    status = "not_run" if total == 0 else ("pass" if passed == total else "fail")
    group = "exactness" if name in EXACTNESS else "media" if name in MEDIA else "quality"
    out = {"name": name, "title": TITLES[name], "group": group,
           "passed": passed, "total": total, "status": status, "counted": counted and status != "not_run",
           "why": why, "examples": (examples or [])[:3]}
    out.update(extra)
    return out


def not_run(name, why):
    return result(name, 0, 0, counted=False, why=why)


def in_parallel(fn, items, workers):
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(fn, items))


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def short(text, at=0, width=60):
    start = max(0, at - 10)
    return json.dumps(text[start:start + width])


class Verifier(object):
    def __init__(self, client, opts, undrafted=None, log=None):
        self.client = client
        self.o = opts
        self.undrafted = undrafted
        self.log = log or (lambda line: None)

    # -- helpers ------------------------------------------------------------------------------

    def reply(self, client, content, max_tokens, **params):
        data, _seconds = client.chat([{"role": "user", "content": content}], max_tokens=max_tokens, **dict(GREEDY, **params))
        message = data["choices"][0].get("message") or {}
        return message, data

    def texts(self, client, prompt_list, max_tokens, workers):
        return in_parallel(lambda p: self.reply(client, p, max_tokens)[0].get("content") or "", prompt_list, workers)

    def exact_prompts(self):
        return ["Write two sentences about %s." % prompts.subject(i) for i in range(self.o["exact_prompts"])]

    def prompt_tokens(self, text):
        _message, data = self.reply(self.client, text, 1)
        return int(data["usage"]["prompt_tokens"])

    # -- exactness ----------------------------------------------------------------------------

    def concurrent_solo(self):
        ps = self.exact_prompts()
        solo = self.texts(self.client, ps, self.o["exact_max_tokens"], 1)
        together = self.texts(self.client, ps, self.o["exact_max_tokens"], len(ps))
        bad = [i for i in range(len(ps)) if solo[i] != together[i]]
        return result("concurrent_solo", len(ps) - len(bad), len(ps), examples=[
            "prompt %d: differs at character %d: solo %s, concurrent %s" % (
                i, first_difference(solo[i], together[i]), short(solo[i], first_difference(solo[i], together[i])),
                short(together[i], first_difference(solo[i], together[i]))) for i in bad],
            why="%d distinct prompts, greedy, %d tokens at most: one at a time, then all at once" % (
                len(ps), self.o["exact_max_tokens"]))

    def drafted_undrafted(self):
        if self.o["drafter"] in ("off", ""):
            return not_run("drafted_undrafted", "no drafter in this configuration (llm_drafter: off)")
        if self.undrafted is None:
            return not_run("drafted_undrafted", self.o["undrafted_missing"])
        ps = self.exact_prompts()
        before = self.client.metrics()
        drafted = self.texts(self.client, ps, self.o["exact_max_tokens"], 1)
        after = self.client.metrics()
        plain = self.texts(self.undrafted, ps, self.o["exact_max_tokens"], 1)
        bad = [i for i in range(len(ps)) if drafted[i] != plain[i]]
        accepted, drafted_tokens = draft_counts(before, after)
        return result("drafted_undrafted", len(ps) - len(bad), len(ps), examples=[
            "prompt %d: differs at character %d: drafted %s, undrafted %s" % (
                i, first_difference(drafted[i], plain[i]), short(drafted[i], first_difference(drafted[i], plain[i])),
                short(plain[i], first_difference(drafted[i], plain[i]))) for i in bad],
            why="%d prompts against %s; the engine accepted %d of %d drafted tokens meanwhile" % (
                len(ps), self.o["undrafted_how"], accepted, drafted_tokens),
            draft_tokens=int(drafted_tokens), draft_accepted=int(accepted))

    def long_prompt_hashes(self, saved):
        n, size = self.o["long_prompts"], self.o["long_prompt_tokens"]
        if n <= 0 or size <= 0:
            return not_run("long_prompt_hashes", "verify_long_prompts is 0"), {}
        sizer = self.sizer()
        hashes = {}
        for i in range(n):
            text = prompts.filler(7000 + i, sizer.chars(size, 40)) + "\n\nWhat is the most common word above?"
            message, data = self.reply(self.client, text, self.o["long_max_tokens"], logprobs=True)
            tokens = [t.get("token") for t in ((data["choices"][0].get("logprobs") or {}).get("content") or [])]
            basis = tokens if tokens else [message.get("content") or ""]
            key = "%d-%d" % (i, size)
            hashes[key] = {"sha256": hashlib.sha256(json.dumps(basis).encode("utf-8")).hexdigest(),
                           "prompt_tokens": data["usage"]["prompt_tokens"], "tokens": len(tokens) if tokens else None}
        if not saved:
            return result("long_prompt_hashes", n, n, why="first run of this configuration: %d hashes saved "
                          "(prompts of %d tokens); later runs compare" % (n, hashes[key]["prompt_tokens"]),
                          saved=True), hashes
        bad = [k for k in hashes if k in saved and saved[k]["sha256"] != hashes[k]["sha256"]]
        compared = [k for k in hashes if k in saved]
        return result("long_prompt_hashes", len(compared) - len(bad), len(compared), examples=[
            "prompt %s: hash %s, saved %s" % (k, hashes[k]["sha256"][:12], saved[k]["sha256"][:12]) for k in bad],
            why="%d prompts of %d tokens against the hashes saved for this configuration" % (
                len(compared), hashes[key]["prompt_tokens"]), saved=False), dict(saved, **hashes)

    # -- quality ------------------------------------------------------------------------------

    def _tool_ok(self, message, tool):
        calls = message.get("tool_calls") or []
        if not calls:
            return "no tool call (reply %s)" % short(message.get("content") or "")
        fn = calls[0].get("function") or {}
        if fn.get("name") != tool["function"]["name"]:
            return "called %s, not %s" % (fn.get("name"), tool["function"]["name"])
        try:
            args = json.loads(fn.get("arguments") or "")
        except ValueError:
            return "%s: arguments are not JSON: %s" % (fn.get("name"), short(fn.get("arguments") or ""))
        why = validator(tool["function"]["parameters"])(args)
        return None if why is None else "%s: arguments do not validate: %s" % (fn.get("name"), why)

    def _tool_call(self, i, choice):
        tool, text = prompts.tool_request(i)
        params = {"tools": [tool]}
        if choice != "auto":
            params["tool_choice"] = choice
        message, _data = self.reply(self.client, text, self.o["tool_max_tokens"], **params)
        return self._tool_ok(message, tool)

    def tool_calls(self):
        n = self.o["tool_calls"]
        errors = in_parallel(lambda i: self._tool_call(i, "auto"), range(n), 1)
        bad = [(i, e) for i, e in enumerate(errors) if e]
        return result("tool_calls", n - len(bad), n, counted=not self.o["dummy"],
                      examples=["request %d: %s" % b for b in bad],
                      why="%d requests, one at a time, each offering one of %d tools (default tool choice)" % (
                          n, len(prompts.TOOLS)))

    def tool_bursts(self):
        size, rounds = self.o["burst_size"], self.o["bursts"]
        out = {}
        for choice in ("auto", "required"):
            errors = []
            for r in range(rounds):
                errors += in_parallel(lambda i, c=choice, base=r * size: self._tool_call(base + i, c), range(size), size)
            out[choice] = errors
        passed = {c: sum(1 for e in out[c] if not e) for c in out}
        total = size * rounds
        examples = [["%s: %s" % (c, e) for e in out[c] if e][:2] for c in out]
        examples = examples[0][:1] + examples[1][:2] if examples[0] and examples[1] else examples[0] + examples[1]
        return result("tool_bursts", passed["auto"] + passed["required"], 2 * total, counted=not self.o["dummy"],
                      examples=examples, by_choice={"default": [passed["auto"], total],
                                                    "required": [passed["required"], total]},
                      why="%d bursts of %d concurrent requests with the default tool choice, then with required" % (
                          rounds, size))

    def _json(self, i, instruction_only):
        check = validator(prompts.PERSON_SCHEMA)
        params = {} if instruction_only else {"response_format": {
            "type": "json_schema", "json_schema": {"name": "person", "schema": prompts.PERSON_SCHEMA, "strict": True}}}
        message, _data = self.reply(self.client, prompts.json_prompt(i, instruction_only), self.o["json_max_tokens"], **params)
        try:
            value = parse_json_reply(message.get("content"))
        except ValueError:
            return "not JSON: %s" % short(message.get("content") or "")
        return check(value)

    def json_check(self, name, instruction_only):
        n = self.o[name]
        errors = [self._json(i, instruction_only) for i in range(n)]
        bad = [(i, e) for i, e in enumerate(errors) if e]
        return result(name, n - len(bad), n, counted=not self.o["dummy"],
                      examples=["request %d: %s" % b for b in bad],
                      why="%d requests for a person object (name, age, city, hobbies)%s" % (
                          n, ", the schema as response_format json_schema" if not instruction_only
                          else ", asked for in words only"))

    def sizer(self):
        if getattr(self, "_sizer", None) is None:
            self._sizer = prompts.Sizer(self.prompt_tokens)
        return self._sizer

    def needles(self):
        sizes = self.o["needle_sizes"]
        if not sizes:
            return not_run("needles", "no needle sizes (verify_needle_sizes)")
        sizer = self.sizer()
        examples, passed, total, by_size = [], 0, 0, {}
        for size in sizes:
            hits = 0
            for j, depth in enumerate(self.o["needle_depths"]):
                word = "%s-%04d" % (prompts.WORDS[(size + j * 7) % len(prompts.WORDS)].upper(), (size * 31 + j * 977) % 10000)
                needle = " The code word for the vault is %s. " % word
                body = prompts.filler(5000 + size + j, sizer.chars(size, 60))
                at = int(len(body) * depth)
                text = (body[:at] + needle + body[at:] + "\n\nWhat is the code word for the vault? "
                        "Reply with the code word only.")
                message, data = self.reply(self.client, text, self.o["needle_max_tokens"])
                said = (message.get("content") or "") + (message.get("reasoning_content") or "")
                total += 1
                if word.lower() in said.lower():
                    hits += 1
                else:
                    examples.append("%d tokens, needle at %d%%: replied %s" % (
                        data["usage"]["prompt_tokens"], depth * 100, short(said)))
            by_size[str(size)] = [hits, len(self.o["needle_depths"])]
            passed += hits
        return result("needles", passed, total, counted=not self.o["dummy"], examples=examples, by_size=by_size,
                      why="prompts of %s tokens, the needle at %s of the text" % (
                          "/".join(str(s) for s in sizes), "/".join("%d%%" % (d * 100) for d in self.o["needle_depths"])))

    def images(self):
        if not self.o["vision"]:
            return not_run("images", "vision is off (llm_vision: false)")
        if self.o["dummy"]:
            return not_run("images", "burn-in weights see nothing: naming a colour needs the real weights "
                                     "(image_input checks what the engine does with images)")
        examples, passed = [], 0
        for name, rgb in prompts.COLOURS:
            content = [prompts.image_part(rgb), {"type": "text", "text": "What colour is this image? Answer with one word."}]
            data, _seconds = self.client.chat([{"role": "user", "content": content}], max_tokens=16, **GREEDY)
            said = (data["choices"][0].get("message") or {}).get("content") or ""
            if name in said.lower():
                passed += 1
            else:
                examples.append("a %s square: replied %s" % (name, short(said)))
        return result("images", passed, len(prompts.COLOURS), counted=not self.o["dummy"], examples=examples,
                      why="%d one-colour PNG images as data URLs, asked for the colour" % len(prompts.COLOURS))

    # -- media ---------------------------------------------------------------------------------

    def _media_tokens(self, parts, text="Describe this."):
        """Prompt tokens the parts add to a one-message chat, or the engine's refusal (EndpointError)."""
        if getattr(self, "_bare_tokens", None) is None:
            self._bare_tokens = self.prompt_tokens(text)
        data, _seconds = self.client.chat([{"role": "user", "content": list(parts) + [{"type": "text", "text": text}]}],
                                          max_tokens=1, **GREEDY)
        return int(data["usage"]["prompt_tokens"]) - self._bare_tokens

    def _refused(self, what, parts):
        """None when the engine refuses the parts with a client error (4xx) and then still serves, else why not."""
        try:
            added = self._media_tokens(parts)
            return "%s: accepted (%d prompt tokens added), not refused" % (what, added)
        except EndpointError as e:
            if e.status is None or not 400 <= e.status < 500:
                return "%s: answered %s, not a client error (4xx): %s" % (what, e.status, short(str(e), 0, 160))
        try:
            self.prompt_tokens("Still serving?")
        except EndpointError as e:
            return "%s: refused, but the engine stopped serving: %s" % (what, e)
        return None

    def _media_steps(self, steps):
        passed, examples = 0, []
        for what, step in steps:
            try:
                why = step()
            except EndpointError as e:
                why = "%s: %s" % (what, e)
            if why:
                examples.append(why)
            else:
                passed += 1
        return passed, examples

    def image_input(self):
        if not self.o["vision"]:
            return not_run("image_input", "vision is off (llm_vision: false)")
        small, large = prompts.png((200, 60, 60)), prompts.noise_png(448, 672, 1)
        counts = {}

        def count(key, parts, more_than=0):
            counts[key] = self._media_tokens(parts)
            return None if counts[key] > more_than else "%s: %d prompt tokens added" % (key, counts[key])

        steps = [
            ("a 64x64 PNG", lambda: count("a 64x64 PNG", [prompts.image_url_part(small)])),
            ("a 448x672 PNG", lambda: count("a 448x672 PNG", [prompts.image_url_part(large)],
                                            counts.get("a 64x64 PNG", 0))),
            ("two 64x64 PNGs", lambda: None if self._media_tokens([prompts.image_url_part(small)] * 2)
             == 2 * counts.get("a 64x64 PNG", -1) else "two 64x64 PNGs: not twice one"),
            ("a corrupt PNG", lambda: self._refused("a corrupt PNG", [prompts.image_url_part(prompts.CORRUPT_PNG)])),
        ]
        media = self.o.get("media_urls", "data_only")
        if media != "any":
            steps.append(("an http URL", lambda: self._refused(
                "an http URL llm_media_urls does not allow (%s)" % prompts.UNREACHABLE_IMAGE_URL,
                [prompts.image_url_part(prompts.UNREACHABLE_IMAGE_URL)])))
        passed, examples = self._media_steps(steps)
        return result("image_input", passed, len(steps), examples=examples, tokens=counts,
                      why="PNG data URLs of 64x64 and 448x672 pixels accepted and counted (%s prompt tokens), two "
                          "images twice one; a corrupt PNG%s refused with a client error while the engine goes on "
                          "serving" % ("/".join(str(v) for v in counts.values()) or "-",
                                       "" if media == "any" else " and an http URL"))

    def video_input(self):
        if not self.o["vision"]:
            return not_run("video_input", "vision is off (llm_vision: false)")
        if self.o.get("no_video"):
            return not_run("video_input", self.o["no_video"])
        colours = [c for _name, c in prompts.COLOURS]
        short_clip, long_clip = prompts.avi(colours * 3), prompts.avi(colours * 6)  # 9 and 18 frames at 4 fps
        counts = {}

        def count(key, clip, more_than=0):
            counts[key] = self._media_tokens([prompts.video_url_part(clip)], "What happens?")
            return None if counts[key] > more_than else "%s: %d prompt tokens added" % (key, counts[key])

        steps = [
            ("a 2.25 s clip", lambda: count("a 2.25 s clip", short_clip)),
            ("a 4.5 s clip", lambda: count("a 4.5 s clip", long_clip, counts.get("a 2.25 s clip", 0))),
            ("a corrupt video", lambda: self._refused("a corrupt video",
                                                      [prompts.video_url_part(prompts.CORRUPT_AVI)])),
        ]
        passed, examples = self._media_steps(steps)
        return result("video_input", passed, len(steps), examples=examples, tokens=counts,
                      why="uncompressed AVI data URLs of 112x112 pixels at 4 frames a second, 2.25 s and 4.5 s, "
                          "accepted and counted (%s prompt tokens, the longer more); a corrupt video refused with a "
                          "client error while the engine goes on serving" % (
                              "/".join(str(v) for v in counts.values()) or "-"))

    # -- all ----------------------------------------------------------------------------------

    def run(self, checks, saved_hashes):
        out, hashes = [], saved_hashes or {}
        for name in CHECKS:
            if name not in checks:
                out.append(not_run(name, "not asked for (verify_checks)"))
                continue
            start = time.time()
            self.log(TITLES[name])
            try:
                if name == "long_prompt_hashes":
                    r, hashes = self.long_prompt_hashes(saved_hashes)
                elif name in ("json_instruction", "json_response_format"):
                    r = self.json_check(name, name == "json_instruction")
                else:
                    r = getattr(self, name)()
            except EndpointError as e:
                r = result(name, 0, 1, why="a request failed: %s" % e, examples=[str(e)])
            except (KeyError, IndexError, TypeError, ValueError) as e:
                r = result(name, 0, 1, why="the engine's answer had an unexpected form: %r" % e, examples=[repr(e)])
            r["seconds"] = round(time.time() - start, 2)
            out.append(r)
        return out, hashes


def summary(results):
    """Counts for the report head: checks passed, failed (counted), and not run."""
    counted = [r for r in results if r["counted"]]
    return {"passed": sum(1 for r in counted if r["status"] == "pass"),
            "failed": [r["name"] for r in counted if r["status"] == "fail"],
            "not_counted": [r["name"] for r in results if not r["counted"] and r["status"] != "not_run"],
            "not_run": [r["name"] for r in results if r["status"] == "not_run"]}
