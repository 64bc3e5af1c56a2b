# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A tiny multimodal projector GGUF ("mmproj") for llama.cpp's libmtmd, beside the burn-in text GGUF
(dummy_gguf.py), so that `llama-server --mmproj` takes images on the CPU (issue 26 item 6).

What libmtmd's loader (tools/mtmd/clip.cpp, clip-impl.h; Debian's 0.7.0, build 11669) reads, and
why each piece is here:

* `general.architecture` "clip" (what llama.cpp's converter writes for an mmproj; the loader does
  not check it), `clip.has_vision_encoder` true (without it mtmd finds no vision modality),
  `clip.projector_type` "mlp": the LLaVA projector, the oldest type and the one with the fewest
  tensors (two linear layers, GELU between; `has_llava_projector` follows from the type).
* `clip.vision.image_grid_pinpoints` (with `clip.vision.mm_patch_merge_type` "spatial_unpad"):
  LLaVA-1.6's "anyres" slicing. Without pinpoints (LLaVA-1.5, `grid=0`) the loader pads every
  image to a square and resizes it to `image_size`, so every image costs the same tokens,
  (image_size / patch_size) ** 2. With them the image is fitted to the best of the listed
  resolutions (here every w x h in multiples of image_size up to `grid` tiles a side), cut into
  image_size tiles, and each tile plus an overview becomes (image_size / patch_size) ** 2 tokens:
  a bigger image costs more tokens, as verify's image_input check expects of an engine.
  With 28 px tiles and grid 6 (Debian's 0.7.0, measured): 28x28 -> 4 tokens, 64x64 -> 40,
  448x672 and 320x200 -> 100 (24 tiles + the overview); at most 37 x 4 = 148 an image.
* required hparams: `clip.vision.{embedding_length, attention.head_count, feed_forward_length,
  block_count, projection_dim, attention.layer_norm_epsilon, image_size, patch_size}` and
  `clip.vision.image_mean` / `image_std` (three floats each; the loader throws without them);
  `clip.use_gelu` picks GELU for the tower's FFN (the default is gelu_quick).
* tensors, CLIP-ViT named as the converter names them: `v.patch_embd.weight` (a conv kernel,
  numpy [n_embd, 3, patch, patch]) and `.bias`, `v.class_embd`, `v.position_embd.weight`
  (n_patches + 1 rows, the class token first), `v.pre_ln.{weight,bias}`, per block
  `v.blk.N.{attn_q, attn_k, attn_v, attn_out, ln1, ln2, ffn_up, ffn_down}.{weight,bias}`, then the
  projector `mm.0.{weight,bias}` (n_embd -> hidden) and `mm.2.{weight,bias}` (hidden -> the text
  model's n_embd; mtmd refuses a text model whose n_embd differs from mm.2.bias's length).
  The LLaVA graph takes the features of the second-to-last block (as LLaVA does), so with
  `blocks=2` one block runs and the last is loaded but unused, as in the real models.
  ffn_down's input width (n_ff) differs from n_embd so that the loader's legacy up/down swap
  test (ffn_down.ne[0] == n_embd) does not fire.

The weights: the tower and mm.0 are seeded noise (small, so nothing overflows in F16); mm.2's
weight is zero and its bias is the burn-in model's constant dimension (dummy_gguf's `bias_dim`)
at 1.0. So each image token enters the text model as a position that holds no token code, only
the constant every token embedding also has: the bigram head reads it as "no current token",
the <tools> head's key is zero there, and the reply after the generation prompt is the fixed one
with or without images. The engine still runs the whole tower for every image (preprocessing,
the conv, attention, the projector), so the request path is real; what the image shows is not
read (a content check needs real weights).

Needs numpy and gguf (the host virtualenv's requirements); imported lazily.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_gguf

ARCH = "clip"
PROJECTOR = "mlp"
IMAGE_SIZE = 28       # pixels (square); 28 / 14 = 2 patches a side: 4 image tokens a tile
PATCH_SIZE = 14
GRID = 6              # anyres tiles a side at most (0: LLaVA-1.5, one fixed-size image)
N_EMBD = 32           # the vision tower's width
N_HEAD = 2
N_FF = 64
HIDDEN = 64           # mm.0's output, mm.2's input
EPS = 1e-5
MEAN = [0.48145466, 0.4578275, 0.40821073]   # CLIP's, as LLaVA's preprocessor has them
STD = [0.26862954, 0.26130258, 0.27577711]
SCALE = 0.02          # the noise's standard deviation


def layout(text_layers=2, text_context=8192, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, blocks=2, grid=GRID):
    """The projector's shapes, matched to the burn-in text model's width."""
    text = dummy_gguf.layout(text_layers, text_context)
    if image_size % patch_size:
        raise ValueError("image_size %d is not a multiple of patch_size %d" % (image_size, patch_size))
    side = image_size // patch_size
    sizes = [image_size * k for k in range(1, int(grid) + 1)]
    return {
        "image_size": int(image_size), "patch_size": int(patch_size), "n_embd": N_EMBD, "n_head": N_HEAD,
        "n_ff": N_FF, "hidden": HIDDEN, "blocks": int(blocks), "n_patches": side * side,
        "text_n_embd": text["n_embd"], "text_bias_dim": text["bias_dim"], "grid": int(grid),
        "pinpoints": [v for w in sizes for h in sizes for v in (w, h)],
    }


def tensors(shape, seed):
    """{gguf tensor name: numpy array (rows = outputs)} for the design described above."""
    import numpy as np

    rng = np.random.default_rng(seed)
    d, ff, hid, p = shape["n_embd"], shape["n_ff"], shape["hidden"], shape["patch_size"]

    def noise(*dims):
        return (rng.standard_normal(dims) * SCALE).astype(np.float32)

    out = {
        "v.patch_embd.weight": noise(d, 3, p, p),
        "v.patch_embd.bias": np.zeros(d, np.float32),
        "v.class_embd": noise(d),
        "v.position_embd.weight": noise(shape["n_patches"] + 1, d),
        "v.pre_ln.weight": np.ones(d, np.float32),
        "v.pre_ln.bias": np.zeros(d, np.float32),
    }
    for layer in range(shape["blocks"]):
        prefix = "v.blk.%d." % layer
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            out[prefix + name + ".weight"] = noise(d, d)
            out[prefix + name + ".bias"] = np.zeros(d, np.float32)
        for name in ("ln1", "ln2"):
            out[prefix + name + ".weight"] = np.ones(d, np.float32)
            out[prefix + name + ".bias"] = np.zeros(d, np.float32)
        out[prefix + "ffn_up.weight"] = noise(ff, d)
        out[prefix + "ffn_up.bias"] = np.zeros(ff, np.float32)
        out[prefix + "ffn_down.weight"] = noise(d, ff)
        out[prefix + "ffn_down.bias"] = np.zeros(d, np.float32)
    out["mm.0.weight"] = noise(hid, d)
    out["mm.0.bias"] = np.zeros(hid, np.float32)
    out["mm.2.weight"] = np.zeros((shape["text_n_embd"], hid), np.float32)
    bias = np.zeros(shape["text_n_embd"], np.float32)
    bias[shape["text_bias_dim"]] = 1.0
    out["mm.2.bias"] = bias
    return out


def write(path, seed=0, text_layers=2, text_context=8192, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, blocks=2,
          grid=GRID, name="gpuserve burn-in mmproj"):
    """Write the mmproj GGUF to `path`. Same inputs, same bytes."""
    import gguf
    import numpy as np

    shape = layout(text_layers, text_context, image_size, patch_size, blocks, grid)
    writer = gguf.GGUFWriter(path, ARCH)
    writer.add_name("%s (seed %d)" % (name, seed))
    writer.add_description("hand-set LLaVA-style projector for burn-in; image tokens carry no content")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_bool("clip.has_text_encoder", False)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_llava_projector", True)
    writer.add_string("clip.projector_type", PROJECTOR)
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", shape["image_size"])
    writer.add_uint32("clip.vision.patch_size", shape["patch_size"])
    writer.add_uint32("clip.vision.embedding_length", shape["n_embd"])
    writer.add_uint32("clip.vision.feed_forward_length", shape["n_ff"])
    writer.add_uint32("clip.vision.projection_dim", shape["text_n_embd"])
    writer.add_uint32("clip.vision.attention.head_count", shape["n_head"])
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", EPS)
    writer.add_uint32("clip.vision.block_count", shape["blocks"])
    writer.add_array("clip.vision.image_mean", MEAN)
    writer.add_array("clip.vision.image_std", STD)
    if shape["pinpoints"]:
        writer.add_array("clip.vision.image_grid_pinpoints", shape["pinpoints"])
        writer.add_string("clip.vision.mm_patch_merge_type", "spatial_unpad")
    dummy_gguf.write_tensors(writer, tensors(shape, seed))
    return describe(shape, seed)


def describe(shape, seed):
    """What the file is, for a module's result and the reports."""
    return {
        "architecture": ARCH, "projector": PROJECTOR, "seed": int(seed), "image_size": shape["image_size"],
        "patch_size": shape["patch_size"], "blocks": shape["blocks"], "n_embd": shape["n_embd"],
        "text_n_embd": shape["text_n_embd"], "grid": shape["grid"], "tokens_per_tile": shape["n_patches"],
        "max_image_tokens": shape["n_patches"] * (shape["grid"] ** 2 + 1 if shape["grid"] > 1 else 1),
    }
