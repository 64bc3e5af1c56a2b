"""`ansible-playbook site.yml --tags preflight` on a fleet of local hosts with replayed GPUs."""
import glob
import os


def test_each_host_gets_its_codes_and_only_the_faulty_host_stops(fleet):
    fleet.host("healthy", "rtxpro6000x4-healthy.json")
    fleet.host("busy", "e_gpu_busy.json")
    fleet.host("hot", "w_power.json")
    fleet.host("split", "e_p2p.json")
    result = fleet.run("site.yml", "--tags", "preflight")
    assert result.rc == 2, result
    assert result.codes("healthy") == []
    assert result.codes("busy") == ["E_GPU_BUSY"]
    assert result.codes("hot") == ["W_POWER"] * 4
    assert result.codes("split") == ["E_P2P", "E_P2P"]
    # Errors stop their host; warnings do not.
    assert {h: r["failed"] for h, r in result.recap.items() if h != "localhost"} == {
        "healthy": 0, "busy": 1, "hot": 0, "split": 1}, result
    # The fleet table on the workstation, and each finding with its fix.
    assert "busy     ERROR   E_GPU_BUSY" in result.output, result
    assert "hot      WARN    W_POWER x4" in result.output, result
    assert "healthy  OK      -" in result.output, result
    assert "E_GPU_BUSY [error] busy GPU 0" in result.output
    assert "pid 4242 (2000 MiB)" in result.output
    # Facts come back with the findings: GPUs and the pair matrix.
    facts = result.report()["split"]["facts"]
    assert len(facts["gpus"]) == 4 and len(facts["p2p"]) == 12
    assert {p["pair"] for p in facts["p2p"] if p["peer_access"] == "not_ok"} == {"1-2", "2-1"}


def test_second_run_changes_nothing(fleet):
    fleet.host("gpu1", "rtxpro6000x4-healthy.json")
    first = fleet.run("site.yml", "--tags", "preflight")
    assert first.rc == 0 and first.recap["gpu1"]["changed"] > 0, first
    second = fleet.run("site.yml", "--tags", "preflight")
    assert second.rc == 0, second
    assert second.recap["gpu1"]["changed"] == 0 and second.recap["localhost"]["changed"] == 0, second


def test_check_mode_runs_every_probe_and_changes_nothing(fleet):
    venv = fleet.host("fresh", "e_mig.json")
    before = set(os.listdir(str(venv)))
    leftovers = set(glob.glob("/tmp/gpuserve-check-*"))
    # The throwaway virtualenv has no scenario of its own: point the double at the host's.
    result = fleet.run("site.yml", "--tags", "preflight", "--check",
                       NVML_REPLAY_SCENARIO=str(venv / "nvml-replay.json"))
    assert result.rc == 2, result
    # The GPU checks ran (through a throwaway virtualenv) and found the fault...
    assert result.codes("fresh") == ["E_MIG"]
    # ...while the host is as it was: no virtualenv, no wheelhouse, no temporary folders left.
    assert set(os.listdir(str(venv))) == before
    assert not os.path.exists(str(fleet.dir / "fresh" / "wheelhouse"))
    assert set(glob.glob("/tmp/gpuserve-check-*")) == leftovers
    # And it said what a real run would change.
    assert "changed: [fresh]" in result.output


def test_cpu_profile_skips_gpu_checks_and_says_so(fleet):
    fleet.host("cpu", None, llm_engine="llamacpp", llm_gpus=[])
    result = fleet.run("site.yml", "--tags", "preflight")
    assert result.rc == 0, result
    assert result.codes("cpu") == ["I_GPU_CHECKS_SKIPPED"]
    assert result.report()["cpu"]["facts"]["gpus"] == []


def test_host_without_nvidia_driver_is_e_nvml(fleet):
    fleet.host("nodriver", None)
    result = fleet.run("site.yml", "--tags", "preflight")
    assert result.rc == 2, result
    assert result.codes("nodriver") == ["E_NVML"]
    assert "NVML Shared Library Not Found" in result.output


def test_host_that_cannot_make_a_virtualenv_is_e_venv(fleet):
    fleet.host("novenv", "rtxpro6000x4-healthy.json", host_venv_python="/nonexistent/python3")
    fleet.host("fine", "rtxpro6000x4-healthy.json")
    result = fleet.run("site.yml", "--tags", "preflight")
    assert result.rc == 2, result
    assert result.codes("novenv") == ["E_VENV"]
    assert "/nonexistent/python3 cannot make a virtualenv" in result.report()["novenv"]["findings"][0]["message"]
    assert result.codes("fine") == []
    assert result.recap["fine"]["failed"] == 0 and result.recap["novenv"]["failed"] == 1, result


def test_wrong_setting_type_stops_before_anything_changes(fleet):
    venv = fleet.host("typo", "rtxpro6000x4-healthy.json", llm_gpus="zero")
    result = fleet.run("site.yml", "--tags", "preflight")
    assert result.rc != 0, result
    assert "llm_gpus" in result.output
    assert not os.path.exists(str(venv / "bin" / "python"))
