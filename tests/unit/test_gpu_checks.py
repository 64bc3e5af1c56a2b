"""GPU preflight checks against replayed NVML readings: one scenario per finding code."""
import ctypes
import importlib.util
import json
import os

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import nvml_checks

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(TESTS, "nvml_scenarios")
REAL = os.path.join(TESTS, "fixtures", "h200x2-nvml-probe.json")
RECIPE = dict(gpus=[0, 1, 2, 3], min_free_mib=90000, expected_power_w=250, min_cuda_version="12.8")


@pytest.fixture
def replay(monkeypatch):
    """Load a fresh copy of the pynvml test double reading the given scenario file."""
    def load(path):
        monkeypatch.setenv("NVML_REPLAY_SCENARIO", path)
        spec = importlib.util.spec_from_file_location("pynvml_double", os.path.join(TESTS, "nvml_double", "pynvml.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load


def run(replay, scenario, **overrides):
    params = dict(RECIPE, **overrides)
    path = scenario if os.path.isabs(scenario) else os.path.join(SCENARIOS, scenario)
    return nvml_checks.run_checks(replay(path), **params)


def codes(findings):
    return sorted((f["code"], f["subject"]) for f in findings)


@pytest.mark.parametrize("scenario, expected", [
    ("rtxpro6000x4-healthy.json", []),
    ("e_gpu_busy.json", [("E_GPU_BUSY", "GPU 0")]),
    ("e_p2p.json", [("E_P2P", "GPU pair 1->2"), ("E_P2P", "GPU pair 2->1")]),
    ("e_gpu_memory.json", [("E_GPU_MEMORY", "GPU 2")]),
    ("w_power.json", [("W_POWER", "GPU %d" % i) for i in range(4)]),
    ("e_gpu_count.json", [("E_GPU_COUNT", "gpus 2,3")]),
    ("e_gpu_count_none.json", [("E_GPU_COUNT", "gpus 0,1,2,3")]),
    ("e_gpu_arch.json", [("E_GPU_ARCH", "GPU %d" % i) for i in range(4)]),
    ("e_driver_cuda.json", [("E_DRIVER_CUDA", "driver 535.183.01")]),
    ("e_gpu_health.json", [("E_GPU_HEALTH", "GPU 1"), ("E_GPU_HEALTH", "GPU 3")]),
    ("e_gpu_health_retired.json", [("E_GPU_HEALTH", "GPU 0")]),
    ("e_mig.json", [("E_MIG", "GPU 0")]),
    ("e_nvml.json", [("E_NVML", "nvml")]),
    ("w_pcie_link.json", [("W_PCIE_LINK", "GPU 3")]),
    ("w_p2p_unknown.json", [("W_P2P_UNKNOWN", "GPU pair 0->3"), ("W_P2P_UNKNOWN", "GPU pair 0->3")]),
    ("w_p2p_unknown_every_pair.json", [("W_P2P_UNKNOWN", "all 12 GPU pairs")]),
])
def test_each_scenario_gives_exactly_its_codes(replay, scenario, expected):
    _facts, findings = run(replay, scenario)
    assert codes(findings) == sorted(expected)
    for f in findings:
        assert f["fix"] and f["message"] and f["severity"] in ("error", "warning")


def test_every_gpu_code_has_a_scenario():
    gpu_codes = {"E_NVML", "E_GPU_COUNT", "E_GPU_ARCH", "E_DRIVER_CUDA", "E_GPU_HEALTH", "E_MIG",
                 "E_GPU_MEMORY", "E_GPU_BUSY", "E_P2P", "W_POWER", "W_PCIE_LINK", "W_P2P_UNKNOWN"}
    stems = [f.split(".")[0].upper() for f in os.listdir(SCENARIOS)]
    assert [c for c in sorted(gpu_codes) if not any(s.startswith(c) for s in stems)] == []


def test_real_h200_reading_two_gpus_p2p_ok_both_ways(replay):
    facts, findings = run(replay, REAL, gpus=[0, 1], expected_power_w=700)
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert facts["driver_version"] == "580.159.04" and facts["cuda_driver_version"] == "13.0"
    pairs = {p["pair"]: p for p in facts["p2p"]}
    assert sorted(pairs) == ["0-1", "1-0"]
    for pair in pairs.values():
        assert pair["peer_access"] == "ok"
        assert pair["caps"]["write"] == "OK" and pair["caps"]["pci"] == "NOT_SUPPORTED"
        assert "ArgumentError" in pair["caps"]["read"]["error"]
        assert pair["topology"] == "HOSTBRIDGE"
    # The READ query raised on every pair of that host: one warning naming the capability, never E_P2P.
    assert codes(findings) == [("W_P2P_UNKNOWN", "all 2 GPU pairs")]
    assert findings[0]["details"]["capability"] == "read" and findings[0]["details"]["pairs"] == ["0-1", "1-0"]
    assert findings[0]["message"].startswith("NVML could not answer the read peer-access query on any of the 2 GPU "
                                             "pairs (ArgumentError: ")
    assert findings[0]["message"].endswith("; the write query answered OK on every pair")
    gpu0 = facts["gpus"][0]
    assert gpu0["memory_total_mib"] == 143771 and gpu0["power_limit_w"] == 700.0
    assert gpu0["compute_capability"] == "9.0" and gpu0["pcie_width_max"] is None


def test_real_h200_reading_warns_power_at_250_not_at_700(replay):
    at_250 = run(replay, REAL, gpus=[0, 1], expected_power_w=250)[1]
    at_700 = run(replay, REAL, gpus=[0, 1], expected_power_w=700)[1]
    assert [f["subject"] for f in at_250 if f["code"] == "W_POWER"] == ["GPU 0", "GPU 1"]
    assert "700 W" in at_250[0]["message"] or any("700 W" in f["message"] for f in at_250)
    assert not [f for f in at_700 if f["code"] == "W_POWER"]


def test_real_h200_busy_reading_names_pid_and_mib(replay, tmp_path):
    reading = json.load(open(REAL))
    busy = reading["busy"]
    reading["devices"][0]["memory"] = busy["gpu0_memory"]
    reading["devices"][0]["procs"] = busy["gpu0_procs"]
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(reading))
    findings = run(replay, str(path), gpus=[0, 1], expected_power_w=700, min_free_mib=140000)[1]
    busy_f = [f for f in findings if f["code"] == "E_GPU_BUSY"]
    assert len(busy_f) == 1 and busy_f[0]["subject"] == "GPU 0"
    assert busy_f[0]["details"]["processes"] == [{"pid": 600, "used_mib": 10850}]
    assert "pid 600 (10850 MiB)" in busy_f[0]["message"]
    mem = [f for f in findings if f["code"] == "E_GPU_MEMORY"]
    assert [f["subject"] for f in mem] == ["GPU 0"] and mem[0]["details"]["free_mib"] == 132297


def test_only_selected_gpus_are_judged(replay):
    facts, findings = run(replay, "e_mig.json", gpus=[1, 2, 3])
    assert findings == []
    assert [g["selected"] for g in facts["gpus"]] == [False, True, True, True]
    assert len(facts["p2p"]) == 6


def test_all_twelve_ordered_pairs_of_four_gpus(replay):
    facts = run(replay, "rtxpro6000x4-healthy.json")[0]
    assert sorted(p["pair"] for p in facts["p2p"]) == sorted(
        "%d-%d" % (a, b) for a in range(4) for b in range(4) if a != b)
    assert all(p["peer_access"] == "ok" for p in facts["p2p"])


def test_binding_tuple_constant_is_not_passed_to_nvml(replay):
    """nvidia-ml-py 13.610.43's READ index is (0,); passing it raises ArgumentError."""
    nvml = replay(os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json"))
    nvml.nvmlInit()
    h0, h1 = nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError):
        nvml.nvmlDeviceGetP2PStatus(h0, h1, nvml.NVML_P2P_CAPS_INDEX_READ)
    facts, findings = run(replay, "rtxpro6000x4-healthy.json")
    assert facts["p2p"][0]["caps"]["read"] == "OK" and findings == []


def test_no_driver_library_is_e_nvml_not_a_traceback(replay, tmp_path):
    facts, findings = run(replay, str(tmp_path / "absent.json"))
    assert codes(findings) == [("E_NVML", "nvml")]
    assert "NVML Shared Library Not Found" in findings[0]["message"]
    assert facts["gpus"] == []


def test_any_exception_from_a_call_is_recorded_not_raised(replay):
    nvml = replay(os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json"))

    def broken(handle):
        raise RuntimeError("binding exploded")
    nvml.nvmlDeviceGetMemoryInfo = broken
    del nvml.nvmlDeviceGetRemappedRows  # an older binding without the call
    facts, findings = nvml_checks.run_checks(nvml, [0, 1], 90000, 250)
    assert findings == []
    calls = {u["call"] for u in facts["nvml_unanswered"]}
    assert {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetRemappedRows"} <= calls
    assert "memory_free_mib" not in facts["gpus"][0]


def test_own_engine_processes_are_not_busy(replay, tmp_path):
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/system.slice/docker-abc123def456.scope\n")
    findings = run(replay, "e_gpu_busy.json", own_container_ids=["abc123def456"],
                   proc_root=str(tmp_path / "proc"))[1]
    assert findings == []
    findings = run(replay, "e_gpu_busy.json", own_container_ids=["ffff"], proc_root=str(tmp_path / "proc"))[1]
    assert codes(findings) == [("E_GPU_BUSY", "GPU 0")]


def test_cuda_version_forms():
    assert nvml_checks.cuda_version_int("12.8") == 12080
    assert nvml_checks.cuda_version_int("13") == 13000
    assert nvml_checks.cuda_version_text(12090) == "12.9"


def test_a_query_no_pair_answers_is_one_warning_and_the_probes_not_supported_stays_not_supported(replay):
    facts, findings = run(replay, "w_p2p_unknown_every_pair.json")
    assert len(facts["p2p"]) == 12 and all(p["peer_access"] == "ok" for p in facts["p2p"])
    assert all(p["caps"]["read"] == {"error": "NVMLError_NotSupported: Not Supported"} for p in facts["p2p"])
    assert [f["message"] for f in findings] == [
        "NVML could not answer the read peer-access query on any of the 12 GPU pairs "
        "(NVMLError_NotSupported: Not Supported); the write query answered OK on every pair"]
    # Unanswered on some pairs only: a warning per pair and capability, as before.
    _facts, some = run(replay, "w_p2p_unknown.json")
    assert [(f["subject"], f["details"]["capability"]) for f in some] == [("GPU pair 0->3", "read"),
                                                                          ("GPU pair 0->3", "write")]
