# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Bad media a client can send to a vision engine (issue 39): one case for each class seen so far, as the
content parts of a chat message (data URLs), with what the client must get and why.

Every case is made here, from the standard library and prompts' PNG and AVI writers, so the same bytes go
to every engine; each is small (the bomb is 49 KB) except the oversize data URL, whose size is the point.
A case is a dict:

    name      a short id (also the row of a report)
    klass     the class of issue 39's list it stands for
    parts     the content parts (OpenAI image_url / video_url), to go before a text part
    expect    "4xx": a client error with a message that says what was wrong, and the server answers the next
              request; "no-5xx": a 4xx, or a 200 for what could be read (never a 5xx, never a dead server)
    why       what is wrong with it, and what an engine has done with it
    lethal    True where an unpatched engine has died of it (send it last)

vLLM 0.26.0's limits, from its source: no byte limit on a data URL or a request body (the HTTP server's
h11_max_incomplete_event_size, 4 MB, bounds headers, not bodies); VLLM_MAX_IMAGE_PIXELS (178,956,970) and
Pillow's own bomb check (twice MAX_IMAGE_PIXELS, the same number) bound pixels; --limit-mm-per-prompt
bounds the items (the recipe: 4 images, 1 video). The front's cap (front_media_item_mib, 20 MiB an item in
its body budget) is the only byte limit the collection sets.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import struct
import zlib

from ansible_collections.gpuserve.llm.plugins.module_utils import engines, prompts

# The recipe's --limit-mm-per-prompt (templates/vllm.j2 with llm_vision: true), which the fronts count too.
LIMIT_IMAGES = engines.PROFILES["vllm"]["media_per_request"]["image"]
LIMIT_VIDEOS = engines.PROFILES["vllm"]["media_per_request"]["video"]
# Pillow refuses to open an image of more pixels than this (2 x Image.MAX_IMAGE_PIXELS), and vLLM's own
# VLLM_MAX_IMAGE_PIXELS defaults to the same number.
BOMB_LIMIT_PIXELS = 178956970
BOMB_SIDE = 20000
# One byte more than 20 MiB (front_media_item_mib, roles/front/defaults/main.yml): vLLM has no limit of its own.
OVERSIZE_BYTES = 20 * 1024 * 1024 + 1


def bomb_png(side=BOMB_SIDE):
    """A 1-bit palette PNG of side x side pixels (400 M at 20000): 49 KB on the wire, every row zero, which
    zlib packs about 1,000 to one; decoded as RGB it would take 1.2 GB."""
    row = b"\x00" * (1 + (side + 7) // 8)  # filter byte + the row's bits
    comp = zlib.compressobj(9)
    block = row * 256
    body = []
    for _i in range(side // 256):
        body.append(comp.compress(block))
    body.append(comp.compress(row * (side % 256)))
    body.append(comp.flush())
    chunk = prompts.png_chunk
    return (prompts.PNG_SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 3, 0, 0, 0))
            + chunk(b"PLTE", b"\x50\x90\xd0\xff\xff\xff") + chunk(b"IDAT", b"".join(body)) + chunk(b"IEND", b""))


def good_png():
    """A valid 64 x 64 PNG of seeded noise (12 KB): what the truncated and oversize cases start from."""
    return prompts.noise_png(64, 64, 39)


def good_avi(frames=9, size=112):
    """A valid uncompressed AVI, stored top-down (what verify sends and OpenCV reads)."""
    colours = [c for _n, c in prompts.COLOURS]
    return prompts.avi([colours[i % len(colours)] for i in range(frames)], size=size)


def bottom_up_avi():
    """The same AVI with its frames stored bottom-up (a positive DIB height, the usual layout)."""
    avi = bytearray(good_avi())
    strf = avi.index(b"strf") + 8
    avi[strf + 8:strf + 12] = struct.pack("<i", 112)
    return bytes(avi)


def zero_frame_avi():
    """A valid AVI header (avih and strh say 0 frames), an empty movi list and an empty index."""
    return prompts.avi([], size=112)


def oversize_png(nbytes=OVERSIZE_BYTES):
    """A valid 64 x 64 PNG followed by zeros to nbytes: a decoder reads the image and stops at IEND, so only
    a byte limit can refuse it."""
    png = good_png()
    return png + b"\x00" * (nbytes - len(png))


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def image(data, mime="image/png"):
    return prompts.image_url_part(data, mime)


def video(data, mime="video/x-msvideo"):
    return prompts.video_url_part(data, mime)


def url_image(url):
    return prompts.image_url_part(url)


def cases(oversize_bytes=OVERSIZE_BYTES):
    """The catalogue, in sending order: the case that killed an unpatched vLLM last."""
    png, avi = good_png(), good_avi()
    small_avi = good_avi(frames=3, size=32)
    out = [
        ("bomb-png", "decompression-bomb PNG", [image(bomb_png())], "4xx",
         "a palette PNG of %d x %d (%d pixels, past Pillow's and vLLM's limit of %d): unpatched vLLM 0.26.0 "
         "answered 500 (Pillow's DecompressionBombError is not an OSError)" % (
             BOMB_SIDE, BOMB_SIDE, BOMB_SIDE * BOMB_SIDE, BOMB_LIMIT_PIXELS), False),
        ("truncated-png", "truncated PNG", [image(png[:len(png) // 2])], "4xx",
         "the first half of a valid PNG: the image data stops mid-stream, no IEND", False),
        ("corrupt-png", "corrupt PNG", [image(prompts.CORRUPT_PNG)], "4xx",
         "a PNG signature over bytes that are no chunk", False),
        ("truncated-avi-header", "truncated AVI", [video(avi[:avi.index(b"strf")])], "4xx",
         "a valid AVI cut where its stream's format (strf) begins: headers cut short, no frame", False),
        ("truncated-avi-frames", "truncated AVI", [video(avi[:len(avi) // 2])], "no-5xx",
         "the first half of a valid AVI: headers whole, frames cut mid-way, no index; the frames present may "
         "be read", False),
        ("zero-frame-avi", "zero-frame video", [video(zero_frame_avi())], "4xx",
         "a valid AVI header that says 0 frames, and no frame", False),
        ("too-many-images", "more media than --limit-mm-per-prompt", [image(png)] * (LIMIT_IMAGES + 1), "4xx",
         "%d images where the recipe allows %d a prompt" % (LIMIT_IMAGES + 1, LIMIT_IMAGES), False),
        ("too-many-videos", "more media than --limit-mm-per-prompt", [video(small_avi)] * (LIMIT_VIDEOS + 1), "4xx",
         "%d videos where the recipe allows %d a prompt" % (LIMIT_VIDEOS + 1, LIMIT_VIDEOS), False),
        ("oversize-data-url", "oversize data URL", [image(oversize_png(oversize_bytes))], "4xx",
         "a valid 64 x 64 PNG padded to %d bytes (%d in base64): past the front's 20 MiB an item; vLLM 0.26.0 "
         "has no byte limit of its own" % (oversize_bytes, (oversize_bytes + 2) // 3 * 4), False),
        ("data-url-no-base64", "malformed data URL", [url_image("data:image/png," + _b64(png))], "4xx",
         "no ';base64' (vLLM 0.26.0 splits the media type on ';' and says 'not enough values to unpack')", False),
        ("data-url-no-comma", "malformed data URL", [url_image("data:image/png;base64")], "4xx",
         "no ',' and no data", False),
        ("data-url-other-encoding", "malformed data URL", [url_image("data:image/png;charset=utf-8," + _b64(png))],
         "4xx", "a parameter where ';base64' belongs (vLLM 0.26.0 raises NotImplementedError: a 501)", False),
        ("data-url-invalid-base64", "malformed data URL", [url_image("data:image/png;base64,*not base64*")],
         "4xx", "characters outside the base64 alphabet", False),
        ("data-url-text-mime", "malformed data URL", [url_image("data:text/plain;base64," + _b64(png))], "4xx",
         "a media type that is not an image (text/plain) over PNG bytes", False),
        ("data-url-empty", "malformed data URL", [url_image("data:image/png;base64,")], "4xx",
         "no data at all", False),
        ("bottom-up-avi", "bottom-up raw AVI", [video(bottom_up_avi())], "4xx",
         "an uncompressed AVI stored bottom-up: OpenCV's FFmpeg reader (4.13.0, 5.0.0) segfaults in "
         "sws_scale_frame and killed unpatched vLLM 0.26.0's API server", True),
    ]
    return [dict(name=n, klass=k, parts=p, expect=e, why=w, lethal=lethal) for n, k, p, e, w, lethal in out]


def parse_png(data):
    """(width, height, bit depth, colour type) from a PNG's IHDR, and the chunk types in order (to IEND)."""
    if data[:8] != prompts.PNG_SIGNATURE:
        raise ValueError("not a PNG")
    at, kinds, ihdr = 8, [], None
    while at + 8 <= len(data):
        length = struct.unpack(">I", data[at:at + 4])[0]
        kind = data[at + 4:at + 8]
        body = data[at + 8:at + 8 + length]
        if len(body) < length or len(data) < at + 12 + length:
            raise ValueError("truncated chunk %r" % kind)
        if struct.unpack(">I", data[at + 8 + length:at + 12 + length])[0] != zlib.crc32(kind + body) & 0xFFFFFFFF:
            raise ValueError("bad CRC in %r" % kind)
        kinds.append(kind.decode("latin-1"))
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBB", body[:10])
        at += 12 + length
        if kind == b"IEND":
            break
    return ihdr, kinds


def parse_avi(data):
    """What an AVI's headers say: total frames (avih), the video stream's length (strh), its DIB height
    (strf, negative = top-down) and the number of frame chunks in movi."""
    if data[:4] != b"RIFF" or data[8:12] != b"AVI ":
        raise ValueError("not an AVI")
    avih = data.index(b"avih") + 8
    strh = data.index(b"strh") + 8
    strf = data.index(b"strf") + 8
    movi = data.index(b"movi")
    movi_end = movi - 4 + struct.unpack("<I", data[movi - 4:movi])[0]
    frames, at = 0, movi + 4
    while at + 8 <= movi_end:
        size = struct.unpack("<I", data[at + 4:at + 8])[0]
        frames += data[at:at + 4] == b"00db"
        at += 8 + size + size % 2
    return {"total_frames": struct.unpack("<I", data[avih + 16:avih + 20])[0],
            "stream_length": struct.unpack("<I", data[strh + 32:strh + 36])[0],
            "height": struct.unpack("<i", data[strf + 8:strf + 12])[0],
            "frame_chunks": frames}
