"""The Debian roots the image stages build from leave out what a container does not use."""
import os

from ansible_collections.gpuserve.llm.plugins.modules.debian_rootfs import slim


def _file(root, path, size=10):
    full = os.path.join(str(root), path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(b"x" * size)


def test_slim_keeps_what_runs_and_each_copyright_and_drops_lists_translations_docs_and_man(tmp_path):
    kept = ["usr/sbin/nginx", "usr/lib/x86_64-linux-gnu/libc.so.6", "usr/share/doc/nginx/copyright",
            "usr/share/doc/libc6/copyright", "usr/share/locale/locale.alias", "var/lib/apt/lists/lock",
            "var/cache/apt/archives/lock", "usr/share/zoneinfo/UTC", "var/lib/dpkg/status", "etc/nginx/nginx.conf"]
    dropped = ["var/lib/apt/lists/deb.debian.org_debian_dists_sid_main_binary-amd64_Packages",
               "var/cache/apt/archives/nginx_1.30.6-2_amd64.deb", "usr/share/locale/de/LC_MESSAGES/apt.mo",
               "usr/share/doc/nginx/changelog.Debian.gz", "usr/share/doc/libc6/README", "usr/share/man/man8/nginx.8.gz",
               "usr/share/info/dir"]
    for path in kept + dropped:
        _file(tmp_path, path)
    os.symlink("nginx", str(tmp_path / "usr/share/doc/nginx-common"))  # Debian links a package's doc folder
    assert slim(str(tmp_path)) == 10 * len(dropped) + len("nginx")
    left = sorted(os.path.relpath(os.path.join(d, f), str(tmp_path)) for d, _x, files in os.walk(str(tmp_path))
                  for f in files)
    assert left == sorted(kept)
    assert os.path.isdir(str(tmp_path / "usr/share/man")) and os.path.isdir(str(tmp_path / "var/lib/apt/lists"))


def test_slim_of_a_root_without_those_folders_removes_nothing(tmp_path):
    _file(tmp_path, "bin/sh")
    assert slim(str(tmp_path)) == 0 and os.path.exists(str(tmp_path / "bin/sh"))
