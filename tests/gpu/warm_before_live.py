"""Issue 27 item 6 on a GPU machine with vLLM importable (tests/gpu/RESULTS.md says how to carry it): what the
first minute of users sees from a new vLLM engine, with and without the service stage's warm-up before the
LIVE line (gpuserve.llm.engine_warm's own code, plugins/module_utils/warm.py), on the burn-in folder served
with the recipe's rendered command, as bench_recipe_vs_defaults.py serves it:

    python3 tests/gpu/warm_before_live.py OUT ARMS [SITE]    # ARMS: comma-separated, run in this order
    python3 tests/gpu/warm_before_live.py OUT report         # OUT/report.md from OUT/warm-*.json (no GPU)

    cold     fresh compile caches, no warm-up: the first users pay for what vLLM compiles on first use
    warmed   fresh compile caches, then the warm-up with the service role's defaults (1, 2, 4, ... up to
             llm_parallel streams twice each, 16-token replies; a prompt of min(llm_context / 2, 8192) tokens)
    restart  the warmed arm's caches kept (service_cache_dir keeps them across restarts), no warm-up

The first minute: closed-loop users, PHASE_S (15) seconds each at 1, 4, 16 and llm_parallel streams, distinct
prose prompts (none the warm-up sent), REPLY (64) tokens each, end of stream ignored; each request's time to
first token, by phase: count, median, 90th percentile, highest, and the first request's.
"""
import json
import os
import shutil
import sys
import threading
import time

from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_recipe_vs_defaults as served  # noqa: E402  (its serve / stop / folder / recipe helpers)
from ansible_collections.gpuserve.llm.plugins.module_utils import engines, prompts, warm  # noqa: E402

OUT, ARMS = sys.argv[1], sys.argv[2].split(",")
PHASE_S = float(os.environ.get("PHASE_S", "15"))
REPLY = int(os.environ.get("REPLY", "64"))
CACHES = "/root/warm-caches"


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def first_minute(client, parallel):
    """Users arriving in phases of growing concurrency; each phase's time to first token."""
    counter, lock, rows = [10 ** 6], threading.Lock(), []
    for streams in [1, 4, 16, parallel]:
        deadline = time.time() + PHASE_S

        def user(_w):
            seen = []
            while time.time() < deadline:
                with lock:
                    i = counter[0]
                    counter[0] += 1
                s = client.stream([{"role": "user", "content": prompts.decode_prompt("prose", i)}], max_tokens=REPLY,
                                  **warm.GREEDY)
                seen.append((s["start"], (s["first"] or s["end"]) - s["start"]))
            return seen

        start = time.time()
        with ThreadPoolExecutor(max_workers=streams) as pool:
            seen = sorted(sum(pool.map(user, range(streams)), []))
        ttfts = [1000 * t for _s, t in seen]
        rows.append({"streams": streams, "requests": len(ttfts), "seconds": round(time.time() - start, 1),
                     "first_ms": round(ttfts[0], 1), "median_ms": round(percentile(ttfts, 0.5), 1),
                     "p90_ms": round(percentile(ttfts, 0.9), 1), "max_ms": round(max(ttfts), 1)})
        served.log("first minute, %d streams: %s" % (streams, json.dumps(rows[-1])))
    return rows


def arm(name, argv, env, model, settings):
    cache = os.path.join(CACHES, "warmed" if name == "restart" else name)
    env = dict(env, XDG_CACHE_HOME=cache, VLLM_CACHE_ROOT=cache + "/vllm", TRITON_CACHE_DIR=cache + "/triton",
               TORCHINDUCTOR_CACHE_DIR=cache + "/torchinductor")
    out = {"arm": name, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(argv),
           "caches": "kept from the warmed arm" if name == "restart" else "fresh"}
    from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client
    proc, logf, out["healthy_after_s"] = served.serve(argv, env, name)
    served.log("%s: healthy after %s s" % (name, out["healthy_after_s"]))
    try:
        client = Client(served.URL, served.KEY, model, timeout=600)
        if name == "warmed":
            result = warm.Warmer(client, reply_tokens=16, budget_s=600, log=served.log).run(
                warm.levels(settings["llm_parallel"]), min(settings["llm_context"] // 2, 8192))
            out["warm_up"] = result
            out["warm_up_line"] = warm.summary(result)
            served.log(out["warm_up_line"])
        out["first_minute"] = first_minute(client, settings["llm_parallel"])
    finally:
        served.stop(proc, logf)
        out["chosen"] = served.chosen(os.path.join(OUT, "vllm-%s.log" % name))
        with open(os.path.join(OUT, "warm-%s.json" % name), "w") as f:
            json.dump(out, f, indent=1)
    return out


def report(paths):
    runs = [json.load(open(p)) for p in paths]
    lines = ["# The first minute of a new vLLM engine, with and without the warm-up before LIVE", "",
             "Burn-in GLM-4.5-Air-shaped folder (8 layers + MTP, FP8), the recipe's rendered command on one H200; "
             "`tests/gpu/warm_before_live.py`. Users in phases of %s s at 1, 4, 16 and llm_parallel streams, "
             "distinct prose prompts, %s-token replies; time to first token in ms." % (PHASE_S, REPLY), ""]
    for r in runs:
        lines.append("- **%s** (%s, caches %s): healthy after %s s%s" % (
            r["arm"], r["date"], r["caches"], r["healthy_after_s"],
            "; " + r["warm_up_line"] if r.get("warm_up_line") else ""))
    lines += ["", "| arm | streams | requests | first | median | p90 | highest |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        for p in r.get("first_minute") or []:
            cells = (r["arm"], p["streams"], p["requests"], p["first_ms"], p["median_ms"], p["p90_ms"], p["max_ms"])
            lines.append("| %s | %d | %d | %s | %s | %s | %s |" % cells)
    return "\n".join(lines) + "\n"


def main():
    if ARMS == ["report"]:
        text = report(sorted(os.path.join(OUT, n) for n in os.listdir(OUT) if n.startswith("warm-") and n.endswith(".json")))
        with open(os.path.join(OUT, "report.md"), "w") as f:
            f.write(text)
        print(text)
        return
    if served.SITE not in sys.path:
        sys.path.append(served.SITE)
    served.make_folder()
    settings = served.settings_recipe()
    with open(os.path.join(served.ROOT, "templates", "vllm.j2")) as f:
        rendered = engines.render(f.read(), engines.command_context(
            settings, {"model_dir": served.FOLDER, "dummy": True}, {"gpu_memory_total_mib": served.gpu_memory_mib()}),
            {"llm_api_key": served.KEY})
    for name in ARMS:
        if name != "restart":
            shutil.rmtree(os.path.join(CACHES, name), ignore_errors=True)
        arm(name, rendered["argv"], rendered["env"], settings["llm_served_model_name"], settings)
    print(report([os.path.join(OUT, "warm-%s.json" % n) for n in ARMS]))


if __name__ == "__main__":
    main()
