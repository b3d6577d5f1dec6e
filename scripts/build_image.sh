#!/usr/bin/env bash
# Build the dra-driver image with podman from a base that needs no registry, then run
# `dra-driver demo` and `dra-driver discover --profile dgx-h100` in it.
#
# Needs root, podman + runc + mmdebstrap (apt-get install podman runc mmdebstrap), a Debian
# mirror for mmdebstrap (the host's apt sources), and a pip index or wheelhouse this host's pip
# can reach. The host's python3 must be the base's (bookworm: 3.11): the wheelhouse is built here.
# Everything goes under $WORK, podman's storage included (vfs, so it works on any filesystem).
# Environment: WORK (default /tmp/dra-driver-image), SUITE (bookworm), TAG, EXTRAS (e.g. amd,gaudi).
#
# The default TAG is the image the overlays deploy: `newName:newTag` of deploy/base/kustomization.yaml, with
# the overlay's suffix for EXTRAS ("" -> 0.1.0 for nvidia and gaudi, amd -> 0.1.0-amd, amd,gaudi -> 0.1.0-all).
# At the end the image is saved to $WORK/dra-driver-image.tar for `ctr -n k8s.io images import` on a node
# (or push it: docs/install.md, "Build or pick the image"). `build_image.sh --print-tag` prints the tag only.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${WORK:-/tmp/dra-driver-image}
SUITE=${SUITE:-bookworm}
EXTRAS=${EXTRAS:-}
image_name=$(awk '$1 == "newName:" {print $2}' deploy/base/kustomization.yaml)
image_version=$(awk '$1 == "newTag:" {print $2}' deploy/base/kustomization.yaml)
case "$EXTRAS" in
    "" | gaudi) suffix="" ;;
    amd) suffix="-amd" ;;
    *) suffix="-all" ;;
esac
TAG=${TAG:-$image_name:$image_version$suffix}
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
case "${1:-}" in
    "") ;;
    -h | --help) echo "usage: scripts/build_image.sh [--print-tag | --help]"; echo; usage; exit 0 ;;
    --print-tag) echo "$TAG"; exit 0 ;;
    *) echo "build_image.sh: error: unknown argument ${1}; run scripts/build_image.sh --help" >&2; exit 2 ;;
esac
BASE_TAG="localhost/dra-driver-base:$SUITE"
PODMAN=(podman --root "$WORK/storage" --runroot "$WORK/run" --tmpdir "$WORK/tmp" --storage-driver=vfs --cgroup-manager=cgroupfs)
# crun refuses hybrid cgroup hierarchies; runc copes. Without a network, nothing can be pulled.
RUN_FLAGS=(--rm --runtime runc --net=none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

step() { printf '== %s\n' "$*"; }
elapsed() { echo "   took $(( $(date +%s) - $1 )) s"; }
mkdir -p "$WORK"

if ! "${PODMAN[@]}" image exists "$BASE_TAG"; then
    step "base image $BASE_TAG: Debian $SUITE minbase + python3 (mmdebstrap)"
    t=$(date +%s)
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$WORK/base.tar"
    "${PODMAN[@]}" import --change 'CMD ["/bin/bash"]' "$WORK/base.tar" "$BASE_TAG" >/dev/null
    rm -f "$WORK/base.tar"
    elapsed "$t"
fi

step "wheelhouse (this host's pip, its index or wheel dirs)"
t=$(date +%s)
if ! python3 -m pip wheel --quiet --wheel-dir "$WORK/wheels" ".${EXTRAS:+[$EXTRAS]}" "setuptools>=77.0.1" wheel >"$WORK/pip.log" 2>&1; then
    cat "$WORK/pip.log" >&2
    exit 1
fi
elapsed "$t"

step "build context (sources only)"
context=$(mktemp -d "$WORK/context.XXXXXX")
trap 'rm -rf "$context"' EXIT
cp pyproject.toml setup.py README.md deploy/Dockerfile "$context/"
tar --exclude=__pycache__ --exclude='*.pyc' -cf - dra_driver vendors deviceclasses | tar -C "$context" -xf -

step "podman build $TAG (BASE_IMAGE=$BASE_TAG, offline)"
t=$(date +%s)
"${PODMAN[@]}" build --quiet --runtime runc --network none --ulimit nofile=1024:1024 \
    --build-arg BASE_IMAGE="$BASE_TAG" --build-arg EXTRAS="$EXTRAS" \
    --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheelhouse \
    --volume "$WORK/wheels:/wheelhouse:ro" \
    -f "$context/Dockerfile" -t "$TAG" "$context" >/dev/null
elapsed "$t"
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$TAG")
echo "   image size: $(( size / 1000000 )) MB ($size bytes)"

step "dra-driver demo (in the image)"
t=$(date +%s)
"${PODMAN[@]}" run "${RUN_FLAGS[@]}" "$TAG" demo | tail -n 5
elapsed "$t"

step "dra-driver discover --profile dgx-h100 (in the image)"
"${PODMAN[@]}" run "${RUN_FLAGS[@]}" "$TAG" discover --profile dgx-h100 -o table | head -n 12

step "image archive for a node's containerd"
# podman refuses to write a docker-archive over an existing file (a second run): save beside it, then
# rename, so a node importing the previous tar meanwhile never reads a half-written one
rm -f "$WORK/dra-driver-image.tar.new"
"${PODMAN[@]}" save --quiet --format docker-archive -o "$WORK/dra-driver-image.tar.new" "$TAG"
mv -f "$WORK/dra-driver-image.tar.new" "$WORK/dra-driver-image.tar"
echo "   $WORK/dra-driver-image.tar ($TAG); on each node: ctr -n k8s.io images import $WORK/dra-driver-image.tar"
