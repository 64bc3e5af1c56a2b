"""What a checkpoint can serve, read before its weights: config.json's vision tower and MTP layers, a
GGUF header's nextn layers (real GGUF files written with the gguf package), and the refusals."""
import json

import gguf
import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import checkpoint, dummy_gguf, dummy_hf

TEXT = dummy_hf.PRESETS["glm4_moe"]                       # GLM-4.5-Air's shapes: text, one MTP layer
VISION = {"architectures": ["Glm4vMoeForConditionalGeneration"], "model_type": "glm4v_moe",
          "vision_config": {"depth": 24}, "text_config": dict(TEXT, num_nextn_predict_layers=1)}


def test_config_json_says_vision_and_mtp_layers():
    caps = checkpoint.from_config(TEXT)
    assert dict((k, caps[k]) for k in ("vision", "mtp_layers", "source")) == {
        "vision": False, "mtp_layers": 1, "source": "config.json"}
    assert caps["shape"]["heads"] == 96  # what tensor parallelism splits: test_settings_shape.py
    assert checkpoint.from_config(VISION)["vision"] is True
    assert checkpoint.from_config(VISION)["mtp_layers"] == 1  # read in text_config
    assert checkpoint.from_config(dict(TEXT, num_nextn_predict_layers=0))["mtp_layers"] == 0
    assert checkpoint.from_config({"model_type": "llama"})["mtp_layers"] == 0


def _gguf(path, nextn=None, pad_tokens=0):
    dummy_gguf.write(str(path), seed=0, layers=2, context=2048)
    if nextn is None and not pad_tokens:
        return path.read_bytes()
    # A second file with the nextn key (as llama.cpp's converter writes for GLM-4.5 with its MTP layer).
    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(path) + ".mtp", arch)
    writer.add_block_count(2)
    if nextn is not None:
        writer.add_uint32("%s.nextn_predict_layers" % arch, nextn)
    writer.add_token_list(["t%d" % i for i in range(pad_tokens)] or ["a"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with open(str(path) + ".mtp", "rb") as f:
        return f.read()


def test_a_gguf_header_says_its_nextn_layers(tmp_path):
    meta, complete = checkpoint.gguf_metadata(_gguf(tmp_path / "plain.gguf"))
    assert complete and meta["general.architecture"] == "llama"
    assert checkpoint.from_gguf(meta, complete) == {"vision": False, "mtp_layers": 0, "source": "GGUF header"}
    with_mtp = _gguf(tmp_path / "mtp.gguf", nextn=1)
    assert checkpoint.from_gguf(*checkpoint.gguf_metadata(with_mtp))["mtp_layers"] == 1


def test_a_header_cut_short_is_read_as_far_as_it_goes(tmp_path):
    data = _gguf(tmp_path / "long.gguf", nextn=1, pad_tokens=50000)
    assert len(data) > 200000
    meta, complete = checkpoint.gguf_metadata(data[:4096])  # ends inside the token list
    assert not complete and meta["llama.nextn_predict_layers"] == 1
    meta, complete = checkpoint.gguf_metadata(data[:30])     # ends before any key: not known
    assert checkpoint.from_gguf(meta, complete)["mtp_layers"] is None
    with pytest.raises(ValueError):
        checkpoint.gguf_metadata(b"PK\x03\x04 not a gguf")


@pytest.mark.parametrize("settings, caps, refused", [
    ({"llm_vision": True, "llm_drafter": "off"}, {"vision": False, "mtp_layers": 1, "source": "config.json"},
     ["llm_vision"]),
    ({"llm_vision": False, "llm_drafter": "mtp"}, {"vision": False, "mtp_layers": 0, "source": "GGUF header"},
     ["llm_drafter"]),
    ({"llm_vision": True, "llm_drafter": "mtp"}, {"vision": True, "mtp_layers": 1, "source": "config.json"}, []),
    ({"llm_vision": False, "llm_drafter": "mtp"}, {"vision": False, "mtp_layers": None, "source": "GGUF header"}, []),
])
def test_settings_the_checkpoint_cannot_honour_are_refused(settings, caps, refused):
    found = checkpoint.refusals(dict(settings, llm_engine="vllm"), caps, "acme/model", "a" * 40)
    assert [(f["code"], f["subject"]) for f in found] == [("E_UNSUPPORTED", r) for r in refused]
    for f in found:
        assert "acme/model@aaaaaaaaaaaa" in f["message"] and "set " in f["message"]


def test_only_what_the_settings_need_is_read():
    manifest = {"files": [{"path": "config.json"}, {"path": "model.safetensors"}]}
    asked = []

    def get(path, max_bytes):
        asked.append((path, max_bytes))
        return json.dumps(VISION).encode()
    assert checkpoint.read(get, manifest)["vision"] is True and asked == [("config.json", None)]
    gguf_repo = {"files": [{"path": "m-Q8_0.gguf"}]}
    assert checkpoint.read(get, {"files": [{"path": "README.md"}]}) is None
    asked[:] = []
    with pytest.raises(ValueError):
        checkpoint.read(get, gguf_repo, "m-Q8_0.gguf")  # the stand-in get answers JSON, not GGUF
    assert asked == [("m-Q8_0.gguf", checkpoint.GGUF_HEADER_BYTES)]
    assert not checkpoint.needed({"llm_vision": False, "llm_drafter": "off"})
    assert checkpoint.needed({"llm_vision": False, "llm_drafter": "mtp"})
