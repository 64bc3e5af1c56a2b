"""Applies a patch series to an engine's installed Python package: the image stage runs it with the
image's own python3 while it builds the derived image of a pulled engine (docker build, RUN).

    python3 apply_series.py --package vllm --version 0.26.0 --dir /opt/gpuserve/patches/vllm P1.patch P2.patch ...

First the installed package's version (importlib.metadata) is checked against the one the series
declares; then every patch is applied, in order, in memory, to the files under the folder that holds
the package's dist-info (site-packages: the paths in the patches, a/vllm/multimodal/video.py, are
relative to it); only when every hunk of every patch has applied are the files written. No git, no
`patch`: unified diffs (git's or plain), each hunk where its context matches exactly, at its line or
the nearest line that matches (git apply's rule: no fuzz).

What does not apply is printed as one line, `gpuserve-finding:<base64 of JSON {code, thing,
message}>`, and the exit status is 3: the image stage makes it its finding (E_PATCH names the patch and
the file; E_PATCH_VERSION the two versions). Standard library only (Python 3.8+).
"""
import argparse
import base64
import json
import os
import re
import sys

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
FINDING = "gpuserve-finding:"


class NotApplied(Exception):
    """A patch that does not apply: the code, the thing named, the message."""

    def __init__(self, code, thing, message):
        Exception.__init__(self, message)
        self.code, self.thing, self.message = code, thing, message


def _path(header):
    """The path of a ---/+++ line (None for /dev/null), its a/ or b/ prefix taken off, refused outside the root."""
    name = header.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    if name[:2] in ("a/", "b/"):
        name = name[2:]
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or not name:
        raise ValueError("the path %r leaves the package's folder" % name)
    return name


def parse(text):
    """A unified diff as [{"old": path or None, "new": path or None, "hunks": [hunk]}]; a hunk is
    {"header", "old_start", "old": [lines], "new": [lines]}, each line with its newline (none where the diff
    says "No newline at end of file"). Mail headers, git's extended headers and a trailing signature are skipped."""
    lines = text.splitlines(True)
    files, i = [], 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            entry = {"old": _path(lines[i][4:]), "new": _path(lines[i + 1][4:]), "hunks": []}
            files.append(entry)
            i += 2
            while i < len(lines):
                m = HUNK.match(lines[i])
                if not m:
                    break
                old_left = int(m.group(2)) if m.group(2) is not None else 1
                new_left = int(m.group(4)) if m.group(4) is not None else 1
                hunk = {"header": lines[i].split(" @@")[0] + " @@", "old_start": int(m.group(1)), "old": [], "new": []}
                i += 1
                last = []
                while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                    line = lines[i]
                    tag, body = line[:1], line[1:]
                    if line.startswith("\\"):  # \ No newline at end of file: the line before has none
                        for side in last:
                            side[-1] = side[-1].rstrip("\r\n")
                    elif tag == " " or line in ("\n", "\r\n"):  # an empty context line may have lost its space
                        body = body if tag == " " else line
                        hunk["old"].append(body)
                        hunk["new"].append(body)
                        last = [hunk["old"], hunk["new"]]
                        old_left -= 1
                        new_left -= 1
                    elif tag == "-":
                        hunk["old"].append(body)
                        last = [hunk["old"]]
                        old_left -= 1
                    elif tag == "+":
                        hunk["new"].append(body)
                        last = [hunk["new"]]
                        new_left -= 1
                    else:
                        raise ValueError("%s: a line that is not context, - or + before the hunk's end: %r"
                                         % (hunk["header"], line[:80]))
                    i += 1
                if old_left > 0 or new_left > 0:
                    raise ValueError("%s ends before its line counts do" % hunk["header"])
                entry["hunks"].append(hunk)
            continue
        i += 1
    return files


def _find(lines, old, expected, floor):
    """Where `old` matches `lines` exactly: at `expected`, else at the nearest line at or after `floor`; None."""
    if not old:
        return min(max(expected, floor), len(lines))
    for at in sorted(range(floor, len(lines) - len(old) + 1), key=lambda a: (abs(a - expected), a)):
        if lines[at:at + len(old)] == old:
            return at
    return None


def apply_file(lines, hunks):
    """`lines` with the hunks applied; raises LookupError(hunk number, header) for the first that matches nowhere."""
    out, offset, floor = list(lines), 0, 0
    for n, hunk in enumerate(hunks, 1):
        expected = max(hunk["old_start"] - 1, 0) + offset
        at = _find(out, hunk["old"], expected, floor)
        if at is None:
            raise LookupError(n, hunk["header"])
        out[at:at + len(hunk["old"])] = hunk["new"]
        offset += len(hunk["new"]) - len(hunk["old"])
        floor = at + len(hunk["new"])
    return out


def _read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "surrogateescape").splitlines(True)


def apply_series(root, patches):
    """Applies the patches (paths, in order) to the files under `root`, in memory first; writes them only when all
    apply. Returns [(patch name, [paths it changed])]; raises NotApplied (E_PATCH) naming the patch and the file."""
    state, applied = {}, []  # path -> lines, or None for a file the series deletes
    for number, patch in enumerate(patches, 1):
        name = os.path.basename(patch)
        with open(patch, "rb") as f:
            text = f.read().decode("utf-8", "surrogateescape")
        try:
            files = parse(text)
        except ValueError as e:
            raise NotApplied("E_PATCH", name, "patch %s (number %d of the series) is not a diff that can be read: %s"
                             % (name, number, e))
        if not files:
            raise NotApplied("E_PATCH", name, "patch %s (number %d of the series) changes no file" % (name, number))
        changed = []
        for entry in files:
            target = entry["new"] or entry["old"]
            where = "patch %s (number %d of the series) does not apply to %s" % (name, number, target)
            if entry["old"] is None:
                there = state[target] is not None if target in state else os.path.exists(os.path.join(root, target))
                if there:
                    raise NotApplied("E_PATCH", name, "%s: it creates the file, which is there already" % where)
                current = []
            elif entry["old"] in state:
                current = state[entry["old"]]
                if current is None:
                    raise NotApplied("E_PATCH", name, "%s: an earlier patch deleted it" % where)
            elif os.path.isfile(os.path.join(root, entry["old"])):
                current = _read(os.path.join(root, entry["old"]))
            else:
                raise NotApplied("E_PATCH", name, "%s: the installed package has no such file (under %s)" % (where, root))
            try:
                result = apply_file(current, entry["hunks"])
            except LookupError as e:
                raise NotApplied("E_PATCH", name, "%s: hunk %d of %d (%s) matches no lines of the installed file "
                                 "(under %s)" % (where, e.args[0], len(entry["hunks"]), e.args[1], root))
            if entry["new"] is None:
                if result:
                    raise NotApplied("E_PATCH", name, "%s: it deletes the file, which holds more than the patch removes"
                                     % where)
                state[entry["old"]] = None
            else:
                state[entry["new"]] = result
            changed.append(target)
        applied.append((name, changed))
    for path, lines in sorted(state.items()):
        full = os.path.join(root, path)
        if lines is None:
            os.remove(full)
        else:
            folder = os.path.dirname(full)
            if not os.path.isdir(folder):
                os.makedirs(folder)
            with open(full, "wb") as f:
                f.write("".join(lines).encode("utf-8", "surrogateescape"))
        # A cached bytecode file of the old source is never taken for the new one's.
        cache = os.path.join(os.path.dirname(full), "__pycache__")
        stem = os.path.splitext(os.path.basename(full))[0] + "."
        if os.path.isdir(cache):
            for pyc in os.listdir(cache):
                if pyc.startswith(stem) and pyc.endswith(".pyc"):
                    os.remove(os.path.join(cache, pyc))
    return applied


def installed(package):
    """(version, the folder the package is imported from) of the installed distribution: the folder holding the
    package's own folder as `import` finds it (an editable install's source tree: SGLang's images install it so), else
    the one holding its dist-info (site-packages)."""
    from importlib import metadata, util  # Python 3.8+
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise NotApplied("E_PATCH_VERSION", package, "the image's python3 (%s) has no package %s installed: the series "
                         "is for %s" % (sys.executable, package, package))
    spec = util.find_spec(package)
    where = list(spec.submodule_search_locations or []) if spec else []
    return dist.version, os.path.normpath(os.path.dirname(where[0]) if where else str(dist.locate_file("")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--package", required=True)
    parser.add_argument("--version", required=True, help="the version the series targets")
    parser.add_argument("--dir", default=".", help="where the patches are")
    parser.add_argument("patches", nargs="+")
    args = parser.parse_args(argv)
    try:
        version, root = installed(args.package)
        if version != args.version:
            raise NotApplied("E_PATCH_VERSION", args.package, "the series is for %s %s; the image holds %s %s (%s)"
                             % (args.package, args.version, args.package, version, root))
        print("%s %s at %s" % (args.package, version, root))
        for name, changed in apply_series(root, [os.path.join(args.dir, p) for p in args.patches]):
            print("applied %s: %s" % (name, ", ".join(changed)))
    except NotApplied as e:
        found = json.dumps({"code": e.code, "thing": e.thing, "message": e.message})
        print(e.message, file=sys.stderr)
        print(FINDING + base64.b64encode(found.encode()).decode())
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
