# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A hub checkpoint's config.json for settings validation, on the workstation (the validate_settings action). Apart
from checkpoint.py so that the host's modules, which import that, do not carry Ansible's urls into their payload."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import quote

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError, open_url

from ansible_collections.gpuserve.llm.plugins.module_utils.hub_manifest import DEFAULT_ENDPOINT


def read(repo, revision, endpoint="", token="", timeout=10, limit=4 << 20):
    """A hub checkpoint's config.json read over HTTP from the endpoint the weights stage fetches from (empty:
    huggingface.co) into memory, nothing written: ((content, where), None), or (None, why not, in words without the
    token). Settings validation asks it on the workstation when its Hugging Face cache lacks the file. The token
    goes to the endpoint's own URL only, never to where it redirects (a CDN, another host)."""
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    url = "%s/%s/resolve/%s/config.json" % (base, quote(repo, safe="/"), quote(revision, safe=""))
    try:
        answer = open_url(url, headers={"Authorization": "Bearer %s" % token} if token else {}, timeout=timeout,
                          unredirected_headers=["Authorization"], use_netrc=False, http_agent="gpuserve.llm")
        try:
            data = answer.read(limit + 1)
        finally:
            answer.close()
    except HTTPError as e:
        return None, "%s answered HTTP %d %s%s" % (base, e.code, e.reason, "" if token or e.code not in (401, 403)
                                                   else "; a gated or private repo needs llm_hf_token")
    except (URLError, OSError, HTTPException, UrlsConnectionError) as e:
        return None, "%s could not be reached: %s" % (base, getattr(e, "reason", None) or type(e).__name__)
    except ValueError as e:  # a URL urllib cannot take; its text may hold the header's value: named by type only
        return None, "%s could not be asked (%s)" % (base, type(e).__name__)
    if len(data) > limit:
        return None, "its config.json at %s is over %d MiB" % (base, limit >> 20)
    try:
        content = json.loads(data.decode("utf-8"))
    except ValueError:
        return None, "its config.json at %s is not JSON" % base
    if not isinstance(content, dict):
        return None, "its config.json at %s is not one JSON object" % base
    return (content, base), None
