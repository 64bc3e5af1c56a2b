"""bench's memory-bandwidth bound: NVML's bandwidth, the bytes a token reads, and the module's answer."""
import importlib
import json
import os
import sys

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils import bound, dummy_gguf, dummy_hf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "h200x2-nvml-probe.json")
# What an H200 answered (tests/gpu/h200-warm-2026-12-01/nvml-memory.json); the probe fixture lacks it.
H200_MEMORY = {"memory_bus_width_bits": 6016, "max_memory_clock_mhz": 3201}


@pytest.fixture
def nvml(tmp_path, monkeypatch):
    """The NVML double over the two-H200 reading, with or without the memory keys."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "nvml_double"))
    try:
        double = importlib.import_module("pynvml")
    finally:
        sys.path.pop(0)

    def scenario(memory=True):
        data = json.load(open(FIXTURE))
        if memory:
            for device in data["devices"]:
                device.update(H200_MEMORY)
        path = tmp_path / "nvml.json"
        path.write_text(json.dumps(data))
        monkeypatch.setenv("NVML_REPLAY_SCENARIO", str(path))
        return double
    return scenario


def glm_config(layers):
    """The burn-in GLM-4.6V-FP8 text shape as the GPU runs wrote it (dummy_hf, the weights stage's FP8 settings)."""
    with open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")) as f:
        template = f.read()
    with open(os.path.join(ROOT, "roles", "weights", "defaults", "main.yml")) as f:
        fp8 = yaml.safe_load(f)["weights_fp8_quantization"]
    return json.loads(dummy_hf.folder_files(template, "glm4_moe", layers, fp8)["config.json"])


def test_the_full_glm_shape_reads_what_the_h200_run_recorded_and_the_bound_follows(nvml):
    model = bound.config_bytes(glm_config(46))
    # tests/gpu/h200-full-shape-2026-12-01/full-shape.json: 13.58 GB a token, 7.0 GB of it the experts.
    assert model["bytes"] == 13581156352 and model["parts"]["experts"] == 7007109120, model
    one = bound.nvml_bandwidth(nvml(), [0])
    assert one["gb_s"] == 4814.3 and "6016-bit bus, 3201 MHz" in one["how"], one
    limit = bound.decode_bound(one, model)
    assert limit["tok_s"] == 354.5  # 4,814 GB/s / 13.58 GB; the run measured 143.5 tok/s, 40 % of it
    assert bound.percent(143.5, limit["tok_s"]) == 40.5
    both = bound.nvml_bandwidth(nvml(), [0, 1])
    assert both["gb_s"] == 9628.6 and bound.nvml_bandwidth(nvml(), [0, 1], "layer")["gb_s"] == 4814.3


def test_what_is_not_known_says_why(nvml, tmp_path):
    with pytest.raises(bound.Unknown, match="runs on the CPU"):
        bound.nvml_bandwidth(nvml(), [])
    with pytest.raises(bound.Unknown, match="memory bus width and clock"):
        bound.nvml_bandwidth(nvml(memory=False), [0])  # the real probe did not record them
    with pytest.raises(bound.Unknown, match="quantization 'awq'"):
        bound.config_bytes(dict(glm_config(2), quantization_config={"quant_method": "awq"}))
    with pytest.raises(bound.Unknown, match="no config.json"):
        bound.model_bytes(str(tmp_path))


def test_a_gguf_counts_its_tensors_but_one_row_of_the_embedding(tmp_path):
    path = tmp_path / "model.gguf"
    dummy_gguf.write(str(path), seed=0, layers=2, context=2048)
    arrays = dummy_gguf.tensors(dummy_gguf.layout(2, 2048), 0)
    size = dict((name, a.size * (2 if a.ndim > 1 else 4)) for name, a in arrays.items())  # F16 matrices, F32 vectors
    embd = arrays["token_embd.weight"]
    model = bound.model_bytes(str(path))
    assert model["bytes"] == sum(size.values()) - size["token_embd.weight"] + 2 * embd.shape[-1], model
    assert model["how"] == "GGUF: %d tensors" % len(arrays)
    with pytest.raises(bound.Unknown, match="did not fit"):
        bound.gguf_bytes(path.read_bytes()[:4096])


def test_the_served_model_is_found_under_the_container_mounts(tmp_path):
    folder = tmp_path / "hub" / "models--acme--m" / "snapshots" / "abc"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(glm_config(2)))
    mounts = [{"Source": "/var/log", "Destination": "/logs"}, {"Source": str(tmp_path / "hub"), "Destination": "/models/hf"}]
    args = ["serve", "/models/hf/models--acme--m/snapshots/abc", "--port", "8000"]
    assert bound.served_model_path(args, mounts) == str(folder)
    assert bound.model_bytes(bound.served_model_path(args, mounts))["parts"]["lm_head"] > 0
    assert bound.served_model_path(["-m", "/models/main/model.gguf"], [{"Source": "/data/m", "Destination": "/models/main"}]) \
        == "/data/m/model.gguf"
    with pytest.raises(bound.Unknown, match="names no model"):
        bound.served_model_path(["--port", "8000"], mounts)
