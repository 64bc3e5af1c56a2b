"""The fleet test's search for secrets (tests/secret_search.py): every form, in any text or bytes, as the
one-form-at-a-time search found them."""
import base64
import random

import pytest

from secret_search import find_secrets, secret_forms

SECRETS = {"llm_api_key": "sk-fleet-0123456789abcdef", "llm_hf_token": "hf_abcdefghijklmnopqrstuvwxyz0123",
           "a wrong key": "wrong+key/with=odd chars"}


def one_by_one(secrets, places):
    """The search as it was: each form of each secret looked for with `in`."""
    found = []
    for place, text in places.items():
        for name, value in secrets.items():
            for form in secret_forms(value):
                if form in text:
                    found.append("%s in %s (as %r)" % (name, place, form if form != value else "itself"))
                    break
    return found


def binary(size, seed):
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_form_of_a_secret_is_found_in_binary_files_read_as_latin_1_and_as_bytes(name):
    for i, form in enumerate(secret_forms(SECRETS[name])):
        blob = binary(200000, i)
        planted = blob[:123457] + form.encode() + blob[123457:]
        for text in (planted, planted.decode("latin-1")):
            found = find_secrets(SECRETS, {"f": text})
            assert found == one_by_one(SECRETS, {"f": text.decode("latin-1") if isinstance(text, bytes) else text})
            assert [line for line in found if line.startswith(name + " in f ")], (form, found)


def test_base64_of_a_secret_inside_a_longer_encoding_at_every_alignment():
    for pad in range(6):
        text = "Authorization: Basic " + base64.b64encode(b"u" * pad + SECRETS["llm_hf_token"].encode() + b":x").decode()
        assert find_secrets(SECRETS, {"log": text}) == ["llm_hf_token in log (as %r)" % next(
            f for f in secret_forms(SECRETS["llm_hf_token"]) if f in text)], pad


def test_a_bearer_header_and_escaped_forms_are_named_as_the_form_found():
    key = SECRETS["a wrong key"]
    assert find_secrets(SECRETS, {"out": "header: Bearer %s\n" % key}) == [
        "a wrong key in out (as %r)" % ("Bearer " + key)]
    assert find_secrets(SECRETS, {"url": "https://x/?k=wrong%2Bkey%2Fwith%3Dodd%20chars"}) == [
        "a wrong key in url (as 'wrong%2Bkey%2Fwith%3Dodd%20chars')"]
    assert find_secrets(SECRETS, {"out": "key=%s" % SECRETS["llm_api_key"]}) == ["llm_api_key in out (as 'itself')"]


def test_secrets_whose_forms_overlap_are_both_found():
    secrets = {"one": "key-one-12345678", "two": "12345678-key-two"}
    text = "...key-one-12345678-key-two..."
    assert find_secrets(secrets, {"t": text}) == ["one in t (as 'itself')", "two in t (as 'itself')"]


def test_text_past_latin_1_is_searched_and_clean_text_finds_nothing():
    text = "café ✓ — %s — 終" % SECRETS["llm_api_key"]
    assert find_secrets(SECRETS, {"out": text}) == ["llm_api_key in out (as 'itself')"]
    clean = {"a": binary(100000, 7), "b": "nothing here ✓", "c": ""}
    assert find_secrets(SECRETS, clean) == [] == one_by_one(SECRETS, {k: v.decode("latin-1") if isinstance(v, bytes)
                                                                      else v for k, v in clean.items()})


def test_the_same_lines_as_one_form_at_a_time_over_many_places():
    rng = random.Random(11)
    forms = [(name, form) for name, value in SECRETS.items() for form in secret_forms(value)]
    places = {}
    for i in range(60):
        blob = bytearray(binary(5000, 100 + i))
        for _planted in range(rng.randrange(3)):
            _name, form = rng.choice(forms)
            at = rng.randrange(len(blob))
            blob[at:at] = form.encode()
        places["p%d" % i] = bytes(blob).decode("latin-1")
    found = find_secrets(SECRETS, places)
    assert found and found == one_by_one(SECRETS, places)


def test_a_secret_past_ascii_is_refused():
    with pytest.raises(ValueError, match="must be ASCII: odd"):
        find_secrets({"odd": "clé-secrète-123"}, {"x": "clé-secrète-123"})
