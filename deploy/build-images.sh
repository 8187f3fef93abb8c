#!/usr/bin/env bash
# Build the images of deploy/Dockerfile with whichever container builder is here: docker (its
# daemon answering), podman or buildah, tried in that order. From anywhere:
#   deploy/build-images.sh [REGISTRY [TAG]]      # default: your-registry (as the manifests), 0.1.0
#   TARGETS=orchestrator deploy/build-images.sh  # one target (default: "orchestrator ray")
#   deploy/build-images.sh --which               # print the builder, or why none (exit 3)
# Then push them and set the names in deploy/k8s/kustomization.yaml (`images:`) or the chart's
# values (`image.orchestrator.repository`, `image.ray.repository`).
set -euo pipefail

# The builder's name on stdout; with none usable, why on stdout and exit status 3.
pick_builder() {
    local why=()
    if command -v docker >/dev/null 2>&1; then
        if docker info >/dev/null 2>&1; then echo docker; return; fi
        why+=("docker is on PATH but its daemon does not answer (docker info failed)")
    fi
    if command -v podman >/dev/null 2>&1; then
        if podman info >/dev/null 2>&1; then echo podman; return; fi
        why+=("podman is on PATH but podman info failed")
    fi
    if command -v buildah >/dev/null 2>&1; then
        if buildah info >/dev/null 2>&1; then echo buildah; return; fi
        why+=("buildah is on PATH but buildah info failed")
    fi
    [ ${#why[@]} -eq 0 ] && why=("none of docker, podman or buildah is on PATH")
    local IFS=';'
    echo "no container builder: ${why[*]}"
    return 3
}

if [ "${1:-}" = --which ]; then
    pick_builder
    exit
fi

builder=$(pick_builder) || { echo "$builder" >&2; exit 3; }
registry=${1:-your-registry}
tag=${2:-0.1.0}
root=$(cd "$(dirname "$0")/.." && pwd)
for target in ${TARGETS:-orchestrator ray}; do
    name=$registry/sla-orchestrator
    [ "$target" = ray ] && name=$registry/sla-orchestrator-ray
    echo "$builder: building --target $target as $name:$tag" >&2
    # buildah's `bud` takes the same arguments as docker build.
    sub=build
    [ "$builder" = buildah ] && sub=bud
    "$builder" "$sub" -f "$root/deploy/Dockerfile" --target "$target" -t "$name:$tag" "$root"
done
