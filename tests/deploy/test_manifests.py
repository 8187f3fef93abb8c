"""The Kubernetes manifests (deploy/k8s) render, are valid, and say what the design needs.

Rendering is ``kubectl kustomize deploy/k8s``; every object is then validated offline: core
kinds against the Kubernetes JSON schemas that ``kubernetes-validate`` ships (strict: an unknown
field is an error, as ``kubectl apply`` with server-side field validation makes it), and the
RayCluster against the KubeRay CRD's ``openAPIV3Schema`` (vendored in ``crds/``), with unknown
fields refused the same way. Then the semantic checks: two orchestrator replicas that stand by
for each other, passwords and tokens only from Secrets, Redis append-only, the checkpoint volume
mounted everywhere, GPU limits on the worker group and Ray token auth on every Ray container.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
CRD_FILE = Path(__file__).parent / "crds" / "ray.io_rayclusters.yaml"
K8S_DEFS = "https://kubernetes.io/api/_definitions.json"

# The oldest Kubernetes the manifests promise to work with, and the newest schemas shipped.
KUBERNETES_VERSIONS = ("1.29", "latest")
SECRETS = {("orch-redis", "password"), ("orch-ray-token", "auth_token")}
"""Every (Secret, key) the manifests read: created by hand (docs/operator-guide.md), never
shipped."""

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="kubectl is not installed, so deploy/k8s cannot be rendered (kubectl kustomize)",
)

Doc = dict[str, Any]


# -- rendering and lookups -----------------------------------------------------------------


def render(path: Path = K8S) -> list[Doc]:
    """The objects ``kubectl kustomize path`` renders."""
    out = subprocess.run(
        ["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, f"kubectl kustomize {path} failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return render()


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    """The object of ``kind`` named ``name`` (generated names match on their prefix)."""
    hits = [
        d
        for d in docs
        if d["kind"] == kind and re.fullmatch(rf"{name}(-[a-z0-9]{{10}})?", d["metadata"]["name"])
    ]
    assert len(hits) == 1, f"expected one {kind} {name}, found {len(hits)}"
    return hits[0]


def pod_specs(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    """(where, pod spec) of every pod template: workloads and the RayCluster's groups."""
    for d in docs:
        where = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] in ("Deployment", "StatefulSet"):
            yield where, d["spec"]["template"]["spec"]
        elif d["kind"] == "RayCluster":
            yield f"{where}/head", d["spec"]["headGroupSpec"]["template"]["spec"]
            for group in d["spec"]["workerGroupSpecs"]:
                yield f"{where}/{group['groupName']}", group["template"]["spec"]


def containers(docs: list[Doc]) -> Iterator[tuple[str, Doc, Doc]]:
    """(where, pod spec, container) of every container in every pod template."""
    for where, spec in pod_specs(docs):
        for c in spec.get("initContainers", []) + spec["containers"]:
            yield f"{where}/{c['name']}", spec, c


def env_of(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


def ray_containers(docs: list[Doc]) -> list[tuple[str, Doc, Doc]]:
    return [c for c in containers(docs) if c[0].startswith("RayCluster/")]


# -- schema validation ---------------------------------------------------------------------


def strict_crd_schema(schema: Any) -> Any:
    """An openAPIV3Schema as JSON Schema, refusing unknown fields.

    The API server prunes (or, with strict field validation, refuses) fields a structural
    schema does not name; JSON Schema accepts them unless ``additionalProperties`` is false.
    ``nullable`` becomes a ``null`` type.
    """
    if isinstance(schema, list):
        return [strict_crd_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_crd_schema(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@pytest.fixture(scope="module")
def raycluster_validator() -> Any:
    """A validator for RayCluster objects: the CRD's v1 schema, Kubernetes types resolved."""
    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = strict_crd_schema(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    latest = utils.latest_version()
    defs = utils.schema_contents(
        f"kubernetes-json-schema/v{latest}-local-strict/_definitions.json", latest
    )
    registry = Registry().with_resource(K8S_DEFS, Resource.from_contents(defs))
    return jsonschema.Draft202012Validator(schema, registry=registry)


def schema_errors(doc: Doc, version: str, raycluster_validator: Any) -> list[str]:
    """What is wrong with ``doc`` against its schema (empty: valid)."""
    import kubernetes_validate
    from kubernetes_validate import utils

    name = f"{doc['kind']}/{doc['metadata']['name']}"
    if (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayCluster"):
        return [
            f"{name}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in raycluster_validator.iter_errors(doc)
        ]
    if version == "latest":
        version = utils.latest_version()
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{name} (Kubernetes {version}): {'.'.join(map(str, e.path))}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{name}: unknown kind or apiVersion ({e.message})"]
    return []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_is_schema_valid(
    docs: list[Doc], version: str, raycluster_validator: Any
) -> None:
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert ("ray.io/v1", "RayCluster") in kinds and ("apps/v1", "Deployment") in kinds
    errors = [msg for d in docs for msg in schema_errors(d, version, raycluster_validator)]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(
    ("kind", "mistake"),
    [
        ("Deployment", lambda d: d["spec"].update(replica=2)),  # a typo'd field
        ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name")),
        ("RayCluster", lambda d: d["spec"]["workerGroupSpecs"][0].update(replica=2)),
        ("RayCluster", lambda d: d["spec"]["workerGroupSpecs"][0].pop("groupName")),
        ("RayCluster", lambda d: d["spec"]["workerGroupSpecs"][0].update(minReplicas="0")),
        (  # a typo inside the pod template: checked through the Kubernetes PodSpec schema
            "RayCluster",
            lambda d: d["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(
                volumeMount=[]
            ),
        ),
    ],
)
def test_validation_refuses_broken_objects(
    docs: list[Doc], kind: str, mistake: Any, raycluster_validator: Any
) -> None:
    # The checks above have teeth: each of these mistakes is reported.
    (doc,) = [copy.deepcopy(d) for d in docs if d["kind"] == kind]
    mistake(doc)
    assert schema_errors(doc, "latest", raycluster_validator)


# -- semantics -----------------------------------------------------------------------------


def test_orchestrator_runs_two_replicas_one_standing_by(docs: list[Doc]) -> None:
    deploy = find(docs, "Deployment", "orch")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    (orch,) = pod["containers"]
    assert orch["command"] == ["orch", "up"]
    (ref,) = orch["envFrom"]
    settings = find(docs, "ConfigMap", "orch-settings")
    assert ref["configMapRef"]["name"] == settings["metadata"]["name"]
    data = settings["data"]
    assert data["ORCH_STANDBY"].lower() in ("1", "true", "yes")  # the second replica waits
    assert data["ORCH_API_ADDRESS"] == "0.0.0.0:8321"  # reachable through the Service
    ray = find(docs, "RayCluster", "orch-pool")
    assert data["RAY_ADDRESS"] == f"ray://{ray['metadata']['name']}-head-svc:10001"
    # A node drain never takes both; the standby prefers another node.
    pdb = find(docs, "PodDisruptionBudget", "orch")
    assert pdb["spec"]["minAvailable"] == 1
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pod["affinity"]["podAntiAffinity"]
    # The API Service selects these pods on the container's port.
    svc = find(docs, "Service", "orch-api")
    assert svc["spec"]["selector"].items() <= labels.items()
    (port,) = svc["spec"]["ports"]
    by_name = {p["name"]: p["containerPort"] for p in orch["ports"]}
    assert by_name[port["targetPort"]] == 8321
    assert orch["readinessProbe"]["httpGet"]["path"] == "/healthz"


def test_secrets_are_referenced_never_inline(docs: list[Doc]) -> None:
    assert not [d for d in docs if d["kind"] == "Secret"], "Secrets are created by hand"
    used = set()
    for where, _, c in containers(docs):
        env = c.get("env", [])
        for i, e in enumerate(env):
            if re.search("PASSWORD|TOKEN|AUTH$", e["name"]):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                assert ref is not None and "value" not in e, f"{where}: {e['name']} is inline"
                used.add((ref["name"], ref["key"]))
            if e["name"] == "REDIS_URL":
                # Composed by Kubernetes from the Secret: $(VAR) expands only for VAR defined
                # earlier in the same list.
                assert "$(REDIS_PASSWORD)" in e["value"], f"{where}: REDIS_URL has no password"
                assert "REDIS_PASSWORD" in [x["name"] for x in env[:i]], where
    assert used == SECRETS
    # Redis itself: the password is an argument expanded from the Secret, not in redis.conf.
    redis = find(docs, "StatefulSet", "orch-redis")["spec"]["template"]["spec"]["containers"][0]
    args = redis["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        for text in cm["data"].values():
            assert not re.search(r"^\s*requirepass\s", text, re.M), "password in a ConfigMap"
            assert "redis://:" not in text.replace("redis://:$PASSWORD@", "")


def test_the_operator_guide_creates_every_secret_the_manifests_read() -> None:
    guide = (ROOT / "docs" / "operator-guide.md").read_text()  # "Deploying on Kubernetes"
    for name, key in SECRETS:
        assert re.search(
            rf"kubectl -n orch create secret generic {name}\s+\\?\s*--from-literal={key}=",
            guide,
        ), f"docs/operator-guide.md does not create Secret {name} (key {key})"


def test_redis_is_append_only_on_a_persistent_disk(docs: list[Doc]) -> None:
    sts = find(docs, "StatefulSet", "orch-redis")
    pod = sts["spec"]["template"]["spec"]
    (redis,) = pod["containers"]
    conf_path = redis["args"][0]
    mounts = {m["mountPath"]: m["name"] for m in redis["volumeMounts"]}
    conf_volume = mounts[str(Path(conf_path).parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == conf_volume]
    cm = find(docs, "ConfigMap", "orch-redis-conf")
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    conf = dict(
        line.split(None, 1)
        for line in cm["data"][Path(conf_path).name].splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    assert conf["appendonly"] == "yes"
    assert conf["maxmemory-policy"] == "noeviction"
    # The append-only file's directory is a claim of its own.
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert mounts[conf["dir"]] == claim["metadata"]["name"]
    assert find(docs, "Service", "orch-redis")["spec"]["selector"].items() <= (
        sts["spec"]["template"]["metadata"]["labels"].items()
    )


def test_checkpoint_volume_is_shared_and_mounted_at_the_data_dir(docs: list[Doc]) -> None:
    pvc = find(docs, "PersistentVolumeClaim", "orch-shared")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    data_dirs = {"orch": find(docs, "ConfigMap", "orch-settings")["data"]["ORCH_DATA_DIR"]}
    checked = []
    for where, spec, c in containers(docs):
        if "redis" in where:
            continue
        env = env_of(c)
        data_dir = env["ORCH_DATA_DIR"]["value"] if "ORCH_DATA_DIR" in env else data_dirs["orch"]
        claims = {
            v["name"]
            for v in spec["volumes"]
            if v.get("persistentVolumeClaim", {}).get("claimName") == "orch-shared"
        }
        mounted = [m["mountPath"] for m in c["volumeMounts"] if m["name"] in claims]
        assert any(Path(m) in Path(data_dir).parents for m in mounted), f"{where}: {data_dir}"
        checked.append(where)
    assert len(checked) >= 3  # the orchestrator, the Ray head, the GPU workers


def test_gpu_worker_group_asks_for_gpus(docs: list[Doc]) -> None:
    ray = find(docs, "RayCluster", "orch-pool")
    assert ray["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    (gpu,) = [g for g in ray["spec"]["workerGroupSpecs"] if g["groupName"] == "gpu"]
    assert 0 <= gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"]
    (worker,) = gpu["template"]["spec"]["containers"]
    resources = worker["resources"]
    assert int(resources["limits"]["nvidia.com/gpu"]) > 0
    # Extended resources cannot be overcommitted: a request, if given, equals the limit.
    assert (
        resources["requests"].get("nvidia.com/gpu", resources["limits"]["nvidia.com/gpu"])
        == (resources["limits"]["nvidia.com/gpu"])
    )
    tolerations = gpu["template"]["spec"]["tolerations"]
    assert any(t["key"] == "nvidia.com/gpu" for t in tolerations)


def test_ray_token_auth_on_every_ray_container_and_the_client(docs: list[Doc]) -> None:
    clients = ray_containers(docs) + [
        c for c in containers(docs) if c[0].startswith("Deployment/orch/")
    ]
    assert len(clients) >= 3
    for where, _, c in clients:
        env = env_of(c)
        assert env.get("RAY_AUTH_MODE", {}).get("value") == "token", where
        ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("orch-ray-token", "auth_token"), where


def test_images_are_set_by_the_kustomization(docs: list[Doc]) -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    images = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in kustomization["images"]}
    orch = find(docs, "Deployment", "orch")["spec"]["template"]["spec"]["containers"][0]
    assert orch["image"] == images["sla-orchestrator"]
    for where, _, c in ray_containers(docs):
        assert c["image"] == images["sla-orchestrator-ray"], where
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "FROM python:3.11-slim AS orchestrator" in dockerfile
    # CPU torch first, so installing the package does not pull the CUDA build.
    assert dockerfile.index("torch==2.13.0") < dockerfile.index('pip install ".[server]"')
