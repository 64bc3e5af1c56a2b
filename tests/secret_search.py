"""Where a secret shows up in what a run left: its output, the files it wrote, what Docker reports.

The SSH fleet test searches 1,857 MB (images saved, roots, virtualenvs, logs on every host) for 8 secrets in ~5
forms each; Python's `in`, once a form, took ~50 s of CPU for it (now 4.4 s). One Aho-Corasick pass for every form at once
(ahocorasick-rs, Rust's aho-corasick) reads 168 MB in 0.3 s where the forms one by one took 5.1 s."""
import base64
import json
import urllib.parse

import ahocorasick_rs


def secret_forms(secret):
    """The ways a secret could be written: as is, JSON-escaped, URL-quoted, in an HTTP header, and base64'd
    inside any text (at each of base64's three alignments: the middle of the secret's encoding there)."""
    forms = {secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe=""), "Bearer " + secret}
    for pad in ("", "x", "xx"):
        encoded = base64.b64encode((pad + secret).encode()).decode()
        forms.add(encoded[4 if pad else 0:-4])
    return sorted(f for f in forms if len(f) >= 8)


def _as_bytes(text):
    # Files come as bytes. Text (a run's output) as latin-1 where it can be, else UTF-8: the forms are ASCII, and
    # no byte of a character past ASCII is an ASCII byte in either, so the same places match.
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def find_secrets(secrets, places):
    """Where any form of any secret appears, a line a place and secret: "NAME in PLACE (as FORM)", FORM the
    first of secret_forms' that is there ("itself" for the secret as is). `secrets`: {name: value}; `places`:
    {place: text (str or bytes)}."""
    forms = dict((name, secret_forms(value)) for name, value in secrets.items())
    patterns = sorted(set(form for each in forms.values() for form in each))
    not_ascii = [name for name, each in forms.items() if not all(form.isascii() for form in each)]
    if not_ascii:
        raise ValueError("secrets to search for must be ASCII: %s" % ", ".join(not_ascii))
    searcher = ahocorasick_rs.BytesAhoCorasick([p.encode("ascii") for p in patterns])
    found = []
    for place, text in places.items():
        # Overlapping: "Bearer S" holds S, and one secret's form may end inside another's.
        hits = set(patterns[i] for i, _start, _end in searcher.find_matches_as_indexes(_as_bytes(text),
                                                                                       overlapping=True))
        for name, value in secrets.items():
            form = next((f for f in forms[name] if f in hits), None)
            if form is not None:
                found.append("%s in %s (as %r)" % (name, place, form if form != value else "itself"))
    return found
