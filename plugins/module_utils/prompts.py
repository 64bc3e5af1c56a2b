# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The requests verify and bench send: distinct prompts, long filler of a chosen token size, the tool
catalogue with its JSON schemas, and small images of known colour.

Everything is made from a seed, so the same run sends the same bytes (the long-prompt hashes of
verify depend on it) and no request repeats another (bench's decode prompts are distinct, and each
cold prompt starts with its own prefix so no engine can reuse a cached prompt).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import random
import struct
import zlib

SUBJECTS = [
    "lighthouses", "tide pools", "glaciers", "beekeeping", "sourdough bread", "suspension bridges", "comets",
    "coral reefs", "printing presses", "wind turbines", "chess openings", "violin making", "river deltas",
    "desert cacti", "city trams", "paper maps", "sailing knots", "volcanic islands", "clock towers", "owls",
    "tea ceremonies", "railway tunnels", "sea otters", "stained glass", "hot-air balloons", "salt marshes",
    "monsoons", "telescope mirrors", "rope bridges", "mountain huts", "night trains", "ice cores", "kelp forests",
    "windmills", "cave paintings", "orchards", "harbour cranes", "solar eclipses", "beavers", "typewriters",
    "canal locks", "fireflies", "observatories", "spice markets", "snowflakes", "market gardens", "old libraries",
    "migrating geese", "tidal mills", "weather balloons", "pottery kilns", "lava tubes", "moss gardens", "ferries",
    "bell foundries", "sand dunes", "paper cranes", "seed banks", "radio telescopes", "wool mills", "jellyfish",
    "cartographers", "oyster farms", "steam engines",
]
CODE_TASKS = [
    "parses an ISO 8601 date without any library", "merges overlapping intervals", "computes a running median",
    "finds the shortest path in a grid with walls", "validates a Sudoku board", "implements an LRU cache",
    "tokenizes arithmetic expressions", "evaluates reverse Polish notation", "rotates a matrix in place",
    "checks balanced brackets", "implements binary search on a rotated array", "formats a number with commas",
    "computes Levenshtein distance", "flattens a nested list", "counts word frequencies in a text",
    "implements a min-heap", "detects a cycle in a linked list", "converts Roman numerals to integers",
    "generates all permutations of a string", "compresses a string with run-length encoding",
]
WORDS = (
    "the a of to and in that it with as for on was is by at from his her an which or be are this have had not "
    "but one all were when we there can their been has more if will would who so no other into time only new "
    "some could these two may first then do any like my now over such our man me even most made after also did "
    "many before must through back years where much your way well down should because each just those people how "
    "too little state good very make world still own see men work long get here between both life being under "
    "never day same another know while last might us great old year off come since against go came right used take "
    "three small house water river stone bridge garden winter summer morning evening light road field hill village "
    "harbour market letter window door table story music voice island forest valley lamp ship bell tower"
).split()


def subject(i):
    return SUBJECTS[i % len(SUBJECTS)] + ("" if i < len(SUBJECTS) else " (part %d)" % (i // len(SUBJECTS) + 1))


def decode_prompt(kind, i):
    """The i-th distinct prompt of a kind: prose, structured or code."""
    if kind == "code":
        return "Write a Python function that %s. Include a docstring and two usage examples." % (
            CODE_TASKS[i % len(CODE_TASKS)] + ("" if i < len(CODE_TASKS) else " (variant %d)" % (i // len(CODE_TASKS))))
    if kind == "structured":
        return ("Describe %s as a JSON object with a title, a one-paragraph summary, five facts and three "
                "related topics." % subject(i))
    return "Write a short essay about %s: how they came to be, how they work, and why they matter." % subject(i)


# The schema structured decode requests must follow (bench's "structured" rows).
ARTICLE_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "summary": {"type": "string"},
        "facts": {"type": "array", "items": {"type": "string"}},
        "related": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title", "summary", "facts", "related"],
}


def filler(seed, n_chars):
    """Plain sentences from a seeded word list, n_chars long (the body of long and cold prompts)."""
    rng = random.Random(seed)
    parts = []
    size = 0
    while size < n_chars:
        words = [rng.choice(WORDS) for _word in range(rng.randint(8, 16))]
        sentence = " ".join(words).capitalize() + ". "
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts)[:n_chars]


# Tools with typed arguments: strings, enums, integers, numbers, booleans, arrays, nested objects,
# each with requests that name what to call and with what.
TOOLS = [
    ({"name": "get_weather", "description": "Current weather for a city.",
      "parameters": {"type": "object", "properties": {
          "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
          "required": ["city", "unit"]}},
     ["What is the weather in Lisbon right now, in celsius?", "Tell me the weather in Denver in fahrenheit.",
      "How warm is it in Oslo today? Use celsius."]),
    ({"name": "convert_currency", "description": "Convert an amount of money between currencies.",
      "parameters": {"type": "object", "properties": {
          "amount": {"type": "number"}, "from_currency": {"type": "string"}, "to_currency": {"type": "string"}},
          "required": ["amount", "from_currency", "to_currency"]}},
     ["Convert 250 euros to Japanese yen.", "How many US dollars is 99.5 British pounds?",
      "Change 1200 Swiss francs into euros."]),
    ({"name": "create_event", "description": "Add an event to the calendar.",
      "parameters": {"type": "object", "properties": {
          "title": {"type": "string"}, "date": {"type": "string", "description": "YYYY-MM-DD"},
          "duration_minutes": {"type": "integer", "minimum": 1},
          "attendees": {"type": "array", "items": {"type": "string"}}},
          "required": ["title", "date", "duration_minutes", "attendees"]}},
     ["Schedule a 45 minute design review on 2026-12-03 with Ana and Ben.",
      "Put a 30 minute call with Chen on the calendar for 2027-01-15, titled budget check."]),
    ({"name": "search_flights", "description": "Search flights between two airports.",
      "parameters": {"type": "object", "properties": {
          "origin": {"type": "string"}, "destination": {"type": "string"}, "date": {"type": "string"},
          "nonstop": {"type": "boolean"}, "passengers": {"type": "integer", "minimum": 1}},
          "required": ["origin", "destination", "date", "nonstop", "passengers"]}},
     ["Find nonstop flights from JFK to LHR on 2026-12-20 for two people.",
      "Search flights from SFO to NRT on 2027-02-01, one passenger, stops are fine."]),
    ({"name": "set_thermostat", "description": "Set a room's thermostat.",
      "parameters": {"type": "object", "properties": {
          "room": {"type": "string"}, "temperature": {"type": "number"},
          "mode": {"type": "string", "enum": ["heat", "cool", "auto"]}},
          "required": ["room", "temperature", "mode"]}},
     ["Set the bedroom to 19.5 degrees on heat.", "Cool the office down to 22 degrees."]),
    ({"name": "lookup_order", "description": "Look up a customer order.",
      "parameters": {"type": "object", "properties": {
          "order_id": {"type": "string"}, "include_items": {"type": "boolean"}},
          "required": ["order_id", "include_items"]}},
     ["Where is order A-10442? Show me its items too.", "Check the status of order 77-XQ without the items."]),
    ({"name": "send_message", "description": "Send a chat message to a contact.",
      "parameters": {"type": "object", "properties": {
          "recipient": {"type": "object", "properties": {"name": {"type": "string"}, "channel": {
              "type": "string", "enum": ["sms", "email", "chat"]}}, "required": ["name", "channel"]},
          "text": {"type": "string"}},
          "required": ["recipient", "text"]}},
     ["Text Maria by sms: running ten minutes late.", "Email Dev that the report is ready."]),
    ({"name": "calculate_route", "description": "Driving route through stops.",
      "parameters": {"type": "object", "properties": {
          "stops": {"type": "array", "items": {"type": "string"}, "minItems": 2},
          "avoid_tolls": {"type": "boolean"}},
          "required": ["stops", "avoid_tolls"]}},
     ["Plan a drive from Lyon to Geneva via Annecy, avoiding tolls.",
      "Route me Boston, Providence, New Haven; tolls are fine."]),
]


def tool_request(i):
    """The i-th tool-call request: (the tool in OpenAI form, the user's message)."""
    pairs = [(tool, text) for tool, texts in TOOLS for text in texts]
    tool, text = pairs[i % len(pairs)]
    return {"type": "function", "function": tool}, text


# JSON checks: a schema and an instruction naming its fields.
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
        "city": {"type": "string"}, "hobbies": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "city", "hobbies"],
}
PEOPLE = ["a retired lighthouse keeper", "a young violin maker", "a marine biologist", "a night-train conductor",
          "a beekeeper in the Alps", "a cartographer", "a pastry chef", "a glacier guide", "a radio astronomer",
          "a ferry captain", "a typewriter collector", "an orchard farmer"]


def json_prompt(i, instruction_only):
    who = PEOPLE[i % len(PEOPLE)]
    if instruction_only:
        return ("Invent %s. Reply with only a JSON object, no other text and no code fence, with the keys name "
                "(a string), age (an integer), city (a string) and hobbies (a list of strings)." % who)
    return "Invent %s: their name, age, city and hobbies." % who


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunk(kind, data):
    """One PNG chunk: its length, type, data and CRC."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_rows(width, height, rows):
    """An RGB PNG from its rows (each width x 3 bytes), written by hand: no imaging library on the host."""
    raw = b"".join(b"\x00" + row for row in rows)
    return (PNG_SIGNATURE + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(raw, 6)) + png_chunk(b"IEND", b""))


def png(rgb, size=64, height=None):
    """A size x size (or size x height) PNG of one colour (RGB)."""
    return png_rows(size, height or size, [bytes(bytearray(rgb)) * size] * (height or size))


def noise_png(width, height, seed):
    """A PNG of seeded noise: distinct bytes for every seed, so no engine cache can answer for it."""
    rng = random.Random(seed)
    return png_rows(width, height, [rng.getrandbits(8 * width * 3).to_bytes(width * 3, "little")
                                    for _row in range(height)])


COLOURS = [("red", (220, 30, 30)), ("green", (30, 170, 60)), ("blue", (30, 70, 220))]


def image_part(rgb):
    return image_url_part(png(rgb))


def image_url_part(data, mime="image/png"):
    """An OpenAI image_url part carrying `data` (bytes) as a data URL, or a URL given as text."""
    url = data if isinstance(data, str) else "data:%s;base64,%s" % (mime, base64.b64encode(data).decode("ascii"))
    return {"type": "image_url", "image_url": {"url": url}}


def video_url_part(data, mime="video/x-msvideo"):
    url = data if isinstance(data, str) else "data:%s;base64,%s" % (mime, base64.b64encode(data).decode("ascii"))
    return {"type": "video_url", "video_url": {"url": url}}


def avi(colours, size=112, fps=4):
    """An uncompressed AVI (RIFF, one 24-bit DIB video stream), one frame per colour, written by hand: a
    video any FFmpeg-based reader (OpenCV's, which vLLM uses) opens, made with no codec on the host."""
    row = size * 3  # a multiple of 4 for the sizes used here; DIB rows are padded to 4 bytes
    frames = [bytes(bytearray((b, g, r))) * size * size for r, g, b in colours]  # DIB is BGR

    def chunk(fourcc, data):
        return fourcc + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) % 2 else b"")

    def riff_list(kind, data):
        return b"LIST" + struct.pack("<I", len(data) + 4) + kind + data

    n, frame_bytes = len(frames), row * size
    avih = struct.pack("<14I", 1000000 // fps, frame_bytes * fps, 0, 0x10, n, 0, 1, frame_bytes, size, size, 0, 0, 0, 0)
    strh = (b"vids" + b"DIB " + struct.pack("<IHHIIIIIIiI", 0, 0, 0, 0, 1, fps, 0, n, frame_bytes, -1, 0)
            + struct.pack("<4h", 0, 0, size, size))
    # rows top-down (a negative height): OpenCV 5.0.0's reader corrupts its heap on a bottom-up raw frame
    strf = struct.pack("<IiiHHIIiiII", 40, size, -size, 1, 24, 0, frame_bytes, 0, 0, 0, 0)
    hdrl = riff_list(b"hdrl", chunk(b"avih", avih) + riff_list(b"strl", chunk(b"strh", strh) + chunk(b"strf", strf)))
    movi_chunks, index, offset = [], [], 4
    for frame in frames:
        movi_chunks.append(chunk(b"00db", frame))
        index.append(b"00db" + struct.pack("<III", 0x10, offset, len(frame)))
        offset += 8 + len(frame) + len(frame) % 2
    body = hdrl + riff_list(b"movi", b"".join(movi_chunks)) + chunk(b"idx1", b"".join(index))
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"AVI " + body


# Media the engine must refuse: a PNG signature over garbage, a RIFF header over garbage, and a URL on a
# name that never resolves (RFC 2606), which a data-URLs-only engine must refuse without trying.
CORRUPT_PNG = PNG_SIGNATURE + bytes(bytearray(range(256))) * 4
CORRUPT_AVI = b"RIFF" + struct.pack("<I", 1028) + b"AVI " + bytes(bytearray(range(256))) * 4
UNREACHABLE_IMAGE_URL = "http://media-check.invalid/gpuserve.png"


class Sizer(object):
    """Turns a token count into a filler length for this engine's tokenizer and chat template.

    `count(text)` returns the prompt tokens the engine reports for a one-message chat holding text
    (usage.prompt_tokens). Two calls: a one-character message gives the template's overhead, a
    1,000-character filler the characters per token."""

    SAMPLE = 1000  # small enough for a 2,048-token slot, long enough to average the tokenizer

    def __init__(self, count):
        self.overhead = count("x") - 1
        tokens = count(filler(991, self.SAMPLE)) - self.overhead
        self.chars_per_token = float(self.SAMPLE) / max(1, tokens)

    def chars(self, tokens, reserve=0):
        """Characters of filler for a prompt of about `tokens` tokens, `reserve` of them left for other text."""
        return max(16, int((tokens - self.overhead - reserve) * self.chars_per_token))
