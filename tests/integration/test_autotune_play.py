"""The autotune stage for llama.cpp for real: llama-bench over a grid of threads and batch sizes in
Debian's llama.cpp image on the test bed's daemon, the fastest fed to llama-server. A stamp only when
every grid point was measured; a rerun is a cache hit; autotune_force tunes again; a second host with
the same key takes the first one's result; a tune killed midway leaves no stamp and says E_AUTOTUNE
with the log's end; the serving engine is never tuned beside."""
import json
import os
import time

import pytest

from conftest import docker

CPU = dict(llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=False, llm_dense="q4", llm_model_dense="q4",
           llm_reserve_gib=0, llm_kv_cap_gib=0, llm_weights="dummy", llm_model="gpuserve/tiny-llama-dummy",
           llm_model_max_context=8192, llm_context=2048, llm_max_tokens=256, llm_parallel=4, llm_drafter="off",
           llm_host="127.0.0.1", llm_served_model_name="tiny",
           # A small grid: 2 generation runs and 8 prompt runs of a 5.6 MB model.
           autotune_llamacpp_threads=[1, 2], autotune_llamacpp_batch_sizes=[64, 256],
           autotune_llamacpp_ubatch_sizes=[32, 64], autotune_llamacpp_n_prompt=64, autotune_llamacpp_n_gen=16,
           autotune_llamacpp_repetitions=2, autotune_progress_interval=1)


def stamps(fleet, name):
    root = fleet.dir / name / "data" / "cache" / "autotune" / "llamacpp"
    found = list(root.glob("*/gpuserve-autotune.json")) if root.exists() else []
    return [json.loads(p.read_text()) for p in found]


@pytest.fixture
def hosts(fleet, docker_host, tmp_path):
    prefix = "gpuserve-test-tune-%d" % os.getpid()
    cache = os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(tmp_path / "images"))

    def add(name, port, **extra):
        fleet.host(name, None, llm_port=port, llm_container_name="%s-%s" % (prefix, name), image_debian_cache=cache,
                   **dict(CPU, **extra))
    yield fleet, add, prefix
    out = docker(docker_host, "ps", "-aq", "--filter", "name=" + prefix).stdout.split()
    for cid in out:
        docker(docker_host, "rm", "-f", cid, check=False)


def test_a_killed_tune_leaves_no_stamp_then_the_fleet_tunes_once_hits_its_cache_retunes_serves_it(hosts, docker_host):
    """One fleet for the stage's whole story (two hosts with the same key): t1's tune killed midway, then
    one tune for both, a rerun's cache hit, a forced retune, t1 serving on the choice, and no tune beside it."""
    fleet, add, prefix = hosts
    add("t1", 18150, autotune_llamacpp_repetitions=200)
    add("t2", 18151)
    run = fleet.start("site.yml", "--tags", "autotune", "--limit", "t1")
    tuner = "%s-t1-autotune" % prefix
    deadline = time.time() + 300
    while time.time() < deadline:
        if docker(docker_host, "ps", "-q", "--filter", "name=" + tuner, "--filter", "status=running").stdout.strip():
            break
        time.sleep(0.5)
    time.sleep(2)
    docker(docker_host, "kill", tuner)
    killed = fleet.finish(run)
    assert killed.rc != 0
    assert killed.says("E_AUTOTUNE") and killed.says("the tuner exited 137"), killed
    assert killed.says("nothing is marked ready") and killed.says("its log ends"), killed
    assert stamps(fleet, "t1") == []

    fleet.hosts["t1"]["autotune_llamacpp_repetitions"] = 2
    first = fleet.run("site.yml", "--tags", "autotune")
    assert first.rc == 0, first
    [s1], [s2] = stamps(fleet, "t1"), stamps(fleet, "t2")
    assert s1["key"] == s2["key"] and s1["tuned_on"] == s2["tuned_on"] == "t1"
    assert s1["choice"] == s2["choice"] and s1["files"] == s2["files"]
    assert s1["choice"]["threads"] in (1, 2) and s1["choice"]["batch_size"] in (64, 256)
    assert first.says("item=t1 tuning llamacpp %s" % s1["key"]), first
    assert "item=t2 tuning" not in first.output  # one tune for both
    assert first.says("takes %s from t1" % s1["key"]), first

    again = fleet.run("site.yml", "--tags", "autotune")
    assert again.rc == 0 and all(r["changed"] == 0 for r in again.recap.values()), again
    assert again.says("tuned before: %s - threads=" % s1["key"]), again
    assert stamps(fleet, "t1") == [s1]

    forced = fleet.run("site.yml", "--tags", "autotune", "-e", "autotune_force=true")
    assert forced.rc == 0, forced
    [f1], [f2] = stamps(fleet, "t1"), stamps(fleet, "t2")
    assert f1["completed"] >= s1["completed"] and f1["key"] == s1["key"]
    assert forced.says("item=t1 tuning llamacpp"), forced
    assert f2["files"] == f1["files"]

    served = fleet.run("site.yml", "--limit", "t1")
    assert served.rc == 0, served
    [stamp] = stamps(fleet, "t1")
    choice = stamp["choice"]
    name = docker(docker_host, "ps", "--filter", "label=gpuserve.llm.service=%s-t1" % prefix,
                  "--format", "{{.Names}}").stdout.split()[0]
    args = json.loads(docker(docker_host, "inspect", name).stdout)[0]["Args"]
    for flag, value in (("--threads", "threads"), ("--threads-batch", "threads_batch"), ("--batch-size", "batch_size"),
                        ("--ubatch-size", "ubatch_size")):
        assert args[args.index(flag) + 1] == str(choice[value]), (flag, args)

    busy = fleet.run("site.yml", "--tags", "autotune", "--limit", "t1", "-e", "autotune_force=true")
    assert busy.rc == 0 and busy.says("W_AUTOTUNE_SKIPPED"), busy
    assert busy.says("is due but the engine serves on what it measures"), busy
    assert stamps(fleet, "t1") == [stamp]  # nothing tuned beside the engine; the old result stays
