#!/usr/bin/env bash
# Builds the raftlog image: a static binary (CGO off) in a FROM scratch
# image, so nothing is pulled. Usage: deploy/image.sh [tag]
set -euo pipefail
tag=${1:-raftlog:dev}
here=$(cd "$(dirname "$0")" && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$here/.." && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$ctx/raftlog" ./cmd/raftlog)
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
mkdir -p "$ctx/data"
cp "$here/Dockerfile" "$ctx/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null
echo "$tag"
