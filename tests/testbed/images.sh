#!/usr/bin/env bash
# Base images for the test bed, made with debootstrap and `docker import`, cached by a tag that
# encodes their inputs (suite, variant, package list): a rerun finds the tag and builds nothing.
# The rootfs tarball is kept under .work/images to re-import without a new debootstrap.
#
# For the SSH test hosts (tests/integration/ssh_hosts.py) it holds openssh-server and sudo, a user
# `deploy` with passwordless sudo and a user `nosudo` without sudo, neither with a password or a key;
# it holds NO SSH host key (ssh_hosts.py makes each container's own at its start: a key baked into
# the image would be every host's). sshd does not start with the image's command.
#
#   DOCKER_HOST=... tests/testbed/images.sh     # prints the test-host image's tag
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=$ROOT/.work/images
MIRROR=${GPUSERVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates,procps,iproute2,openssh-server,sudo
# What is done to the tree after debootstrap is part of the tag too (change the word when it changes).
POST=users-deploy-nosudo-no-host-keys-1
TAG=gpuserve-testhost:$SUITE-$(echo "$SUITE minbase $PACKAGES $POST" | sha256sum | cut -c1-12)

if docker image inspect "$TAG" >/dev/null 2>&1; then echo "$TAG"; exit 0; fi
mkdir -p "$CACHE"
TARBALL=$CACHE/${TAG//[:\/]/_}.tar
if [[ ! -s $TARBALL ]]; then
  command -v debootstrap >/dev/null || { echo "debootstrap not found (apt-get install debootstrap)" >&2; exit 1; }
  DIR=$(mktemp -d /tmp/gpuserve-rootfs.XXXX)
  trap 'rm -rf "$DIR"' EXIT
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$DIR" "$MIRROR" > "$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -rf "$DIR"/var/cache/apt/archives/*.deb "$DIR"/var/lib/apt/lists/*
  rm -f "$DIR"/etc/ssh/ssh_host_*
  chroot "$DIR" useradd --create-home --shell /bin/bash deploy
  chroot "$DIR" useradd --create-home --shell /bin/bash nosudo
  echo 'deploy ALL=(ALL:ALL) NOPASSWD: ALL' > "$DIR"/etc/sudoers.d/deploy
  chmod 0440 "$DIR"/etc/sudoers.d/deploy
  tar -C "$DIR" -c . > "$TARBALL.part" && mv "$TARBALL.part" "$TARBALL"
fi
docker import --change 'CMD ["sleep", "infinity"]' "$TARBALL" "$TAG" >/dev/null
echo "$TAG"
