"""bench's warm-up and repeated passes against a stand-in engine that, like vLLM, is slow the first time
it meets a shape (a batch of so many requests of a kind, a prompt of a size) and fast after: a row's
timed figures must never hold a cold pass, and its figures are the medians of its passes with their
range."""
import threading
import time

from ansible_collections.gpuserve.llm.plugins.module_utils import bench
from ansible_collections.gpuserve.llm.plugins.modules import bench_run

COLD, WARM = 2.0, 0.02  # seconds to the first token, the first time a shape is met and after
SETTLE_S = 0.15


class ShapeEngine(object):
    """Answers bench's requests with the times a stream would have. A decode request's shape is its kind
    (with a schema or not) and how many requests of the row are in flight when it arrives; a long prompt's
    is its size in tokens, to the power of two below (engines compile for ranges of sizes). The first
    request of a shape waits COLD seconds for its first token, later ones WARM, or `schedule[i]` for the
    i-th group of `group` requests when a schedule is given."""

    def __init__(self, schedule=None, group=1):
        self.lock = threading.Lock()
        self.in_flight, self.last_arrival = 0, 0.0
        self.seen = set()
        self.sent = []  # (prompt, shape, cold) in the order they arrived
        self.schedule, self.group = schedule, group

    @staticmethod
    def tokens(text):
        return 10 + len(text) // 4  # a 10-token template, 4 characters a token

    def chat(self, messages, **params):
        return {"usage": {"prompt_tokens": self.tokens(messages[-1]["content"])}}, 0.0

    def metrics(self):
        return ""

    def stream(self, messages, max_tokens, **params):
        text = " ".join(m["content"] for m in messages)
        prompt = self.tokens(text)
        with self.lock:
            self.in_flight += 1
            self.last_arrival = time.monotonic()
            if prompt > 500:
                shape = ("prompt", prompt.bit_length())
            else:
                shape = ("structured" if params.get("response_format") else "text", self.in_flight)
            cold = shape not in self.seen
            self.seen.add(shape)
            seq = len(self.sent)
            self.sent.append((text, shape, cold))
        # Every request of a pass is in flight before the first ends: none leaves before the arrivals have
        # stopped for SETTLE_S (a loaded machine starts the client's threads late; 50 ms was once too little).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self.lock:
                if time.monotonic() - self.last_arrival >= SETTLE_S:
                    break
            time.sleep(0.01)
        with self.lock:
            self.in_flight -= 1
        ttft = self.schedule[seq // self.group] if self.schedule else (COLD if cold else WARM)
        start = time.time()
        first = start + ttft
        last = first + 0.01 * (max_tokens - 1)
        return {"text": "w " * max_tokens, "chunks": max_tokens, "start": start, "first": first, "last": last,
                "end": last, "usage": {"prompt_tokens": prompt, "completion_tokens": max_tokens}, "timings": None}


OPTS = {"reply_tokens": 5, "ignore_eos": True, "prefill_reply_tokens": 4, "reuse_tokens": 1500, "reuse_turns": 3}


def test_a_decode_row_is_warmed_up_at_its_own_concurrency_and_kind_and_timed_warm():
    engine = ShapeEngine()
    b = bench.Bench(engine, dict(OPTS, repeats=3, warmup=True))
    row = b.decode("prose", 4)
    # The warm-up: 4 requests at once (1 to 4 in flight), each cold; then 3 passes of 4, all warm.
    assert [s[1] for s in engine.sent[:4]] == [("text", k) for k in (1, 2, 3, 4)]
    assert [s[2] for s in engine.sent] == [True] * 4 + [False] * 12
    assert len(set(s[0] for s in engine.sent)) == 16  # no pass repeats another's prompts
    assert row["repeats"] == 3 and len(row["passes"]) == 3 and row["spread"] == "min-max"
    assert row["ttft_ms"] == 20.0 and row["range"]["ttft_ms"] == [20.0, 20.0]
    assert row["warmup"]["ttft_ms"] == 2000.0
    assert row["mean_reply_tokens"] == 5.0 and row["reply_tokens"] == 20 and row["mean_prompt_tokens"] > 10
    # Another kind is another shape: its own warm-up takes the cold requests again.
    structured = b.decode("structured", 4)
    assert structured["warmup"]["ttft_ms"] == 2000.0 and structured["range"]["ttft_ms"] == [20.0, 20.0]


def test_without_the_warm_up_the_cold_pass_is_timed():
    """What the warm-up is for: the same row unwarmed has a cold pass among its timed ones."""
    row = bench.Bench(ShapeEngine(), dict(OPTS, repeats=3, warmup=False)).decode("prose", 4)
    assert row["warmup"] is None and row["range"]["ttft_ms"] == [20.0, 2000.0]
    assert row["ttft_ms"] == 20.0  # the median of three still shows the warm engine


def test_a_row_is_the_median_of_its_passes_with_their_range():
    # Two requests a pass; the warm-up's first token after 2 s, the passes' after 50, 10 and 20 ms.
    engine = ShapeEngine(schedule=[2.0, 0.05, 0.01, 0.02], group=2)
    row = bench.Bench(engine, dict(OPTS, repeats=3, warmup=True)).decode("code", 2)
    assert [p["ttft_ms"] for p in row["passes"]] == [50.0, 10.0, 20.0]
    assert row["ttft_ms"] == 20.0 and row["range"]["ttft_ms"] == [10.0, 50.0]
    assert row["warmup"]["ttft_ms"] == 2000.0
    aggregates = [p["aggregate_tok_s"] for p in row["passes"]]
    assert row["aggregate_tok_s"] == sorted(aggregates)[1]
    assert row["range"]["aggregate_tok_s"] == [min(aggregates), max(aggregates)]


def test_spread_leaves_out_passes_without_a_figure():
    medians, ranges = bench.spread([{"a": 30.0, "b": None}, {"a": 10.0}, {"a": None}, {"a": 20.0}], ("a", "b", "c"))
    assert medians == {"a": 20.0, "b": None, "c": None}
    assert ranges == {"a": [10.0, 30.0], "b": None, "c": None}
    assert bench.spread([{"a": 10.0}, {"a": 15.0}], ("a",)) == ({"a": 12.5}, {"a": [10.0, 15.0]})


def test_a_prefill_row_is_warmed_up_with_a_cold_prompt_of_its_size():
    engine = ShapeEngine()
    row = bench.Bench(engine, dict(OPTS, repeats=3, warmup=True)).prefill(1500)
    sent = [s for s in engine.sent if s[1][0] == "prompt"]
    assert len(sent) == 4 and [s[2] for s in sent] == [True, False, False, False]
    assert len(set(s[0][:32] for s in sent)) == 4  # each its own prefix: nothing for a prefix cache to reuse
    assert row["ttft_s"] == 0.02 and row["range"]["ttft_s"] == [0.02, 0.02] and row["warmup"]["ttft_s"] == 2.0
    assert 1350 <= row["prompt_tokens"] <= 1650 and row["repeats"] == 3


def test_prompt_reuse_is_warmed_up_with_a_whole_conversation():
    engine = ShapeEngine()
    out = bench.Bench(engine, dict(OPTS, repeats=2, warmup=True)).reuse()
    # (3 turns + a matched cold prompt) for the warm-up and for each of 2 passes.
    assert len(engine.sent) == 12 and [s[2] for s in engine.sent] == [True] + [False] * 11
    assert out["warmup"]["first_time_s"] == 2.0 and out["first_time_s"] == 0.02
    assert out["repeats"] == 2 and len(out["passes"]) == 2 and len(out["next_turn_tokens"]) == 2
    assert len(set(s[0][:32] for s in engine.sent[::4])) == 3  # each conversation its own prefix


def test_the_progress_steps_are_the_passes_bench_runs():
    """bench_run's progress line counts a step a pass ("step 7 of 12"); Bench logs each pass it starts."""
    opts = dict(OPTS, kinds=["prose", "structured"], concurrency=[1, 2], prefill_sizes=[1500], repeats=2, warmup=True)
    lines = []
    bench.Bench(ShapeEngine(), opts, log=lines.append).run()
    assert len(lines) == bench_run.progress_steps(dict(opts, endpoints=[{"name": "a"}])) == 18
    assert lines[:3] == ["decode prose x1: warm-up", "decode prose x1: pass 1 of 2", "decode prose x1: pass 2 of 2"]
    opts.update(repeats=1, warmup=False, reuse_turns=1)
    lines = []
    bench.Bench(ShapeEngine(), opts, log=lines.append).run()
    assert len(lines) == bench_run.progress_steps(dict(opts, endpoints=[{"name": "a"}, {"name": "b"}])) // 2 == 5
