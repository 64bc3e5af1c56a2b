"""The bad-media catalogue (plugins/module_utils/bad_media.py, issue 39): each case's bytes are what its name
says - the bomb's IHDR, the truncated PNG a prefix of a valid one, the zero-frame AVI a valid header with no
frame, the counts past the recipe's limits, the malformed data URLs malformed as named - and small."""
import base64
import binascii
import os
import re
import struct
import zlib

from ansible_collections.gpuserve.llm.plugins.module_utils import bad_media, prompts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = {c["name"]: c for c in bad_media.cases()}


def urls(case):
    return [(p.get("image_url") or p.get("video_url"))["url"] for p in case["parts"]]


def payload(case, i=0):
    url = urls(case)[i]
    head, data = url.split(",", 1)
    assert head.endswith(";base64"), url[:60]
    return base64.b64decode(data, validate=True)


def test_every_case_is_named_classed_explained_and_small():
    classes = {c["klass"] for c in CASES.values()}
    assert classes == {
        "bottom-up raw AVI", "decompression-bomb PNG", "truncated PNG", "corrupt PNG", "truncated AVI",
        "zero-frame video", "more media than --limit-mm-per-prompt", "oversize data URL", "malformed data URL"}
    assert len(CASES) == len(bad_media.cases())  # names are unique
    for name, case in CASES.items():
        assert re.match(r"^[a-z0-9-]+$", name)
        assert case["expect"] in ("4xx", "no-5xx") and len(case["why"]) > 10
        assert case["parts"] and all(p["type"] in ("image_url", "video_url") for p in case["parts"])
        if name != "oversize-data-url":
            assert sum(len(u) for u in urls(case)) < 2000000, name
    # the one that killed an unpatched engine goes last
    assert [c["name"] for c in bad_media.cases() if c["lethal"]] == ["bottom-up-avi"]
    assert bad_media.cases()[-1]["name"] == "bottom-up-avi"


def test_the_bomb_is_a_valid_small_png_of_20000_square():
    data = payload(CASES["bomb-png"])
    assert 40000 < len(data) < 60000
    (width, height, depth, colour), kinds = bad_media.parse_png(data)
    assert (width, height, depth, colour) == (20000, 20000, 1, 3)
    assert kinds == ["IHDR", "PLTE", "IDAT", "IEND"]
    assert width * height > bad_media.BOMB_LIMIT_PIXELS
    idat = data.index(b"IDAT")
    raw = zlib.decompressobj().decompress(data[idat + 4:idat + 4 + 100000], 2501 * 3)
    assert raw[:2501 * 3] == b"\x00" * (2501 * 3)  # filter 0, 2500 bytes of bits a row


def test_the_truncated_png_is_a_prefix_of_a_valid_one():
    good = bad_media.good_png()
    (width, height, _d, _c), kinds = bad_media.parse_png(good)
    assert (width, height) == (64, 64) and kinds[-1] == "IEND"
    cut = payload(CASES["truncated-png"])
    assert good.startswith(cut) and len(cut) == len(good) // 2
    try:
        bad_media.parse_png(cut)
    except ValueError as e:
        assert "truncated" in str(e)
    else:
        raise AssertionError("the truncated PNG parsed whole")


def test_the_corrupt_png_has_the_signature_and_nothing_valid_after():
    data = payload(CASES["corrupt-png"])
    assert data == prompts.CORRUPT_PNG and data[:8] == prompts.PNG_SIGNATURE
    try:
        bad_media.parse_png(data)
    except ValueError:
        pass
    else:
        raise AssertionError("the corrupt PNG parsed")


def test_the_avis_say_what_their_names_say():
    good = bad_media.good_avi()
    info = bad_media.parse_avi(good)
    assert info == {"total_frames": 9, "stream_length": 9, "height": -112, "frame_chunks": 9}
    bottom_up = payload(CASES["bottom-up-avi"])
    assert bad_media.parse_avi(bottom_up) == dict(info, height=112)
    assert len(bottom_up) == len(good)
    zero = payload(CASES["zero-frame-avi"])
    assert bad_media.parse_avi(zero) == {"total_frames": 0, "stream_length": 0, "height": -112, "frame_chunks": 0}
    assert zero[:4] == b"RIFF" and struct.unpack("<I", zero[4:8])[0] == len(zero) - 8
    header = payload(CASES["truncated-avi-header"])
    assert good.startswith(header) and b"strh" in header and len(header) == good.index(b"strf")
    frames = payload(CASES["truncated-avi-frames"])
    assert good.startswith(frames) and good.index(b"movi") < len(frames) < good.index(b"idx1")
    for case in ("bottom-up-avi", "zero-frame-avi", "truncated-avi-header", "truncated-avi-frames"):
        assert urls(CASES[case])[0].startswith("data:video/x-msvideo;base64,")
        assert CASES[case]["parts"][0]["type"] == "video_url"


def test_the_avi_guard_of_patch_0001_refuses_the_bottom_up_case_alone():
    with open(os.path.join(ROOT, "patches", "vllm", "0001-refuse-bottom-up-raw-avi.patch")) as f:
        lines = f.read().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("+def refuse_bottom_up_raw_avi"))
    source = []
    for line in lines[first:]:
        if not line.startswith("+"):
            break
        source.append(line[1:])
    ns = {}
    exec("\n".join(source), ns)
    refuse = ns["refuse_bottom_up_raw_avi"]
    for name in ("zero-frame-avi", "truncated-avi-header", "truncated-avi-frames"):
        refuse(payload(CASES[name]))
    try:
        refuse(payload(CASES["bottom-up-avi"]))
    except ValueError:
        pass
    else:
        raise AssertionError("patch 0001 let the bottom-up AVI through")


def test_the_counts_pass_the_recipes_limits():
    images = CASES["too-many-images"]["parts"]
    assert len(images) == bad_media.LIMIT_IMAGES + 1 and all(p["type"] == "image_url" for p in images)
    assert bad_media.parse_png(payload(CASES["too-many-images"]))[0][:2] == (64, 64)
    videos = CASES["too-many-videos"]["parts"]
    assert len(videos) == bad_media.LIMIT_VIDEOS + 1 and all(p["type"] == "video_url" for p in videos)
    assert bad_media.parse_avi(payload(CASES["too-many-videos"]))["frame_chunks"] == 3
    with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
        template = f.read()
    assert "--limit-mm-per-prompt {{ media_per_request | json }}" in template


def test_the_oversize_url_is_a_valid_png_past_the_fronts_item_budget():
    data = payload(CASES["oversize-data-url"])
    assert len(data) == bad_media.OVERSIZE_BYTES == 20 * 1024 * 1024 + 1
    assert bad_media.parse_png(data)[1][-1] == "IEND" and data.endswith(b"\x00" * 1000)
    with open(os.path.join(ROOT, "roles", "front", "defaults", "main.yml")) as f:
        assert re.search(r"^front_media_item_mib: 20$", f.read(), re.M)
    small = {c["name"]: c for c in bad_media.cases(oversize_bytes=20000)}["oversize-data-url"]
    assert len(payload(small)) == 20000


def test_the_malformed_data_urls_are_malformed_as_named():
    png = bad_media.good_png()
    no_b64 = urls(CASES["data-url-no-base64"])[0]
    assert no_b64.startswith("data:image/png,") and ";" not in no_b64
    assert base64.b64decode(no_b64.split(",", 1)[1]) == png
    assert "," not in urls(CASES["data-url-no-comma"])[0]
    other = urls(CASES["data-url-other-encoding"])[0]
    assert other.split(",", 1)[0] == "data:image/png;charset=utf-8"
    bad = urls(CASES["data-url-invalid-base64"])[0].split(",", 1)[1]
    try:
        base64.b64decode(bad, validate=True)
    except binascii.Error:
        pass
    else:
        raise AssertionError("the invalid base64 decoded")
    text = urls(CASES["data-url-text-mime"])[0]
    assert text.startswith("data:text/plain;base64,") and payload(CASES["data-url-text-mime"]) == png
    assert urls(CASES["data-url-empty"])[0] == "data:image/png;base64,"
    for name in ("data-url-no-base64", "data-url-no-comma", "data-url-other-encoding", "data-url-invalid-base64",
                 "data-url-text-mime", "data-url-empty"):
        assert CASES[name]["expect"] == "4xx" and len(CASES[name]["parts"]) == 1
