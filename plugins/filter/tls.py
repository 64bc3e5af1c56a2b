# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Each filter is documented in <its name>.yml beside this file (ansible-doc -t filter gpuserve.llm.<name>).

import ipaddress

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

WILDCARD_BINDS = ("", "0.0.0.0", "::")


def _ip(name):
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def tls_subject_alt_names(names):
    """subjectAltName entries (DNS:..., IP:...) for the names and addresses a front answers at, once each, in the
    order given; wildcard binds and empty names are left out."""
    entries = []
    for name in names or []:
        if not isinstance(name, str):
            raise AnsibleFilterError("a certificate name is %r: a DNS name or an IP address" % (name,))
        name = name.strip().strip("[]")
        if name in WILDCARD_BINDS:
            continue
        ip = _ip(name)
        entry = ("IP:%s" % ip) if ip is not None else "DNS:%s" % name.lower()
        if entry not in entries:
            entries.append(entry)
    return entries


def _covers(entries, name):
    """Whether subjectAltName entries cover a name clients use (an address exactly, a DNS name or one wildcard label)."""
    ip = _ip(name.strip("[]"))
    if ip is not None:
        return any(e.startswith("IP:") and _ip(e[3:].split("/")[0]) == ip for e in entries)
    name = name.lower().rstrip(".")
    for entry in entries:
        if not entry.startswith("DNS:"):
            continue
        pattern = entry[4:].lower().rstrip(".")
        if pattern == name or (pattern.startswith("*.") and "." in name and name.split(".", 1)[1] == pattern[2:]):
            return True
    return False


def tls_findings(cert, key=None, what="", names=(), warn_days=30):
    """Findings for a certificate a front is given (or the collection's CA): x509_certificate_info's result `cert`
    (valid_at with `now` and `warn`), openssl_privatekey_info's `key` (None: no key to match), the names clients use."""
    if not cert or cert.get("failed") or "not_after" not in cert:
        return [finding("E_TLS", what, "%s could not be read as a PEM certificate: %s" % (
            what, (cert or {}).get("msg", "no result")))]
    if key is not None and (key.get("failed") or not key.get("public_key")):
        return [finding("E_TLS", what, "the private key for %s could not be read (missing, not PEM, or a passphrase "
                        "it was not given): %s" % (what, key.get("msg", "no public key in it")))]
    if key is not None and key["public_key"].strip() != cert.get("public_key", "").strip():
        return [finding("E_TLS", what, "the private key given is not the key of %s: nginx would refuse the pair"
                        % what)]
    until = _date(cert["not_after"])
    valid = cert.get("valid_at") or {}
    if cert.get("expired") or valid.get("now") is False:
        start = _date(cert.get("not_before", ""))
        return [finding("E_CERT_EXPIRED", what, "%s %s" % (
            what, ("expired on %s" % until) if cert.get("expired") else "is valid from %s only" % start),
            not_after=until)]
    found = []
    if valid.get("warn") is False:
        found.append(finding("W_CERT_EXPIRING", what, "%s expires on %s, within %s days" % (what, until, warn_days),
                             not_after=until))
    entries = cert.get("subject_alt_name") or []
    missing = [n for n in names or [] if n and n not in WILDCARD_BINDS and not _covers(entries, n)]
    if missing:
        found.append(finding("W_CERT_NAMES", what, "%s does not name %s (it names %s)" % (
            what, ", ".join(missing), ", ".join(e.split(":", 1)[1] for e in entries) or "nothing in subjectAltName")))
    return found


def _date(asn1):
    """20270101120000Z -> 2027-01-01 12:00 UTC"""
    if len(asn1 or "") < 12:
        return asn1 or "?"
    return "%s-%s-%s %s:%s UTC" % (asn1[0:4], asn1[4:6], asn1[6:8], asn1[8:10], asn1[10:12])


class FilterModule(object):
    def filters(self):
        return {"tls_subject_alt_names": tls_subject_alt_names, "tls_findings": tls_findings}
