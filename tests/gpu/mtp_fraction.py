"""Issue 27 item 4 on a GPU machine with vLLM importable (tests/gpu/RESULTS.md says how to carry it): where MTP
drafting pays. The burn-in folder (GLM-4.5-Air's shapes cut to 2 layers + the MTP layer, bf16) with
dummy_hf_weights' hand-set weights, written with an MTP layer that agrees with its model on a chosen fraction of
one-token drafts (`mtp_agreement`), served with the recipe's rendered vLLM command (templates/vllm.j2, as
bench_recipe_vs_defaults.py serves it) with llm_drafter mtp or off, and measured with bench's decode rows:

    python3 tests/gpu/mtp_fraction.py OUT ARMS [SITE]   # ARMS: comma-separated DRAFTER:AGREEMENT[:K], in order
    python3 tests/gpu/mtp_fraction.py OUT report A.json ...   # OUT/report.md from results-*.json files (no GPU)

    off:0.7      llm_drafter off (the MTP layer is not loaded: the agreement only shapes the reply's tokens)
    mtp:0.5      llm_drafter mtp, num_speculative_tokens as the template renders it (1)
    mtp:0.7:3    the same with num_speculative_tokens 3 (vLLM runs the one MTP layer three times)

DESIGNED_LAYERS (2 unless set; 0: the preset's full depth, 46 + MTP) and DESIGNED_FP8=1 (the weights stage's 128 x 128
block-FP8 quantization; the full depth in bf16, 205.8 GiB, fits no GPU; in FP8, 105.4 GiB, one H200) shape the
folder; DROP (as in bench_recipe_vs_defaults.py) takes flags out of the rendered command.

Each arm: a vLLM process of its own; bench's prose decode rows at CONCURRENCY (1,4,16,40) with REPLY (256)
tokens, end of stream ignored, greedy, a warm-up pass at each row's shape and REPEATS (3) timed passes (median,
min-max range); vLLM's own draft acceptance over each row (its spec_decode counters), beside the acceptance the
written weights give when the drafting is simulated on the CPU (dummy_hf_weights.drafting). BUDGET_S (540): no arm
starts with less than ARM_MIN_S (150) left, no row with less than 25 s; what is left out is listed. Into OUT:
results-*.json (every arm of the call), vllm-trimmed.log (each server's log without progress bars and access lines).
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("CONCURRENCY", "1,4,16,40")
os.environ.setdefault("KINDS", "prose")
sys.path.insert(0, HERE)
import bench_recipe_vs_defaults as served  # noqa: E402  (its serve / stop / folder / recipe helpers)
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf_weights, engines  # noqa: E402

OUT, ARMS = sys.argv[1], sys.argv[2].split(",")
BUDGET_S = float(os.environ.get("BUDGET_S", "540"))
ARM_MIN_S = float(os.environ.get("ARM_MIN_S", "150"))
# The designed folder's depth (0: the preset's full depth) and whether its linears are block FP8 (docstring above)
DESIGNED_LAYERS = int(os.environ.get("DESIGNED_LAYERS", "2"))
DESIGNED_FP8 = os.environ.get("DESIGNED_FP8") == "1"
T0 = time.time()


def left():
    return BUDGET_S - (time.time() - T0)


def parse_arm(text):
    parts = text.split(":")
    drafter, agreement = parts[0], float(parts[1])
    k = int(parts[2]) if len(parts) > 2 else None
    if drafter not in ("mtp", "off") or (k and drafter != "mtp"):
        raise SystemExit("an arm is mtp:AGREEMENT[:K] or off:AGREEMENT, not %r" % text)
    name = "%s-%g" % (drafter, agreement) + ("-k%d" % k if k else "")
    return name, drafter, agreement, k


def simulated(config, agreement, reply_tokens, k):
    """The acceptance the written weights give (the table they were written from), drafting k tokens a step."""
    plan = dummy_hf_weights.mtp_plan(config, 0, agreement, reply_tokens)
    nxt = dummy_hf_weights.bigram(config, 0, plan["tail"]).argmax(axis=1)
    ids, _n = dummy_hf_weights.vocabulary(config)
    accepted, drafted, _tokens = dummy_hf_weights.drafting(
        lambda c: int(nxt[c]), lambda c: int(nxt[plan["redirect"].get(c, c)]), ids["</think>"], reply_tokens, k)
    return round(accepted / float(drafted), 3)


def set_spec_tokens(argv, k):
    out = list(argv)
    i = out.index("--speculative-config")
    spec = json.loads(out[i + 1])
    spec["num_speculative_tokens"] = k
    out[i + 1] = json.dumps(spec)
    return out


def trim_log(src, dest):
    """The server's log without '\r', progress bars, per-request access lines and pip's index warnings."""
    with open(src, errors="replace") as f:
        text = f.read().replace("\r\n", "\n").replace("\r", "\n")
    keep = [line for line in text.split("\n") if line.strip() and "it/s]" not in line and "s/it]" not in line
            and '"POST /v1/' not in line and '"GET /metrics' not in line and '"GET /health' not in line
            and "is ignored: it is neither" not in line and "Route: /" not in line]
    with open(dest, "a") as f:
        f.write("==> %s (%d lines, %d kept)\n" % (os.path.basename(src), text.count("\n"), len(keep)))
        f.write("\n".join(line[:600] for line in keep) + "\n")
    os.remove(src)


def arm(text, results):
    from ansible_collections.gpuserve.llm.plugins.module_utils import bench
    from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client
    name, drafter, agreement, k = parse_arm(text)
    reply = served.BENCH["reply_tokens"]
    fp8 = served.load("roles/weights/defaults/main.yml")["weights_fp8_quantization"] if DESIGNED_FP8 else None
    config = served.write_folder(served.DESIGNED, DESIGNED_LAYERS or None, fp8)
    t = time.time()
    dummy_hf_weights.write(os.path.join(served.DESIGNED, "model.safetensors"), config, mtp_agreement=agreement,
                           mtp_reply_tokens=reply)
    out = {"arm": name, "drafter": drafter, "mtp_agreement": agreement, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                              time.gmtime()),
           "written_s": round(time.time() - t, 1), "skipped": [], "reply_tokens": reply}
    settings = served.settings_recipe()
    settings["llm_drafter"] = drafter
    out["llm_parallel"] = settings["llm_parallel"]
    with open(os.path.join(served.ROOT, "templates", "vllm.j2")) as f:
        rendered = engines.render(f.read(), engines.command_context(
            settings, {"model_dir": served.DESIGNED, "dummy": False}, {"gpu_memory_total_mib": served.gpu_memory_mib()}),
            {"llm_api_key": served.KEY})
    argv = served.drop_flags(rendered["argv"], served.DROP)  # e.g. the KV cap, no room for it beside a full depth
    out["dropped"] = served.DROP
    if drafter == "mtp":
        if k:
            argv = set_spec_tokens(argv, k)
        i = argv.index("--speculative-config")
        out["num_speculative_tokens"] = json.loads(argv[i + 1])["num_speculative_tokens"]
        out["simulated_acceptance"] = simulated(config, agreement, reply, out["num_speculative_tokens"])
    out["command"] = " ".join(argv)
    served.log("%s: serving (%s s left)" % (name, round(left())))
    os.environ["HEALTH_TIMEOUT"] = str(max(60, min(330, left() - 40)))
    proc, logf, out["healthy_after_s"] = served.serve(argv, rendered["env"], name)
    served.log("%s: healthy after %s s" % (name, out["healthy_after_s"]))
    log_path = os.path.join(OUT, "vllm-%s.log" % name)
    out["chosen"] = served.chosen(log_path)
    try:
        client = Client(served.URL, served.KEY, settings["llm_served_model_name"], timeout=600)
        b = bench.Bench(client, served.BENCH, log=served.log)
        b._stream([{"role": "user", "content": "Warm up."}], 8)
        out["decode"] = []
        for n in served.BENCH["concurrency"]:
            for kind in served.BENCH["kinds"]:
                if left() < 25:
                    out["skipped"].append("decode %s x%d" % (kind, n))
                    continue
                row = b.decode(kind, n)
                out["decode"].append(row)
                served.log("%s decode %s x%d: %s tok/s %s, acceptance %s" % (
                    name, kind, n, row["aggregate_tok_s"], row["range"]["aggregate_tok_s"],
                    row["engine"].get("draft_acceptance")))
                save(results)
        out["metrics_tail"] = [line for line in client.metrics().splitlines()
                               if line.startswith(("vllm:spec_decode", "vllm:num_preemptions"))]
    finally:
        served.stop(proc, logf)
        out["chosen"] = served.chosen(log_path) or out.get("chosen")
        trim_log(log_path, os.path.join(OUT, "vllm-trimmed.log"))
        results["arms"].append(out)
        save(results)
    return out


def folder_words():
    """What the designed folder is, as DESIGNED_LAYERS and DESIGNED_FP8 shape it (arm() writes it)."""
    return "GLM-4.5-Air's shapes %s + the MTP layer, %s" % (
        "cut to %d layers" % DESIGNED_LAYERS if DESIGNED_LAYERS else "at full depth, 46 layers",
        "128 x 128 block FP8" if DESIGNED_FP8 else "bf16")


def save(results):
    with open(results["path"], "w") as f:
        json.dump(dict((k, v) for k, v in results.items() if k != "path"), f, indent=1)


def report(paths):
    """One row per MTP arm and concurrency, beside the no-MTP arm of the same results file (the same machine),
    else the fastest no-MTP arm given at that concurrency (marked *). ms a step: 1000 / (per-request tok/s / tokens a step),
    tokens a step = 1 + vLLM's accepted drafts per step (k = 1: 1 + acceptance)."""
    runs = []
    for p in paths:
        with open(p) as f:
            data = json.load(f)
        runs.append((os.path.basename(os.path.dirname(os.path.abspath(p))) or p,
                     [a for a in data["arms"] if not a.get("failed")], data.get("vllm", "0.26.0"),
                     data.get("gpu", "NVIDIA H200"),  # the runs before 2026-12-06 kept neither: H200, 2 layers, bf16
                     data.get("folder", "GLM-4.5-Air's shapes cut to 2 layers + the MTP layer, bf16")))
    arms = [a for _run, found, _v, _g, _f in runs for a in found]
    offs = [dict((r["requests"], r) for r in a["decode"]) for a in arms if a["drafter"] == "off"]
    reply = arms[0]["reply_tokens"]
    repeats = arms[0]["decode"][0]["repeats"] if arms[0].get("decode") else "-"
    lines = ["# Where MTP pays: the recipe with and without MTP at chosen draft agreements", "",
             "vLLM %s on one %s · the burn-in folder (%s) with `dummy_hf_weights`' hand-set weights, the MTP "
             "layer agreeing with its model on the fraction asked (`mtp_agreement`) · `tests/gpu/mtp_fraction.py`."
             % (runs[0][2].replace(".dist", ""), " / ".join(sorted(set(r[3] for r in runs))),
                " / ".join(sorted(set(r[4] for r in runs)))), "",
             "bench's prose decode rows, %s-token replies (end of stream ignored), greedy; a warm-up pass at each "
             "row's shape, then %s timed passes: medians, (lowest-highest) beside. Acceptance: vLLM's own (accepted / "
             "drafted tokens over the row's passes) and what the written weights give drafting on the CPU "
             "(`dummy_hf_weights.drafting`)." % (reply, repeats), ""]
    for run, found, _v, _g, _f in runs:
        for a in found:
            lines.append("- %s **%s** (%s): healthy in %s s%s" % (
                run, a["arm"], a["date"], a["healthy_after_s"],
                "; left out: " + ", ".join(a["skipped"]) if a.get("skipped") else ""))

    def cell(row, key):
        v = row.get(key) if row else None
        span = (row.get("range") or {}).get(key) if row else None
        if v is None:
            return "-"
        return "{:,}".format(v) + (" (%s-%s)" % ("{:,}".format(span[0]), "{:,}".format(span[1]))
                                   if span and span[0] != span[1] else "")

    def pooled(n):
        rows = [o[n] for o in offs if n in o]
        if not rows:
            return None
        return dict(max(rows, key=lambda r: r["aggregate_tok_s"]), star=True)

    lines += ["", "| agreement | k | run | requests | MTP tok/s | without MTP tok/s | ratio | per request: MTP / "
              "without | ratio | ms a step: MTP / without | acceptance vLLM / simulated |",
              "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = sorted(((a.get("num_speculative_tokens") or 1, a["mtp_agreement"], run, a) for run, found, *_rest in runs
                    for a in found if a["drafter"] == "mtp"), key=lambda t: t[:3])
    for k, agreement, run, a in order:
        own = [dict((r["requests"], r) for r in b["decode"]) for b in dict(
            (x[0], x[1]) for x in runs)[run] if b["drafter"] == "off"]
        for row in a.get("decode") or []:
            n = row["requests"]
            b = own[0].get(n) if own else pooled(n)
            star = "*" if b and b.get("star") else ""
            acc = row["engine"].get("draft_acceptance")
            mtp_step = 1000.0 * (1 + (acc or 0) * k) / row["per_request_tok_s"] if row.get("per_request_tok_s") else None
            off_step = 1000.0 / b["per_request_tok_s"] if b and b.get("per_request_tok_s") else None
            lines.append("| %g | %d | %s | %d | %s | %s%s | %s | %s / %s%s | %s | %s / %s | %s / %s |" % (
                agreement, k, run, n, cell(row, "aggregate_tok_s"), cell(b, "aggregate_tok_s"), star,
                "%.2f" % (row["aggregate_tok_s"] / b["aggregate_tok_s"]) if b else "-",
                fmt1(row.get("per_request_tok_s")), fmt1(b.get("per_request_tok_s") if b else None), star,
                "%.2f" % (row["per_request_tok_s"] / b["per_request_tok_s"]) if b and b.get("per_request_tok_s")
                and row.get("per_request_tok_s") else "-",
                fmt1(mtp_step), fmt1(off_step), "-" if acc is None else acc, a.get("simulated_acceptance", "-")))
    return "\n".join(lines) + "\n"


def fmt1(v):
    return "-" if v is None else "{:,.1f}".format(v)


def main():
    if ARMS == ["report"]:
        text = report(sys.argv[3:])
        with open(os.path.join(OUT, "report.md"), "w") as f:
            f.write(text)
        print(text)
        return
    os.makedirs(OUT, exist_ok=True)
    if served.SITE not in sys.path:
        sys.path.append(served.SITE)
    import glob
    version = [os.path.basename(d).split("-")[1] for d in glob.glob(os.path.join(served.SITE, "vllm-*.dist-info"))]
    import pynvml
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    results = {"path": os.path.join(OUT, "results-%s.json" % time.strftime("%H%M%S")), "arms": [],
               "vllm": version[0] if version else "?", "bench": served.BENCH, "budget_s": BUDGET_S, "skipped_arms": [],
               "gpu": gpu.decode() if isinstance(gpu, bytes) else gpu, "folder": folder_words()}
    for text in ARMS:
        if left() < ARM_MIN_S:
            results["skipped_arms"].append(text)
            served.log("%s: left out, %d s left" % (text, left()))
            continue
        try:
            arm(text, results)
        except SystemExit as e:  # a server that did not come up: the next arm still runs
            served.log("%s: %s" % (text, e))
            results["arms"].append({"arm": text, "failed": str(e)})
            raw = os.path.join(OUT, "vllm-%s.log" % parse_arm(text)[0])
            if os.path.exists(raw):
                trim_log(raw, os.path.join(OUT, "vllm-trimmed.log"))
        save(results)
    for a in results["arms"]:
        a.setdefault("vllm", results["vllm"])
    save(results)
    ok = [a for a in results["arms"] if not a.get("failed")]
    if ok:
        print(report([results["path"]]))


if __name__ == "__main__":
    main()
