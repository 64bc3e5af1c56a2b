"""The burn-in multimodal projector (mmproj) for llama.cpp: its header is what libmtmd's loader
reads (tests/fixtures/llamacpp-mmproj/ holds the run on Debian's llama-server 0.7.0), and its image
tokens leave the burn-in text model's hand-set replies as they are."""
import json
import os
import subprocess
import sys

import gguf
import numpy as np
import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_gguf as g
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_mmproj as m
from gguf_forward import forward_logits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIRED_KEYS = [  # clip.cpp's load_hparams reads these without a default (or throws)
    "clip.vision.embedding_length", "clip.vision.attention.head_count", "clip.vision.feed_forward_length",
    "clip.vision.block_count", "clip.vision.projection_dim", "clip.vision.attention.layer_norm_epsilon",
    "clip.vision.image_size", "clip.vision.patch_size", "clip.vision.image_mean", "clip.vision.image_std",
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mmproj")
    paths = [str(folder / n) for n in ("a.gguf", "b.gguf", "c.gguf")]
    m.write(paths[0], seed=0)
    m.write(paths[1], seed=0)
    m.write(paths[2], seed=1)
    return paths


def test_same_seed_same_bytes_other_seed_other_bytes(written):
    a, b, c = written
    assert g.digest(a) == g.digest(b) != g.digest(c)


def test_the_header_is_a_vision_mlp_projector_with_every_key_the_loader_requires(written):
    fields = gguf.GGUFReader(written[0]).fields

    def value(key):
        return fields[key].contents()

    assert value("general.architecture") == "clip"
    assert value("clip.projector_type") == "mlp"
    assert value("clip.has_vision_encoder") is True
    assert value("clip.use_gelu") is True
    assert all(key in fields for key in REQUIRED_KEYS)
    assert len(value("clip.vision.image_mean")) == 3 and len(value("clip.vision.image_std")) == 3
    assert value("clip.vision.image_size") % value("clip.vision.patch_size") == 0
    # LLaVA-1.6 anyres: every w x h in tiles of image_size up to GRID a side, as (w, h) pairs
    pins = value("clip.vision.image_grid_pinpoints")
    size = value("clip.vision.image_size")
    assert len(pins) == 2 * m.GRID ** 2 and all(v % size == 0 for v in pins) and max(pins) == m.GRID * size
    assert value("clip.vision.mm_patch_merge_type") == "spatial_unpad"
    # the text model's width: mtmd refuses an mmproj whose output differs from it
    assert value("clip.vision.projection_dim") == g.layout()["n_embd"]


def test_the_tensors_are_the_llava_layout_and_the_shapes_the_graph_needs(written):
    shape = m.layout()
    tensors = dict((t.name, t) for t in gguf.GGUFReader(written[0]).tensors)
    d, p = shape["n_embd"], shape["patch_size"]

    def ne(name):  # ggml order: innermost dimension first
        return [int(n) for n in tensors[name].shape]

    assert ne("v.patch_embd.weight") == [p, p, 3, d]
    assert ne("v.position_embd.weight") == [d, shape["n_patches"] + 1]  # + the class token
    assert ne("v.class_embd") == [d]
    for layer in range(shape["blocks"]):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out", "ln1", "ln2", "ffn_up", "ffn_down"):
            assert "v.blk.%d.%s.weight" % (layer, name) in tensors and "v.blk.%d.%s.bias" % (layer, name) in tensors
    # ffn_down's input is n_ff, not n_embd: the loader's legacy up/down swap must not fire
    assert ne("v.blk.0.ffn_down.weight") == [shape["n_ff"], d] and shape["n_ff"] != d
    assert ne("mm.0.weight") == [d, shape["hidden"]]
    assert ne("mm.2.weight") == [shape["hidden"], g.layout()["n_embd"]]
    assert ne("mm.2.bias") == [g.layout()["n_embd"]]  # clip_n_mmproj_embd reads this length
    assert not any(name.startswith(("mm.3.", "mm.4.")) for name in tensors)  # would make it mlp_norm


def test_image_tokens_carry_only_the_constant_dimension():
    shape = m.layout()
    arrays = m.tensors(shape, seed=0)
    assert not arrays["mm.2.weight"].any()
    expected = np.zeros(shape["text_n_embd"], np.float32)
    expected[g.layout()["bias_dim"]] = 1.0
    assert (arrays["mm.2.bias"] == expected).all()


def test_image_size_must_be_whole_patches_and_grid_0_is_one_fixed_size_image(tmp_path):
    with pytest.raises(ValueError):
        m.layout(image_size=30)
    assert m.layout(image_size=224)["n_patches"] == 256
    path = str(tmp_path / "fixed.gguf")
    assert m.write(path, image_size=224, grid=0)["max_image_tokens"] == 256
    assert "clip.vision.image_grid_pinpoints" not in gguf.GGUFReader(path).fields
    assert m.describe(m.layout(), 0)["max_image_tokens"] == 4 * (m.GRID ** 2 + 1)


@pytest.mark.parametrize("with_tools", [False, True])
def test_the_text_model_replies_the_same_with_image_tokens_in_the_prompt(with_tools):
    """The prompt llama-server builds for "Hello" + one image (its log: the image chunk starts at
    token 4), run through the burn-in model in numpy: the first reply token is the one without
    the image (and with <tools> earlier in the prompt, <tool_call> still wins)."""
    shape = g.layout()
    weights = g.tensors(shape, seed=0)
    image = m.tensors(m.layout(), seed=0)["mm.2.bias"].astype(np.float64)
    head = (["<|im_start|>", "system", "\n", "<tools>", "</tools>", "<|im_end|>", "\n"] if with_tools else [])
    before = head + ["<|im_start|>", "user", "\n", "Hello"]
    after = ["<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"]
    ids = [g.token_id(shape, t) for t in before] + [0] * m.layout()["n_patches"] + [g.token_id(shape, t) for t in after]
    rows = dict((len(before) + i, image) for i in range(m.layout()["n_patches"]))
    plain = [g.token_id(shape, t) for t in before + after]
    want = g.token_id(shape, "<tool_call>" if with_tools else g.REPLY[0])
    assert int(np.argmax(forward_logits(shape, weights, plain))) == want
    assert int(np.argmax(forward_logits(shape, weights, ids, rows))) == want


def dummy_weights(tmp_path, check=False, **args):
    """The weights stage's module as Ansible runs it (its arguments in a file)."""
    path = tmp_path / "args.json"
    args = dict({"path": str(tmp_path / "model"), "format": "gguf", "chat_template": "{{ messages }}"}, **args)
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", "dummy_weights.py"), str(path)],
                         stdout=subprocess.PIPE, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    return json.loads(out.stdout)


def test_the_weights_stage_writes_the_projector_with_vision_once_and_check_mode_writes_nothing(tmp_path):
    folder = tmp_path / "model"
    preview = dummy_weights(tmp_path, check=True, vision=True)
    assert preview["changed"] and not folder.exists(), preview
    assert preview["mmproj_file"] == str(folder / "mmproj.gguf")

    made = dummy_weights(tmp_path, vision=True)
    assert made["changed"] and made["mmproj_file"] == str(folder / "mmproj.gguf"), made
    assert sorted(made["files"]) == ["mmproj.gguf", "model.gguf"]
    assert made["files"]["mmproj.gguf"] == g.digest(str(folder / "mmproj.gguf"))
    assert made["model"]["mmproj"]["projector"] == "mlp" and made["model"]["mmproj"]["text_n_embd"] == made["model"]["n_embd"]
    stamp = json.loads((folder / "gpuserve-dummy.json").read_text())
    assert stamp["files"] == made["files"] and stamp["inputs"]["vision"] is True
    # the same bytes as the generator's own (what the llama-server run in tests/fixtures loaded)
    m.write(str(tmp_path / "direct.gguf"), seed=0, name="gpuserve burn-in model mmproj")
    assert g.digest(str(tmp_path / "direct.gguf")) == made["files"]["mmproj.gguf"]

    mtime = os.stat(str(folder / "mmproj.gguf")).st_mtime_ns
    again = dummy_weights(tmp_path, vision=True)
    assert not again["changed"] and again["files"] == made["files"], again
    assert dummy_weights(tmp_path, check=True, vision=True)["changed"] is False
    assert os.stat(str(folder / "mmproj.gguf")).st_mtime_ns == mtime

    # a damaged projector is made again: the stamp's digest no longer matches
    with open(str(folder / "mmproj.gguf"), "r+b") as f:
        f.seek(2048)
        f.write(b"\xff" * 32)
    assert dummy_weights(tmp_path, vision=True)["changed"]
    assert g.digest(str(folder / "mmproj.gguf")) == made["files"]["mmproj.gguf"]

    # without vision: a text model's stamp, no projector in the result
    text = dummy_weights(tmp_path)
    assert text["changed"] and "mmproj_file" not in text and list(text["files"]) == ["model.gguf"], text
    assert "mmproj" not in text["model"]
