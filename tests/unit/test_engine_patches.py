"""The collection's own vLLM patches (patches/vllm): the series the image stage reads names them in
order, each is a git diff of vLLM's own files, and what each adds does what its subject says - run here
from the patch text itself, since vLLM is not installed on this machine (tests/gpu/RESULTS.md has the
patched vLLM 0.26.0 serving)."""
import os
import re

from ansible_collections.gpuserve.llm.plugins.filter.engines import patch_series
from ansible_collections.gpuserve.llm.plugins.module_utils import bad_media, prompts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VLLM = os.path.join(ROOT, "patches", "vllm")
DATA_URLS = "0003-malformed-data-urls-and-frameless-videos-are-client-errors.patch"
SPLITK = "0004-splitk-gemv-one-token.patch"


def read(name):
    with open(os.path.join(VLLM, name)) as f:
        return f.read()


def top_level(source):
    """The first statement of `source`: up to the next line that starts at column 0."""
    lines = source.splitlines()
    end = next((i for i, line in enumerate(lines[1:], 1) if line[:1] not in ("", " ", "}", ")")), len(lines))
    return "\n".join(lines[:end])


class Triton:  # stand-in for the one helper of triton's that the patch's Python around the kernels uses
    @staticmethod
    def cdiv(a, b):
        return -(-a // b)


class Torch:  # stand-in for torch in the patch's guard: dtypes as sentinels
    bfloat16, float16, float32, float8_e4m3fn = "bf16", "fp16", "fp32", "fp8"


class Tensor:  # stand-in for a 2-D contiguous tensor: what the guard reads of one
    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.strides = shape, dtype, (shape[1], 1)

    def dim(self):
        return len(self.shape)

    def stride(self, axis=None):
        return self.strides if axis is None else self.strides[axis]


class Envs:  # stand-in for vllm.envs
    VLLM_BATCH_INVARIANT = False


def added(name, starting):
    """The run of lines a patch adds from the one starting with `starting`, as source text."""
    lines = read(name).splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("+" + starting))
    out = []
    for line in lines[first:]:
        if not line.startswith("+"):
            break
        out.append(line[1:])
    return "\n".join(out)


def test_the_series_names_each_patch_in_order_and_each_is_a_diff_of_vllms_files():
    series = patch_series(VLLM)
    names = [p["name"] for p in series["patches"]]
    assert names == ["0001-refuse-bottom-up-raw-avi.patch", "0002-decompression-bomb-is-a-client-error.patch",
                     DATA_URLS, SPLITK]
    for name in names:
        with open(os.path.join(VLLM, name)) as f:
            text = f.read()
        files = re.findall(r"^diff --git a/(\S+) b/\1$", text, re.M)
        assert files and all(f.startswith("vllm/") for f in files), name


def test_the_avi_guard_refuses_bottom_up_raw_frames_and_passes_the_rest():
    ns = {}
    exec(added("0001-refuse-bottom-up-raw-avi.patch", "def refuse_bottom_up_raw_avi"), ns)
    refuse = ns["refuse_bottom_up_raw_avi"]
    top_down = prompts.avi([(255, 0, 0), (0, 0, 255)], size=16)
    strf = top_down.index(b"strf") + 8
    bottom_up = top_down[:strf + 8] + (16).to_bytes(4, "little") + top_down[strf + 12:]
    refuse(top_down)  # what verify sends: OpenCV reads it
    refuse(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 64)  # not an AVI
    try:
        refuse(bottom_up)
    except ValueError as e:
        assert "bottom-up" in str(e)
    else:
        raise AssertionError("a bottom-up uncompressed AVI passed")
    # the check sits where every OpenCV video backend opens its input
    assert re.search(r"^ +def open_video_capture\(cls, data: bytes\).*\n\+ +refuse_bottom_up_raw_avi\(data\)$",
                     read("0001-refuse-bottom-up-raw-avi.patch"), re.M)


def test_an_image_past_pillows_bomb_limit_becomes_a_client_error():
    assert "+            Image.DecompressionBombError," in read("0002-decompression-bomb-is-a-client-error.patch")
    from PIL import Image
    assert not issubclass(Image.DecompressionBombError, OSError)  # why vLLM's except missed it


class ImageIO(object):
    def load_base64(self, media_type, data):
        return ("image", media_type, data)


class VideoIO(ImageIO):
    pass


def data_url_loader():
    """vLLM's MediaConnector._load_data_url as 0003 makes it, over stand-ins of its media readers."""
    body = "\n".join(line[4:] for line in added(DATA_URLS, "        # A malformed one").splitlines())
    source = "def load(self, url, media_io):\n%s\n    return media_io.load_base64(media_type, data)\n" % body
    ns = {"_DATA_URL_KINDS": {ImageIO: "image", VideoIO: "video"}}
    exec(source, ns)
    return lambda url, io=ImageIO(): ns["load"](None, url, io)


def test_every_malformed_data_url_of_the_catalogue_is_a_value_error_in_words():
    load = data_url_loader()
    refused = {}
    for case in bad_media.cases(oversize_bytes=64):
        url = case["parts"][0].get("image_url", {}).get("url", "")
        if case["klass"] == "malformed data URL" and not url.startswith("data:image/png;base64,*"):
            try:
                load(url)
            except ValueError as e:  # vLLM answers a ValueError with 400 and its text
                refused[case["name"]] = str(e)
    form = "A media data URL must have the form data:<media type>;base64,<base64 data>."
    assert refused == {"data-url-no-base64": form, "data-url-no-comma": form, "data-url-other-encoding": form,
                       "data-url-empty": "The media data URL holds no data.",
                       "data-url-text-mime": "This image part's data URL has the media type 'text/plain'; it must be "
                                             "image/*."}, refused
    # What is well formed goes on to the reader as before: parameters before ;base64 (RFC 2397), no media type,
    # application/*; a video part takes video/* and not image/*.
    assert load("data:image/png;base64,AAAA") == ("image", "image/png", "AAAA")
    assert load("data:image/png;charset=x;BASE64,AAAA") == ("image", "image/png", "AAAA")
    assert load("data:;base64,AAAA")[1] == "" and load("data:application/octet-stream;base64,AA")[2] == "AA"
    assert load("data:video/x-msvideo;base64,AAAA", VideoIO())[1] == "video/x-msvideo"
    try:
        load("data:image/png;base64,AAAA", VideoIO())
    except ValueError as e:
        assert "must be video/*" in str(e)
    else:
        raise AssertionError("an image/png data URL passed as a video")


def test_a_video_with_no_frame_is_a_value_error_in_words():
    text = read(DATA_URLS)
    assert "+        if len(frames) == 0:\n+            raise ValueError(\"The video holds no frame that could be read.\")" \
        in text
    assert re.search(r"^\+        frames, metadata = self.video_loader.load_bytes\($", text, re.M)


def test_the_splitk_gemv_takes_one_token_only_with_a_config_for_every_shape():
    """0004 (issue 37): the GEMV only at one token, before flashinfer's swap-AB / DeepGEMM choice, with a way off;
    the measured configs for GLM-4.6V-FP8's four linears and, for any other shape, one the kernel can run: a tile of
    rows within one 128-row scale block, K steps of whole 128-column scale blocks, at most one split per K step."""
    text = read(SPLITK)
    assert re.findall(r"^diff --git a/(\S+) b/", text, re.M) == ["vllm/model_executor/kernels/linear/scaled_mm/flashinfer.py"]
    dispatch = text.index("+    if input.shape[0] == 1:\n+        out = _gpuserve_gemv(")
    assert dispatch < text.index(" condition = input.shape[0] < 32")
    assert '+_GPUSERVE_GEMV_MODE = os.environ.get("GPUSERVE_SPLITK_GEMV", "1")' in text

    ns = {"triton": Triton, "_GPUSERVE_TUNED": {}}
    exec(top_level(added(SPLITK, "_GPUSERVE_GEMV_CONFIGS = {")) + "\n"
         + top_level(added(SPLITK, "def _gpuserve_gemv_config(")), ns)
    config = ns["_gpuserve_gemv_config"]
    sms = 132  # an H200's
    assert config(14336, 4096, sms) == (64, 512, 8, 1, "direct")  # qkv: 224 tiles fill the SMs unsplit
    assert config(4096, 12288, sms)[3:] == (4, "counter")  # o_proj: 4 splits
    assert config(2816, 4096, sms)[3] == config(4096, 1408, sms)[3] == 11  # the shared expert's two
    for n, k in [(14336, 4096), (4096, 12288), (2816, 4096), (4096, 1408), (1024, 7168), (7168, 2048), (256, 384),
                 (151552, 4096), (3000, 1000)]:
        for count in (16, 132, 170):
            bn, bk, warps, split, reduction = config(n, k, count)
            blocks = Triton.cdiv(k, bk)
            assert 128 % bn == 0 and bk % 128 == 0 and warps in (4, 8), (n, k, count)
            assert 1 <= split <= blocks and (reduction == "direct") == (split == 1), (n, k, count)


def test_the_splitk_gemv_takes_only_the_shapes_measured_to_pay_and_the_formats_it_reads():
    """0004's guard (its reasons, run from the patch text over stand-ins of torch's tensors): the four measured
    shapes go to the GEMV; any other shape keeps vLLM's kernel unless GPUSERVE_SPLITK_GEMV=any, and =0 turns it off;
    a scale or input of another format keeps vLLM's kernel whatever the shape."""
    def reasons(mode):
        ns = {"torch": Torch, "triton": Triton, "envs": Envs, "_GPUSERVE_OFF_SHAPES": {}, "_GPUSERVE_TUNED": {},
              "_GPUSERVE_GEMV_FILE": ""}
        source = "\n".join([
            top_level(added(SPLITK, "_GPUSERVE_GEMV_CONFIGS = {")),
            '_GPUSERVE_GEMV_MODE = "%s"' % mode,
            top_level(added(SPLITK, "_GPUSERVE_GEMV_ON = ")),
            top_level(added(SPLITK, "_GPUSERVE_GEMV_ANY_SHAPE = ")),
            top_level(added(SPLITK, "def _gpuserve_gemv_reason("))])
        exec(source, ns)  # pylint: disable=exec-used

        def reason(n, k, x_dtype=Torch.bfloat16, scale_dtype=Torch.float32, group=128):
            weight = Tensor((n, k), Torch.float8_e4m3fn)
            scale = Tensor((Triton.cdiv(n, 128), Triton.cdiv(k, 128)), scale_dtype)
            return ns["_gpuserve_gemv_reason"](Tensor((1, k), x_dtype), weight, scale, group)
        return reason

    measured = [(14336, 4096), (4096, 12288), (2816, 4096), (4096, 1408)]
    other = [(3584, 4096), (4096, 3072), (1408, 4096)]  # GLM-4.6V-FP8's at tensor parallel 2 and 4: not measured
    on, anyshape, off = reasons("1"), reasons("any"), reasons("0")
    assert [on(n, k) for n, k in measured] == [None] * 4
    assert all(on(n, k).startswith("no config measured") for n, k in other), [on(n, k) for n, k in other]
    assert [anyshape(n, k) for n, k in measured + other] == [None] * 7
    assert {off(n, k) for n, k in measured + other} == {"GPUSERVE_SPLITK_GEMV=0"}
    assert anyshape(4096, 352) == "shape 4096x352"  # K not whole 128-column blocks (the down projection at TP 4)
    assert on(4096, 12288, scale_dtype="ue8m0").startswith("weight scale")  # Blackwell's packed scales
    assert on(4096, 12288, x_dtype=Torch.float16).startswith("input") and on(4096, 12288, group=64) == "group size 64"


def test_a_tuned_table_replaces_the_built_in_configs_on_the_gpu_model_it_was_made_on_only(tmp_path):
    """0004 with GPUSERVE_GEMV_CONFIGS (the autotune stage's gemv.json), run from the patch text: read once, at the
    first layer's load; its configs win over the built-in ones, a shape it lists without one keeps vLLM's kernel, a
    shape only it measured takes the GEMV; a table made on another GPU model, or with a config the kernel cannot
    run, is not used and the built-in configs are, each said in the log."""
    import json

    class Cuda:
        name = "NVIDIA H200"

        @classmethod
        def get_device_name(cls, _device):
            return cls.name

    class TorchWithCuda(Torch):
        cuda = Cuda

    class Logger:
        def __init__(self):
            self.said = []

        def info(self, text, *args):
            self.said.append(("info", text % args))

        def warning(self, text, *args):
            self.said.append(("warning", text % args))

    def engine(table, gpu="NVIDIA H200"):
        path = tmp_path / "gemv.json"
        path.write_text(json.dumps(table))
        Cuda.name = gpu
        ns = {"torch": TorchWithCuda, "triton": Triton, "envs": Envs, "json": json, "os": os, "logger": Logger(),
              "_GPUSERVE_OFF_SHAPES": {}, "_GPUSERVE_GEMV_FILE": str(path), "_GPUSERVE_GEMV_ON": True,
              "_GPUSERVE_GEMV_ANY_SHAPE": False, "_GPUSERVE_TUNED": {}, "_GPUSERVE_TUNED_READ": []}
        exec("\n".join([top_level(added(SPLITK, "_GPUSERVE_GEMV_CONFIGS = {")),
                        top_level(added(SPLITK, "_GPUSERVE_REDUCE = ")),
                        top_level(added(SPLITK, "def _gpuserve_read_tuned(")),
                        top_level(added(SPLITK, "def _gpuserve_gemv_config(")),
                        top_level(added(SPLITK, "def _gpuserve_gemv_reason("))]), ns)  # pylint: disable=exec-used
        ns["_gpuserve_read_tuned"]("cuda:0")
        ns["_gpuserve_read_tuned"]("cuda:0")  # once a process: the second call reads nothing

        def reason(n, k):
            scale = Tensor((Triton.cdiv(n, 128), Triton.cdiv(k, 128)), Torch.float32)
            return ns["_gpuserve_gemv_reason"](Tensor((1, k), Torch.bfloat16), Tensor((n, k), Torch.float8_e4m3fn),
                                               scale, 128)
        return (lambda n, k: ns["_gpuserve_gemv_config"](n, k, 132)), reason, ns["logger"].said

    tuned = {"device_name": "NVIDIA H200", "shapes": {
        "4096x12288": {"config": [64, 256, 8, 8, "atomic"]},  # better than the built-in (64, 512, 8, 4, counter)
        "2816x4096": {"config": None},  # vLLM's kernel as fast: kept
        "3584x4096": {"config": [32, 512, 4, 2, "counter"]}}}  # a shape the built-in table lacks (TP 2's qkv)
    config, reason, said = engine(tuned)
    assert config(4096, 12288) == (64, 256, 8, 8, "atomic") and reason(4096, 12288) is None
    assert config(14336, 4096) == (64, 512, 8, 1, "direct") and reason(14336, 4096) is None  # not listed: built-in
    assert reason(2816, 4096) == "the tuned table keeps vLLM's kernel for it (%s)" % (tmp_path / "gemv.json")
    assert reason(3584, 4096) is None and config(3584, 4096) == (32, 512, 4, 2, "counter")
    assert reason(4096, 3072).startswith("no config measured")  # in neither table
    assert said == [("info", "gpuserve.llm split-K GEMV configs from %s (tuned on NVIDIA H200): the GEMV for "
                             "3584x4096, 4096x12288, vLLM's kernel for 2816x4096" % (tmp_path / "gemv.json"))], said

    config, reason, said = engine(tuned, gpu="NVIDIA H100 80GB HBM3")  # made on another GPU model
    assert config(4096, 12288) == (64, 512, 8, 4, "counter") and reason(2816, 4096) is None
    assert reason(3584, 4096).startswith("no config measured")
    assert said == [("warning", "gpuserve.llm split-K GEMV: %s was tuned on NVIDIA H200, this GPU is NVIDIA H100 80GB "
                                "HBM3: not used (the built-in configs are)" % (tmp_path / "gemv.json"))], said

    # The table the autotune stage's tuner wrote on an H200 (tests/gpu/h200-gemv-tune-2026-12-05/gemv.json)
    with open(os.path.join(ROOT, "tests", "gpu", "h200-gemv-tune-2026-12-05", "gemv.json")) as f:
        config, reason, said = engine(json.load(f))
    assert config(4096, 1408) == (16, 512, 4, 1, "direct") and config(2816, 4096) == (64, 256, 4, 16, "atomic")
    assert reason(14336, 4096).startswith("the tuned table keeps vLLM's kernel") and reason(4096, 12288) is None
    assert said[0][1].endswith("the GEMV for 2816x4096, 4096x1408, 4096x12288, vLLM's kernel for 14336x4096"), said

    for bad in ([96, 512, 8, 4, "counter"], [64, 512, 8, 0, "counter"], [64, 512, 8, 4, "sum"], [64, 512]):
        config, reason, said = engine({"device_name": "NVIDIA H200", "shapes": {"4096x12288": {"config": bad}}})
        assert config(4096, 12288) == (64, 512, 8, 4, "counter"), bad
        assert len(said) == 1 and said[0][0] == "warning" and "cannot be used" in said[0][1], said
