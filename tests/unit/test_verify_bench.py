"""verify's and bench's parts that need no engine: the client against a real HTTP server streaming
server-sent events in pieces, the checks' judgements (tool calls, JSON, counting), the engine figures
read from Prometheus text, prompt sizing and the plots. The whole of both, against the real llama.cpp
engine, is molecule default's verify step."""
import base64
import http.server
import json
import os
import struct
import threading
import time
import zlib

import jinja2
import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import bench, engines, prompts, verify
from ansible_collections.gpuserve.llm.plugins.module_utils.engines import prom_total
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client, EndpointError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class StreamingEngine(http.server.BaseHTTPRequestHandler):
    """Streams 5 content chunks, 0.1 s apart, the first after 0.3 s, split across writes mid-line, then usage and
    llama.cpp-style timings; refuses a wrong key with 401."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        if self.headers.get("Authorization") != "Bearer sk-good":
            data = b'{"error": "bad key sk-bad"}'
            self.send_response(401)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        send(b'data: {"choices":[{"delta":{"role":"assistant","content":null}}]}\n\n')
        time.sleep(0.3)
        times = []
        for i in range(5):
            line = b'data: {"choices":[{"delta":{"content":"w%d "}}]}\n\n' % i
            times.append(time.time())  # before it goes out, by the client's clock (openai_client's time.time())
            send(line[:17])  # a line split across two chunks must still be one event
            send(line[17:])
            time.sleep(0.1)
        self.server.sent.append((times[0], times[-1]))  # when the first and last content chunks went out
        send(b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n')
        send(b'data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5},'
             b'"timings":{"predicted_per_second":10.0,"prompt_per_second":40.0,"prompt_ms":300.0}}\n\n')
        send(b"data: [DONE]\n\n")
        send(b"")


@pytest.fixture
def engine():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StreamingEngine)
    server.bodies, server.sent = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def test_stream_times_the_first_and_last_content_chunks_from_the_client(engine):
    client = Client("http://127.0.0.1:%d" % engine.server_port, "sk-good", "tiny")
    s = client.stream([{"role": "user", "content": "hi"}], max_tokens=5)
    assert s["text"] == "w0 w1 w2 w3 w4 " and s["chunks"] == 5
    # Against when the engine sent them (a loaded machine delays what the client reads, and stretches the
    # engine's sleeps): the first content chunk, not the role-only one 0.3 s before it; the last, not an earlier.
    [(sent_first, sent_last)] = engine.sent[-1:]  # the times each went out
    assert sent_first <= s["first"] < sent_first + 0.6 and s["first"] - s["start"] >= 0.28, (s, sent_first)
    assert sent_last <= s["last"] < sent_last + 0.6, (s, sent_last)
    assert s["usage"]["completion_tokens"] == 5 and s["timings"]["prompt_ms"] == 300.0
    assert s["finish_reason"] == "length"
    sent = engine.bodies[-1]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True} and sent["model"] == "tiny"


def test_a_refused_request_says_the_status_and_never_the_key(engine):
    client = Client("http://127.0.0.1:%d" % engine.server_port, "sk-bad", "tiny")
    with pytest.raises(EndpointError) as e:
        client.chat([{"role": "user", "content": "hi"}], max_tokens=1)
    assert e.value.status == 401 and "HTTP 401" in str(e.value) and "sk-bad" not in str(e.value)
    with pytest.raises(EndpointError) as e:
        Client("http://127.0.0.1:9", "", "tiny", timeout=2).get_text("/v1/models")
    assert e.value.status is None and "did not answer" in str(e.value)


def test_bench_decode_row_from_streams(engine):
    """Per-request tok/s is (tokens - 1) over first-to-last chunk; TTFT the median to the first content chunk;
    llama.cpp's timings are the engine's column."""
    client = Client("http://127.0.0.1:%d" % engine.server_port, "sk-good", "tiny")
    row = bench.Bench(client, {"reply_tokens": 5, "ignore_eos": True}).decode_row("prose", 3)
    assert row["requests"] == 3 and row["reply_tokens"] == 15
    # 4 tokens over ~0.4 s: against the engine's own first-to-last times (a loaded machine stretches its sleeps),
    # within 25 %; counting the 0.3 s before the first token too would be ~43 % off
    sent = sorted(4 / (last - first) for first, last in engine.sent[-3:])[1]
    assert abs(row["per_request_tok_s"] - sent) <= 0.25 * sent and row["per_request_tok_s"] <= 11.5, (row, sent)
    assert 280 <= row["ttft_ms"] <= 600
    assert row["aggregate_tok_s"] < 3 * row["per_request_tok_s"]
    assert row["engine"]["decode_tok_s"] == 10.0 and row["engine"]["prompt_ms"] == 300.0
    assert 0 <= row["client_cpu_cores"] < 0.5
    prompts_sent = [b["messages"][0]["content"] for b in engine.bodies[-3:]]
    assert len(set(prompts_sent)) == 3 and all(b.get("ignore_eos") for b in engine.bodies[-3:])


VLLM_BEFORE = """vllm:time_to_first_token_seconds_sum{model_name="m"} 1.0
vllm:time_to_first_token_seconds_count{model_name="m"} 10
vllm:inter_token_latency_seconds_sum{model_name="m"} 2.0
vllm:inter_token_latency_seconds_count{model_name="m"} 400
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 100
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 60
"""
VLLM_AFTER = """vllm:time_to_first_token_seconds_sum{model_name="m"} 1.8
vllm:time_to_first_token_seconds_count{model_name="m"} 14
vllm:inter_token_latency_seconds_sum{model_name="m"} 6.0
vllm:inter_token_latency_seconds_count{model_name="m"} 800
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 300
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 210
"""


def test_engine_figures_are_the_histograms_over_the_row():
    out = bench.engine_figures(VLLM_BEFORE, VLLM_AFTER, [])
    assert out == {"ttft_ms": 200.0, "itl_ms": 10.0, "decode_tok_s": 100.0, "draft_acceptance": 0.75}
    assert bench.engine_figures("", "", []) == {}
    assert prom_total(VLLM_AFTER, "vllm:time_to_first_token_seconds_count") == 14


WEATHER = prompts.tool_request(0)[0]


@pytest.mark.parametrize("message, why", [
    ({"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "celsius"}'}}]}, None),
    ({"content": "It is sunny."}, "no tool call"),
    ({"tool_calls": [{"function": {"name": "get_time", "arguments": "{}"}}]}, "called get_time, not get_weather"),
    ({"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Oslo"'}}]}, "not JSON"),
    ({"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}, "'unit' is a required"),
    ({"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "kelvin"}'}}]},
     "'kelvin' is not one of"),
])
def test_a_tool_call_counts_when_its_name_is_right_and_its_arguments_validate(message, why):
    said = verify.Verifier(None, {})._tool_ok(message, WEATHER)
    assert (said is None) if why is None else (why in said), said


def test_json_replies_parse_with_or_without_a_fence_and_validate():
    check = verify.validator(prompts.PERSON_SCHEMA)
    good = {"name": "Ana", "age": 41, "city": "Porto", "hobbies": ["sailing"]}
    assert verify.parse_json_reply("```json\n%s\n```" % json.dumps(good)) == good
    assert check(verify.parse_json_reply(json.dumps(good))) is None
    assert "'hobbies' is a required property" in check({"name": "Ana", "age": 41, "city": "Porto"})
    assert "is not of type 'integer'" in check(dict(good, age="41"))
    with pytest.raises(ValueError):
        verify.parse_json_reply("Sure! Here it is: {")


def test_counts_and_what_counts():
    checks = [verify.result("concurrent_solo", 7, 8, examples=["p1", "p2", "p3", "p4"]),
              verify.result("tool_calls", 3, 40, counted=False),
              verify.result("json_response_format", 20, 20),
              verify.not_run("images", "vision is off")]
    assert [c["status"] for c in checks] == ["fail", "fail", "pass", "not_run"]
    assert len(checks[0]["examples"]) == 3
    assert verify.summary(checks) == {"passed": 1, "failed": ["concurrent_solo"], "not_counted": ["tool_calls"],
                                      "not_run": ["images"]}


def test_prompts_are_distinct_and_the_filler_is_sized_by_the_engine_tokenizer():
    for kind in ("prose", "structured", "code"):
        assert len({prompts.decode_prompt(kind, i) for i in range(64)}) == 64
    assert prompts.filler(3, 5000) == prompts.filler(3, 5000) != prompts.filler(4, 5000)
    assert len(prompts.filler(3, 5000)) == 5000
    # An engine whose template adds 20 tokens and whose tokenizer makes 4 characters a token.
    sizer = prompts.Sizer(lambda text: 20 + (len(text) + 3) // 4)
    text = prompts.filler(1, sizer.chars(8000))
    assert abs(20 + len(text) / 4.0 - 8000) < 8000 * 0.01


def test_the_images_are_pngs_of_their_colour():
    data = prompts.png((30, 70, 220), size=8)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat = data.index(b"IDAT")
    raw = zlib.decompress(data[idat + 4:idat + 4 + struct.unpack(">I", data[idat - 4:idat])[0]])
    assert (width, height) == (8, 8) and raw[:4] == b"\x00\x1e\x46\xdc" and len(raw) == 8 * (1 + 8 * 3)


def test_plots_are_drawn_from_a_result(tmp_path):
    from ansible_collections.gpuserve.llm.plugins.modules import bench_plot
    rows = [{"kind": k, "requests": n, "aggregate_tok_s": 10.0 * n, "per_request_tok_s": 10.0, "ttft_ms": 5.0 * n}
            for k in ("prose", "code") for n in (1, 2, 4)]
    result = {"host": "h1", "model": "m", "endpoints": [{"name": "a", "decode": rows}, {"name": "b", "decode": rows}]}
    files = bench_plot.draw(result, str(tmp_path))
    assert [f.rsplit("/", 1)[1] for f in files] == ["throughput.png", "ttft.png"]
    labels = [s[0] for s in bench_plot.series(result, "aggregate_tok_s")]
    assert labels == ["a, prose", "a, code", "b, prose", "b, code"]
    for f in files:
        with open(f, "rb") as png:
            assert png.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_step_counting_job_reports_its_step_in_the_progress_line(tmp_path):
    """verify and bench run async; job_progress's line comes from the step file they write."""
    from ansible_collections.gpuserve.llm.plugins.module_utils.progress import progress_line
    from ansible_collections.gpuserve.llm.plugins.module_utils.progress import StepFile
    path = str(tmp_path / "progress.json")
    steps = StepFile(path, 9)
    steps("Tool calls")
    steps("JSON, instruction only")
    with open(path) as f:
        state = json.load(f)
    line = progress_line(state, now=state["started"] + 42)
    assert line == "step 2 of 9: JSON, instruction only, 42 s"


class MediaEngine(object):
    """A stand-in for an engine's chat endpoint that counts media the way GLM-4.6V's processor does (an image
    of w x h pixels: max(16, w * h / 784) tokens plus its two marker tokens; a video: 16 tokens for each two
    frames), refuses a corrupt file or a URL with a 400, and can be told to misbehave."""

    def __init__(self, corrupt_status=400, fetches_urls=False, dies_after_refusal=False):
        self.corrupt_status, self.fetches_urls, self.dies = corrupt_status, fetches_urls, dies_after_refusal
        self.refused = 0

    def chat(self, messages, **params):
        if self.dies and self.refused:
            raise EndpointError(None, "did not answer")
        tokens = 10
        for part in messages[0]["content"] if isinstance(messages[0]["content"], list) else [messages[0]["content"]]:
            if isinstance(part, str) or part["type"] == "text":
                tokens += len((part if isinstance(part, str) else part["text"]).split())
                continue
            url = part[part["type"]]["url"]
            if not url.startswith("data:"):
                if not self.fetches_urls:
                    self.refused += 1
                    raise EndpointError(400, "The URL must be from one of the allowed domains")
                tokens += 18
                continue
            data = base64.b64decode(url.split(",", 1)[1])
            if part["type"] == "image_url":
                if data[12:16] != b"IHDR":
                    self.refused += 1
                    raise EndpointError(self.corrupt_status, "cannot identify image file")
                width, height = struct.unpack(">II", data[16:24])
                tokens += max(16, width * height // 784) + 2
            else:
                if data[12:16] != b"LIST":
                    self.refused += 1
                    raise EndpointError(self.corrupt_status, "could not open video")
                frames = struct.unpack("<I", data[data.index(b"avih") + 24:data.index(b"avih") + 28])[0]
                tokens += 16 * ((frames + 1) // 2) + 2
        return {"usage": {"prompt_tokens": tokens}, "choices": [{"message": {"content": ""}}]}, 0.01


def media_checks(engine, **opts):
    v = verify.Verifier(engine, dict({"vision": True, "dummy": True, "media_urls": "data_only"}, **opts))
    return v.image_input(), v.video_input()


def test_media_checks_pass_against_an_engine_that_counts_and_refuses():
    image, video = media_checks(MediaEngine())
    assert (image["status"], image["passed"], image["total"], image["counted"]) == ("pass", 5, 5, True)
    assert image["tokens"] == {"a 64x64 PNG": 18, "a 448x672 PNG": 386}
    assert (video["status"], video["passed"], video["total"]) == ("pass", 3, 3)
    assert video["tokens"]["a 4.5 s clip"] > video["tokens"]["a 2.25 s clip"] > 0
    assert image["group"] == video["group"] == "media"
    # media_urls: any asks for no refusal of URLs
    assert media_checks(MediaEngine(fetches_urls=True), media_urls="any")[0]["total"] == 4


@pytest.mark.parametrize("engine, media_urls, expect", [
    (MediaEngine(fetches_urls=True), "data_only",
     "an http URL llm_media_urls does not allow (http://media-check.invalid/gpuserve.png): accepted"),
    (MediaEngine(fetches_urls=True), ["cdn.example.org"], "accepted"),
    (MediaEngine(corrupt_status=500), "data_only", "a corrupt PNG: answered 500, not a client error"),
    (MediaEngine(dies_after_refusal=True), "data_only", "a corrupt PNG: refused, but the engine stopped serving"),
])
def test_media_checks_fail_when_the_engine_takes_what_it_must_refuse(engine, media_urls, expect):
    image, _video = media_checks(engine, media_urls=media_urls)
    assert image["status"] == "fail" and image["counted"]
    assert any(expect in e for e in image["examples"]), image["examples"]


def test_media_checks_do_not_run_without_vision_and_colours_need_real_weights():
    v = verify.Verifier(MediaEngine(), {"vision": False, "dummy": True})
    assert v.image_input()["status"] == v.video_input()["status"] == "not_run"
    images = verify.Verifier(MediaEngine(), {"vision": True, "dummy": True}).images()
    assert images["status"] == "not_run" and "real weights" in images["why"]


def test_an_engine_without_video_has_video_input_not_run_with_the_profiles_reason_and_images_still_checked():
    """llama.cpp 0.7.0 decodes video with ffmpeg, which its image lacks: video_input is not_run, not failed."""
    why = engines.PROFILES["llamacpp"]["no_video"]
    image, video = media_checks(MediaEngine(fetches_urls=True), media_urls="any", no_video=why)
    assert (image["status"], image["total"]) == ("pass", 4)
    assert (video["status"], video["why"]) == ("not_run", why) and "ffmpeg" in why
    # every engine the front refuses video for says why, and only those
    assert [n for n, p in engines.PROFILES.items() if "no_video" in p] == \
        [n for n, p in engines.PROFILES.items() if p["media_per_request"]["video"] == 0] == ["sglang", "llamacpp"]


def test_the_avi_is_one_uncompressed_top_down_stream_with_an_index_entry_per_frame():
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    data = prompts.avi(colours, size=16, fps=4)
    assert data[:4] == b"RIFF" and data[8:12] == b"AVI " and struct.unpack("<I", data[4:8])[0] == len(data) - 8
    strf = data.index(b"strf") + 8
    width, height = struct.unpack("<ii", data[strf + 4:strf + 12])
    assert (width, height) == (16, -16) and struct.unpack("<H", data[strf + 14:strf + 16])[0] == 24
    movi = data.index(b"movi")
    first = data[movi + 4:movi + 12]
    assert first[:4] == b"00db" and struct.unpack("<I", first[4:])[0] == 16 * 16 * 3
    assert data[movi + 12:movi + 15] == b"\x00\x00\xff"  # BGR: the first frame is red
    idx = data[data.index(b"idx1") + 8:]
    assert len(idx) == 16 * len(colours) and struct.unpack("<I", idx[8:12])[0] == 4  # offsets from 'movi'


def test_noise_pngs_differ_by_seed_and_have_the_size_asked():
    a, b = prompts.noise_png(40, 30, 1), prompts.noise_png(40, 30, 2)
    assert a != b and a == prompts.noise_png(40, 30, 1)
    assert struct.unpack(">II", a[16:24]) == (40, 30)


def _report(time_, agg1, ttft1, prefill, image="sha256:aaa", parallel=2, repeats=3):
    return {"time": time_, "engine": "vllm", "image": image, "config": "c1", "model": "m", "dummy": False,
            "settings": {"llm_parallel": parallel, "llm_drafter": "off"}, "options": {"repeats": repeats},
            "endpoints": [{"name": "gpu1", "decode": [
                {"kind": "prose", "requests": 1, "aggregate_tok_s": agg1, "per_request_tok_s": agg1, "ttft_ms": ttft1},
                {"kind": "prose", "requests": 16, "aggregate_tok_s": 1900.0, "per_request_tok_s": 120.0, "ttft_ms": 200}],
                "prefill": [{"prompt_tokens": prefill, "prefill_tok_s": 10000.0, "ttft_s": 0.2}], "reuse": None}]}


def test_bench_changes_compare_each_row_both_runs_have_and_say_what_else_changed():
    before = _report("2026-12-01 10:00 UTC", 143.5, 19, 2048, image="sha256:old", parallel=1, repeats=1)
    now = _report("2026-12-02 10:00 UTC", 150.7, 18, 8192)
    got = bench.changes(json.dumps(before), now)
    assert got["since"] == "2026-12-01 10:00 UTC"
    assert got["differs"] == ["image sha256:old -> sha256:aaa", "llm_parallel 1 -> 2", "repeats 1 -> 3"]
    rows = dict(((r["row"], r["figure"]), r) for r in got["rows"])
    one = rows[("prose x1", "aggregate_tok_s")]
    assert (one["before"], one["now"], one["change_pct"], one["better"]) == (143.5, 150.7, 5.0, True)
    ttft = rows[("prose x1", "ttft_ms")]
    assert (ttft["change_pct"], ttft["better"]) == (-5.3, True)  # less time is better
    assert rows[("prose x16", "aggregate_tok_s")]["change_pct"] == 0.0 and rows[("prose x16", "ttft_ms")]["better"] is None
    # A prefill size the last run did not measure is not compared.
    assert not [r for r in got["rows"] if r["row"].startswith("prefill")]


def _render_bench_md(before_after):
    """bench.md.j2's "Before and after" section (and the number macro it uses), rendered as Ansible renders it."""
    text = open(os.path.join(ROOT, "roles", "bench", "templates", "bench.md.j2")).read()
    macro = next(line for line in text.splitlines() if line.startswith("{% macro n("))
    section = text[text.index("{% set ba = bench_before_after"):text.index("{% set cpu16")]
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    return env.from_string(macro + "\n" + section).render(bench_before_after=before_after)


@pytest.mark.parametrize("before, now, spread, better", [
    ((143.5, [140.0, 145.0]), (150.7, [150.0, 152.0]), "beyond", True),  # every pass now faster than every one before
    ((150.0, [149.0, 151.0]), (150.7, [150.0, 152.0]), "within", None),  # the ranges overlap: no verdict
    ((153.0, [151.0, 155.0]), (149.0, [148.0, 150.0]), "beyond", False),
    ((143.5, None), (150.7, [150.0, 152.0]), "not known", True),  # no range kept before: the figure alone
    ((143.5, 1), (150.7, [150.0, 152.0]), "not known", True)])  # one pass before: a range of one, no spread
def test_bench_changes_call_a_change_better_or_worse_only_beyond_the_spread(before, now, spread, better):
    (old_median, old_range), (new_median, new_range) = before, now
    before, now = _report("t", old_median, 19, 2048), _report("u", new_median, 25, 2048)
    for report, rng, ttft in ((before, old_range, [18, 20]), (now, new_range, [24, 26])):
        row = report["endpoints"][0]["decode"][0]
        row["repeats"] = 1 if rng == 1 else 5
        if rng == 1:
            row["range"] = {"aggregate_tok_s": [old_median, old_median], "ttft_ms": [19, 19]}
        elif rng:
            row["range"] = {"aggregate_tok_s": rng, "ttft_ms": ttft}
    rows = dict(((r["row"], r["figure"]), r) for r in bench.changes(json.dumps(before), now)["rows"])
    assert (rows[("prose x1", "aggregate_tok_s")]["spread"], rows[("prose x1", "aggregate_tok_s")]["better"]) == \
        (spread, better)
    if isinstance(old_range, list):  # the first token: 25 ms now against [18, 20] before, beyond the spread, worse
        assert (rows[("prose x1", "ttft_ms")]["spread"], rows[("prose x1", "ttft_ms")]["better"]) == ("beyond", False)
    md = _render_bench_md(bench.changes(json.dumps(before), now))
    cell = {"beyond": " (better) |" if better else " (worse) |", "within": " (within the spread) |",
            "not known": " (better; no spread to judge by) |"}[spread]
    change = "%+.1f %%" % round((new_median - old_median) * 100.0 / old_median, 1)
    assert "| gpu1 | prose x1 | tok/s | %s | %s | %s%s" % (old_median, new_median, change, cell) in md, md


@pytest.mark.parametrize("text, note", [("", "no earlier report"), ("{not json", "could not be read")])
def test_bench_changes_with_no_readable_earlier_report_compares_nothing(text, note):
    got = bench.changes(text, _report("t", 1.0, 1, 512))
    assert got["since"] is None and got["rows"] == [] and note in got["note"]


def test_bench_changes_against_a_report_without_its_time_still_compares():
    last = _report("t", 1.0, 1, 512)
    del last["time"]
    got = bench.changes(json.dumps(last), _report("u", 2.0, 1, 512))
    assert got["since"] == "time not recorded" and got["rows"][0]["change_pct"] == 100.0
