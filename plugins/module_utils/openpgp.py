# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""An apt repository's signing key read with the standard library: its primary keys' fingerprints,
and the binary keyring apt's `signed-by` takes (what `gpg --dearmor` writes). No gpg on the host
is needed, so a bare host can check a key before anything is installed.

Packets and fingerprints as RFC 4880 (v4: SHA-1 over 0x99, a two-octet length and the key packet's
body) and RFC 9580 (v6: SHA-256 over 0x9B, a four-octet length and the body).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import hashlib
import re

PUBLIC_KEY, PUBLIC_SUBKEY = 6, 14
_ARMOR = re.compile(
    r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(?:[^\r\n]+\r?\n)*?\r?\n(?P<body>.*?)-----END PGP PUBLIC KEY BLOCK-----",
    re.S)


class KeyProblem(Exception):
    """The data is not an OpenPGP public key this reader understands; the message says why."""


def dearmor(data):
    """The key's binary packets: from ASCII armor (its checksum line dropped), or the bytes as given
    when they are binary already."""
    if not data:
        raise KeyProblem("it is empty")
    if data[:1] and (ord(data[:1]) & 0x80):
        return bytes(data)  # binary packets
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise KeyProblem("it is neither an ASCII-armored OpenPGP key nor binary OpenPGP packets")
    match = _ARMOR.search(text)
    if not match:
        raise KeyProblem("it holds no ASCII-armored OpenPGP public key block (an HTML page or an error instead?)")
    lines = [line.strip() for line in match.group("body").splitlines()]
    lines = [line for line in lines if line and not line.startswith("=")]
    try:
        return base64.b64decode("".join(lines).encode("ascii"), validate=True)
    except (binascii.Error, ValueError) as e:
        raise KeyProblem("its armored block is not valid base64: %s" % e)


def packets(binary):
    """(tag, body) of each packet, old and new header formats."""
    out, i, n = [], 0, len(binary)
    while i < n:
        head = binary[i]
        if not head & 0x80:
            raise KeyProblem("byte %d is not an OpenPGP packet header" % i)
        if head & 0x40:  # new format
            tag, i = head & 0x3F, i + 1
            if i >= n:
                raise KeyProblem("a packet header is cut short")
            first = binary[i]
            if first < 192:
                length, i = first, i + 1
            elif first < 224:
                if i + 1 >= n:
                    raise KeyProblem("a packet length is cut short")
                length, i = ((first - 192) << 8) + binary[i + 1] + 192, i + 2
            elif first == 255:
                if i + 4 >= n:
                    raise KeyProblem("a packet length is cut short")
                length, i = int.from_bytes(binary[i + 1:i + 5], "big"), i + 5
            else:
                raise KeyProblem("partial body lengths do not occur in a key")
        else:  # old format
            tag, kind, i = (head >> 2) & 0x0F, head & 0x03, i + 1
            if kind == 3:
                raise KeyProblem("indeterminate packet lengths do not occur in a key")
            size = (1, 2, 4)[kind]
            if i + size > n:
                raise KeyProblem("a packet length is cut short")
            length, i = int.from_bytes(binary[i:i + size], "big"), i + size
        if i + length > n:
            raise KeyProblem("a packet runs past the end of the data")
        out.append((tag, bytes(binary[i:i + length])))
        i += length
    return out


def fingerprint(body):
    """The fingerprint (upper-case hex) of a public key packet's body."""
    if not body:
        raise KeyProblem("a key packet is empty")
    version = body[0]
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise KeyProblem("a key packet is version %d; this reader knows versions 4 and 6" % version)


def primary_fingerprints(data):
    """(the binary keyring, the fingerprints of its primary keys in order). Raises KeyProblem."""
    binary = dearmor(data)
    found = [fingerprint(body) for tag, body in packets(binary) if tag == PUBLIC_KEY]
    if not found:
        raise KeyProblem("it holds no public key packet")
    return binary, found


def normal(fpr):
    """A fingerprint as written in documentation (spaces, 0x, lower case) in the form compared."""
    return re.sub(r"\s+", "", str(fpr or "")).upper().replace("0X", "", 1) if fpr else ""
