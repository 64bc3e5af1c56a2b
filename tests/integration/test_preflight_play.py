"""`ansible-playbook site.yml --tags preflight` on a fleet of local hosts with replayed GPUs."""
import glob
import os
import re
import socket


def test_each_host_gets_its_codes_and_only_the_faulty_host_stops(fleet):
    fleet.host("healthy", "rtxpro6000x4-healthy.json")
    fleet.host("busy", "e_gpu_busy.json")
    fleet.host("hot", "w_power.json")
    fleet.host("split", "e_p2p.json")
    fleet.host("full", "e_gpu_memory.json")
    result = fleet.run("site.yml", "--tags", "preflight")
    assert result.rc == 2, result
    assert result.codes("healthy") == []
    assert result.codes("busy") == ["E_GPU_BUSY"]
    assert result.codes("hot") == ["W_POWER"] * 4
    assert result.codes("split") == ["E_P2P", "E_P2P"]
    assert result.codes("full") == ["E_GPU_MEMORY"]
    # Errors stop their host; warnings do not.
    assert {h: r["failed"] for h, r in result.recap.items() if h != "localhost"} == {
        "healthy": 0, "busy": 1, "hot": 0, "split": 1, "full": 1}, result
    # The fleet table on the workstation, and each finding with its fix.
    assert "busy     ERROR   hub      E_GPU_BUSY" in result.output, result
    assert "hot      WARN    hub      W_POWER x4" in result.output, result
    assert "healthy  OK      hub      -" in result.output, result
    assert "E_GPU_BUSY [error] busy GPU 0" in result.output
    assert "pid 4242 (2000 MiB)" in result.output
    # Facts come back with the findings: GPUs and the pair matrix.
    facts = result.report()["split"]["facts"]
    assert len(facts["gpus"]) == 4 and len(facts["p2p"]) == 12
    assert {p["pair"] for p in facts["p2p"] if p["peer_access"] == "not_ok"} == {"1-2", "2-1"}


def test_second_run_changes_nothing(fleet):
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", fresh=True)
    first = fleet.run("site.yml", "--tags", "preflight")
    assert first.rc == 0 and first.recap["gpu1"]["changed"] > 0, first
    second = fleet.run("site.yml", "--tags", "preflight")
    assert second.rc == 0, second
    assert second.recap["gpu1"]["changed"] == 0 and second.recap["localhost"]["changed"] == 0, second


def test_check_mode_runs_every_probe_and_changes_nothing(fleet):
    venv = fleet.host("fresh", "e_mig.json", fresh=True)
    before = set(os.listdir(str(venv)))
    leftovers = set(glob.glob("/tmp/gpuserve-check-*"))
    # The throwaway virtualenv has no scenario of its own: point the double at the host's.
    result = fleet.run("site.yml", "--tags", "preflight", "--check",
                       NVML_REPLAY_SCENARIO=str(venv / "nvml-replay.json"))
    assert result.rc == 2, result
    # The GPU checks ran (through a throwaway virtualenv) and found the fault, with every GPU and pair read...
    assert result.codes("fresh") == ["E_MIG"]
    facts = result.report()["fresh"]["facts"]
    assert len(facts["gpus"]) == 4 and len(facts["p2p"]) == 12, facts
    # ...while the host is as it was: no virtualenv, no wheelhouse, no temporary folders left.
    assert set(os.listdir(str(venv))) == before
    assert not os.path.exists(str(fleet.dir / "fresh" / "wheelhouse"))
    assert set(glob.glob("/tmp/gpuserve-check-*")) == leftovers
    # And it said what a real run would change.
    assert "changed: [fresh]" in result.output


def test_cpu_profile_no_driver_and_no_venv_each_say_so(fleet):
    fleet.host("cpu", None, llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=False, llm_dense="q4",
               llm_model_dense="q4", llm_reserve_gib=0, llm_kv_cap_gib=0, llm_drafter="off")
    fleet.host("nodriver", "e_no_driver.json")
    fleet.host("mismatch", "e_nvml_version_mismatch.json")
    fleet.host("novenv", "rtxpro6000x4-healthy.json", host_venv_python="/nonexistent/python3", fresh=True)
    fleet.host("fine", "rtxpro6000x4-healthy.json")
    result = fleet.run("site.yml", "--tags", "preflight")
    assert result.rc == 2, result
    # A CPU profile skips the GPU checks and says so; it passes.
    assert result.codes("cpu") == ["I_GPU_CHECKS_SKIPPED"]
    assert result.report()["cpu"]["facts"]["gpus"] == []
    # No NVIDIA driver at all: E_NO_DRIVER naming the package; one there that does not answer: E_NVML. Never a
    # traceback.
    assert result.codes("nodriver") == ["E_NO_DRIVER"]
    assert "NVML Shared Library Not Found" in result.output
    assert result.codes("mismatch") == ["E_NVML"]
    # No virtualenv possible: E_VENV naming the interpreter.
    assert result.codes("novenv") == ["E_VENV"]
    assert "/nonexistent/python3 cannot make a virtualenv" in result.report()["novenv"]["findings"][0]["message"]
    # The GPU profile passes on the test bed's daemon, whose `nvidia` runtime is runc (a test double).
    assert result.codes("fine") == []
    assert "nvidia" in result.report()["fine"]["facts"]["docker_runtimes"]
    assert {h: r["failed"] for h, r in result.recap.items() if h != "localhost"} == {
        "cpu": 0, "nodriver": 1, "mismatch": 1, "novenv": 1, "fine": 0}, result


def test_bad_settings_stop_their_host_before_anything_changes(fleet):
    typo = fleet.host("typo", "rtxpro6000x4-healthy.json", fresh=True, llm_gpus="zero")
    long = fleet.host("long", "rtxpro6000x4-healthy.json", fresh=True, llm_context=1048576)
    sglang = fleet.host("sglang", "rtxpro6000x4-healthy.json", fresh=True, llm_engine="sglang", llm_kv_cap_gib=0,
                        llm_thinking=True)
    fleet.host("fine", "rtxpro6000x4-healthy.json", llm_paralel=8)
    fleet.host("keyed", "rtxpro6000x4-healthy.json", llm_api_key=["sk-TOPSECRET-123"])
    # a role's knobs are settings too: refused with the same codes, before the virtualenv
    watts = fleet.host("watts", "rtxpro6000x4-healthy.json", fresh=True, preflight_expected_power_w="250W",
                       preflight_min_free_mib=-1)
    # a host that fails for another reason (here: unreachable) is never reported OK
    fleet.host("gone", None, ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=1)
    result = fleet.run("site.yml", "--tags", "preflight", "-v")
    assert result.rc == 2 or result.rc == 4, result
    assert result.codes("watts") == ["E_CONFIG", "E_CONFIG"]
    assert "preflight_expected_power_w is '250W'; allowed: a number" in " ".join(result.output.split())
    assert "preflight_min_free_mib is -1; allowed: 0 or more" in " ".join(result.output.split())
    assert not os.path.exists(str(watts / "bin" / "python"))
    report = result.report()
    assert report["watts"]["status"] == "ERROR" and report["gone"]["status"] == "FAILED", report["gone"]
    assert re.search(r"^\s*- gone +FAILED +hub +-$", result.output, re.M), result
    assert result.codes("typo") == ["E_CONFIG"]
    assert result.codes("long") == ["E_CONTEXT"]
    assert result.codes("sglang") == ["E_UNSUPPORTED"]
    assert result.codes("fine") == ["W_UNKNOWN_SETTING"]
    assert "E_CONFIG [error] typo llm_gpus: llm_gpus is 'zero'; allowed: a list of int" in result.output
    assert "llm_media_urls: any" in result.output  # the alternative is named
    # Nothing changed on the refused hosts: no virtualenv was made.
    for venv in (typo, long, sglang):
        assert not os.path.exists(str(venv / "bin" / "python"))
    assert result.recap["fine"]["failed"] == 0
    assert all(result.recap[h]["failed"] == 1 for h in ("typo", "long", "sglang")), result
    # A secret value never shows, even at -v, in the output or the report.
    assert result.codes("keyed") == ["E_CONFIG"]
    assert "sk-TOPSECRET-123" not in result.output
    with open(os.path.join(str(fleet.dir), "reports", "preflight.json")) as f:
        assert "sk-TOPSECRET-123" not in f.read()


def test_host_faults_each_give_their_code(fleet):
    fleet.host("acs", "rtxpro6000x4-healthy.json", acs={1: 0x001D})
    fleet.host("iommu", "rtxpro6000x4-healthy.json", iommu="DMA-FQ")
    fleet.host("disk", "rtxpro6000x4-healthy.json", preflight_disk_checkpoint_gib=10 ** 6)
    fleet.host("nodocker", "rtxpro6000x4-healthy.json", llm_docker_host="unix:///nonexistent/docker.sock")
    busy_port = socket.socket()
    # Not the kernel's pick (32768 and up): the engine's port is llm_port + 10000, and above 65535 is E_CONFIG.
    for candidate in range(18090, 18190):
        try:
            busy_port.bind(("127.0.0.1", candidate))
            break
        except OSError:
            continue
    busy_port.listen(1)
    try:
        fleet.host("port", "rtxpro6000x4-healthy.json", llm_port=busy_port.getsockname()[1])
        result = fleet.run("site.yml", "--tags", "preflight")
    finally:
        busy_port.close()
    assert result.codes("acs") == ["E_ACS"]
    assert "bridge 0000:00:02.0" in result.output
    assert result.codes("iommu") == ["W_IOMMU"] * 4
    assert result.codes("disk") == ["E_DISK"]
    assert result.codes("nodocker") == ["E_DOCKER"]
    assert result.codes("port") == ["E_PORT_BUSY"]
    disk = result.report()["disk"]["facts"]["disk"]
    assert any(item["what"] == "checkpoint + drafter" for fs in disk for item in fs["items"])
