"""The warm-up before LIVE against a stand-in engine that, like vLLM, is slow the first time it meets a shape
(so many requests in flight, a prompt of a size) and fast after: after the warm-up, the first users at the
concurrencies it warmed get warm first tokens; what its time budget leaves out is named; a refused request
is E_SMOKE with the engine log's end, the key never shown."""
import json
import os
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer

from ansible_collections.gpuserve.llm.plugins.module_utils import bench, warm
from test_bench_passes import COLD, OPTS, WARM, ShapeEngine
from test_engine_ready import KEY, ROOT, StandIn

MODULE = os.path.join(ROOT, "plugins", "modules", "engine_warm.py")


def test_the_concurrencies_warmed_are_those_the_recipe_serves():
    assert warm.levels(40) == [1, 2, 4, 8, 16, 32, 40]
    assert warm.levels(4) == [1, 2, 4]
    assert warm.levels(1) == [1]


def test_after_the_warm_up_the_first_users_get_warm_first_tokens():
    cold_engine = ShapeEngine()
    first_users = bench.Bench(cold_engine, dict(OPTS, repeats=1, warmup=False)).decode("prose", 4)
    assert first_users["ttft_ms"] == 1000 * COLD  # without a warm-up the first users pay

    engine = ShapeEngine()
    result = warm.Warmer(engine, reply_tokens=4, budget_s=60).run(warm.levels(4), long_prompt_tokens=2000)
    assert [r["requests"] for r in result["levels"]] == [1, 2, 4]
    assert all(r["ttft_ms_first_max"] == 1000 * COLD and r["ttft_ms_then_max"] == 1000 * WARM
               for r in result["levels"])
    assert result["long_prompt"]["ttft_ms_first"] == 1000 * COLD and result["long_prompt"]["ttft_ms_then"] == 1000 * WARM
    assert 1900 <= result["long_prompt"]["prompt_tokens"] <= 2000  # sized by the engine's own count
    assert result["complete"] and result["left_out"] == []
    assert len(set(s[0] for s in engine.sent)) == len(engine.sent)  # every request its own prompt

    first_users = bench.Bench(engine, dict(OPTS, repeats=1, warmup=False)).decode("prose", 4)
    assert first_users["ttft_ms"] == 1000 * WARM and first_users["range"]["ttft_ms"] == [1000 * WARM] * 2
    line = warm.summary(result)
    assert line.startswith("warm-up in ") and "4 streams 2000.0 -> 20.0 ms" in line and "; 2 streams " in line
    assert ": 1 stream 2000.0 -> 20.0 ms;" in line


def test_what_the_time_budget_leaves_out_is_named():
    ticks = iter(range(0, 1000, 40))
    result = warm.Warmer(ShapeEngine(), reply_tokens=4, budget_s=250, clock=lambda: next(ticks)).run(
        [1, 2, 4, 8], long_prompt_tokens=600)
    assert [r["requests"] for r in result["levels"]] == [1, 2]
    assert result["left_out"] == ["4 streams", "8 streams", "600 prompt tokens"]
    assert not result["complete"]
    assert warm.summary(result).endswith("(left out, over the time budget: 4 streams, 8 streams, 600 prompt tokens)")


def test_a_refused_warm_up_request_is_e_smoke_with_the_log_end_and_no_key(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    StandIn.state = {"health": 200, "container": {"Running": True}}
    try:
        args = dict(url="http://127.0.0.1:%d" % port, api_key="sk-wrong-" + KEY, model="tiny", container="c1",
                    docker_host="tcp://127.0.0.1:%d" % port, concurrency=[1, 2], log_lines=2, timeout=30)
        path = tmp_path / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        out = subprocess.run([sys.executable, MODULE, str(path)], stdout=subprocess.PIPE, text=True, check=False,
                             env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    finally:
        server.shutdown()
    result = json.loads(out.stdout)
    assert result["failed"] and result["finding"]["code"] == "E_SMOKE"
    assert result["msg"].startswith("E_SMOKE: a warm-up request failed: http://127.0.0.1:%d/v1/chat/completions "
                                    "answered HTTP 401" % port)
    assert result["log_lines"] == ["error: out of memory", "exiting"]
    assert KEY not in out.stdout
