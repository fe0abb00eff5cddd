"""Offline checks of the cluster configs in cluster/.

cluster/aws.yaml is validated the way `ray up` validates it before it talks to AWS: Ray's own
cluster-launcher JSON schema (ray/autoscaler/ray-schema.json, via
ray.autoscaler._private.util.prepare_config + validate_config), and each node_config against
botocore's local EC2 RunInstances model. cluster/rayjob.yaml has no schema shipped in any
installed package, so the fields KubeRay's ray.io/v1 RayJob CRD requires are asserted directly.
Nothing here touches the network.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
AWS_YAML = REPO / "cluster" / "aws.yaml"
RAYJOB_YAML = REPO / "cluster" / "rayjob.yaml"


# --------------------------------------------------------------------------- helpers


def _aws() -> dict:
    return yaml.safe_load(AWS_YAML.read_text())


def _docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(RAYJOB_YAML.read_text()) if d is not None]


def _rayjob() -> dict:
    jobs = [d for d in _docs() if d.get("kind") == "RayJob"]
    assert len(jobs) == 1, "cluster/rayjob.yaml must hold exactly one RayJob"
    return jobs[0]


def _ray_schema() -> dict:
    import ray.autoscaler

    path = Path(ray.autoscaler.__file__).parent / "ray-schema.json"
    return json.loads(path.read_text())


def _ray_up_validate(config: dict) -> None:
    """What `ray up` does before its AWS calls: fill defaults, then validate against the schema."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(config)))


def _all_groups(job: dict) -> list[tuple[str, dict]]:
    spec = job["spec"]["rayClusterSpec"]
    groups = [("head", spec["headGroupSpec"])]
    groups += [(g.get("groupName", "?"), g) for g in spec.get("workerGroupSpecs", [])]
    return groups


def _gpu_limit(container: dict) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(limits.get("nvidia.com/gpu", 0))


# --------------------------------------------------------------------------- aws.yaml


def test_aws_config_passes_ray_cluster_launcher_schema():
    import jsonschema

    config = _aws()
    jsonschema.validate(config, _ray_schema())  # the file exactly as written
    _ray_up_validate(config)  # after Ray merges in its AWS defaults


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(lambda c: c.update(not_a_ray_key=1), id="unknown-top-level-key"),
        pytest.param(
            lambda c: c["available_node_types"]["gpu_8x_h100"].update(min_worker=0),
            id="unknown-node-type-key",
        ),
        pytest.param(lambda c: c["docker"].update(imag="x"), id="unknown-docker-key"),
        pytest.param(
            lambda c: c["available_node_types"]["head"]["resources"].update(GPU=0.5),
            id="non-integer-resource",
        ),
    ],
)
def test_aws_config_broken_copy_fails_ray_schema(breakage):
    import jsonschema

    broken = _aws()
    breakage(broken)
    with pytest.raises(jsonschema.ValidationError):
        _ray_up_validate(broken)


def test_aws_node_configs_are_valid_ec2_run_instances_parameters():
    botocore_session = pytest.importorskip("botocore.session")
    from botocore.exceptions import ParamValidationError
    from botocore.validate import validate_parameters

    shape = botocore_session.get_session().get_service_model("ec2").operation_model("RunInstances").input_shape
    for _name, node_type in _aws()["available_node_types"].items():
        params = {**node_type["node_config"], "MinCount": 1, "MaxCount": 1}  # Ray adds the counts
        validate_parameters(params, shape)  # raises ParamValidationError, naming the bad key
    with pytest.raises(ParamValidationError):
        validate_parameters({**params, "InstanceMarketOption": {"MarketType": "spot"}}, shape)


def test_aws_cluster_layout():
    config = _aws()
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("GPU") == 0, "the head runs no GPU work"
    assert "InstanceMarketOptions" not in head["node_config"], "the head must not be spot"

    workers = {k: v for k, v in types.items() if k != config["head_node_type"]}
    assert workers
    for name, w in workers.items():
        assert w["resources"].get("GPU", 0) >= 1, name
        assert w["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot", name
        assert w.get("min_workers", 0) <= w["max_workers"], name
    assert max(w["resources"]["GPU"] for w in workers.values()) == 8, "need an 8-GPU node type for TP=8"
    assert sum(w["max_workers"] for w in workers.values()) <= config["max_workers"]
    assert config["idle_timeout_minutes"] > 0

    for name, t in types.items():
        arn = t["node_config"]["IamInstanceProfile"]["Arn"]
        assert re.fullmatch(r"arn:aws:iam::(<ACCOUNT_ID>|\d{12}):instance-profile/[\w+=,.@-]+", arn), (name, arn)

    assert any("raylc[vllm]" in cmd for cmd in config["setup_commands"])
    for local in config["file_mounts"].values():
        assert (REPO / local).resolve() == REPO, "file_mounts should sync the repo root"


# --------------------------------------------------------------------------- rayjob.yaml


def test_rayjob_has_the_fields_kuberay_requires():
    job = _rayjob()
    assert job["apiVersion"] == "ray.io/v1"
    assert job["kind"] == "RayJob"
    assert job["metadata"]["name"]
    spec = job["spec"]
    assert "raylc run" in spec["entrypoint"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert isinstance(spec["ttlSecondsAfterFinished"], int) and spec["ttlSecondsAfterFinished"] >= 0

    cluster = spec["rayClusterSpec"]
    head_containers = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    assert head_containers and all(c.get("image") for c in head_containers)
    assert all(_gpu_limit(c) == 0 for c in head_containers), "the head runs no GPU work"

    for name, group in _all_groups(job):
        params = group.get("rayStartParams", {})
        assert isinstance(params, dict), name
        bad = {k: v for k, v in params.items() if not isinstance(v, str)}
        assert not bad, f"{name}: rayStartParams values must be strings (quote them): {bad}"

    workers = cluster["workerGroupSpecs"]
    assert workers
    names = [g["groupName"] for g in workers]
    assert all(names) and len(set(names)) == len(names)
    for g in workers:
        assert isinstance(g["replicas"], int), g["groupName"]
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"], g["groupName"]
        containers = g["template"]["spec"]["containers"]
        assert containers and all(c.get("image") for c in containers), g["groupName"]
    gpu_groups = [g for g in workers if any(_gpu_limit(c) for c in g["template"]["spec"]["containers"])]
    assert gpu_groups, "a worker group must set nvidia.com/gpu limits"
    assert max(_gpu_limit(c) for g in gpu_groups for c in g["template"]["spec"]["containers"]) == 8


def test_rayjob_entrypoint_job_file_exists_and_parses():
    from raylc.spec import load_job

    argv = shlex.split(_rayjob()["spec"]["entrypoint"])
    assert argv[:2] == ["raylc", "run"]
    job_file = REPO / argv[2]
    assert job_file.is_file(), f"{argv[2]} is not in the repo"
    load_job(job_file)
    assert argv[argv.index("--store") + 1].startswith("s3://")


def test_rayjob_runtime_env_is_a_valid_ray_runtime_env():
    from packaging.requirements import Requirement
    from ray.runtime_env import RuntimeEnv

    env = yaml.safe_load(_rayjob()["spec"]["runtimeEnvYAML"])
    assert isinstance(env, dict) and ("working_dir" in env or "pip" in env)
    RuntimeEnv(**env)  # Ray's own validation (e.g. working_dir URIs must be archives)
    reqs = [Requirement(r) for r in env.get("pip", [])]
    assert any(r.name == "raylc" and "vllm" in r.extras for r in reqs)


def test_rayjob_uses_irsa_service_account_and_region():
    docs = _docs()
    accounts = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ServiceAccount"}
    for name, group in _all_groups(_rayjob()):
        pod = group["template"]["spec"]
        sa = pod.get("serviceAccountName")
        assert sa in accounts, f"{name}: serviceAccountName {sa!r} is not defined in the file"
        assert "eks.amazonaws.com/role-arn" in accounts[sa]["metadata"]["annotations"]
        for c in pod["containers"]:
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert env.get("AWS_REGION"), f"{name}/{c['name']}: set AWS_REGION for pyarrow's S3 client"


# --------------------------------------------------------------------------- both


@pytest.mark.parametrize("path", [AWS_YAML, RAYJOB_YAML], ids=lambda p: p.name)
def test_no_static_aws_credentials(path):
    text = path.read_text()
    for pattern in (r"AWS_ACCESS_KEY_ID", r"AWS_SECRET_ACCESS_KEY", r"AWS_SESSION_TOKEN",
                    r"aws_access_key_id", r"\bAKIA[0-9A-Z]{16}\b"):
        assert not re.search(pattern, text), f"{path.name}: use IAM roles, not keys ({pattern})"


def test_ray_versions_agree_across_configs():
    """Launcher image, RayJob rayVersion and RayJob images must name the same Ray release."""
    tag = re.compile(r"rayproject/ray:(\d+\.\d+\.\d+)")
    versions = set(tag.findall(_aws()["docker"]["image"]))
    job = _rayjob()
    versions.add(job["spec"]["rayClusterSpec"]["rayVersion"])
    for _, group in _all_groups(job):
        for c in group["template"]["spec"]["containers"]:
            versions.update(tag.findall(c["image"]))
    assert len(versions) == 1, versions


# --------------------------------------------------------------------------- CUDA / driver chain

# What each pinned vLLM release needs from the cluster, read from its wheel metadata:
# vllm 0.33.0 requires torch==2.14.0, whose Linux wheel depends on cuda-toolkit 13.0.x (so the
# host driver must be >= 580), and Python >= 3.11. Bumping the vllm pin in pyproject.toml fails
# these tests until an entry is added here and the images / driver notes in cluster/ (README
# section "Deployment: drivers, images, versions") are re-checked.
VLLM_NEEDS = {"0.33.0": {"cuda_major": 13, "min_driver": 580, "min_python_minor": 11}}
RAY_IMAGE = re.compile(
    r"rayproject/ray:(?P<ray>\d+\.\d+\.\d+)-py3(?P<py>\d+)-(?P<platform>cpu|gpu|cu(?P<cu>\d{3}))"
)
README = REPO / "cluster" / "README.md"


def _pinned_vllm() -> str:
    import tomllib
    from packaging.requirements import Requirement

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    reqs = [r for r in map(Requirement, extra) if r.name == "vllm"]
    assert len(reqs) == 1, extra
    specs = list(reqs[0].specifier)
    assert len(specs) == 1 and specs[0].operator == "==", f"pin vllm exactly, not {reqs[0]}"
    return specs[0].version


def _gpu_images() -> list[str]:
    """Images that run GPU work: the launcher's docker image and every RayJob container with GPUs."""
    images = [_aws()["docker"]["image"]]
    for _, group in _all_groups(_rayjob()):
        images += [c["image"] for c in group["template"]["spec"]["containers"] if _gpu_limit(c)]
    return images


def test_gpu_images_match_the_cuda_and_python_of_the_pinned_vllm():
    vllm = _pinned_vllm()
    assert vllm in VLLM_NEEDS, f"vllm=={vllm}: add what it needs to VLLM_NEEDS and re-check cluster/"
    needs = VLLM_NEEDS[vllm]
    images = _gpu_images()
    assert len(images) >= 2
    for image in images:
        m = RAY_IMAGE.fullmatch(image)
        assert m, f"{image}: expected rayproject/ray:<ray>-py3<minor>-cu<XY>"
        assert m["cu"], f"{image}: use an explicit -cuXY tag (-gpu aliases Ray's default CUDA 12.1 image)"
        cuda, py = needs["cuda_major"], needs["min_python_minor"]
        assert int(m["cu"][:-1]) == cuda, f"{image}: vllm=={vllm} wheels are CUDA {cuda}"
        assert int(m["py"]) >= py, f"{image}: vllm=={vllm} needs Python >= 3.{py}"


def test_cuda_image_regex_rejects_the_gpu_alias_and_cuda12():
    """Guard the guard: the tags the test above must refuse."""
    assert RAY_IMAGE.fullmatch("rayproject/ray:2.60.0-py311-gpu")["cu"] is None
    assert RAY_IMAGE.fullmatch("rayproject/ray:2.60.0-py311-cu128")["cu"][:-1] == "12"
    assert RAY_IMAGE.fullmatch("rayproject/ray:2.60.0-py311-cu130")["cu"][:-1] == "13"
    assert RAY_IMAGE.fullmatch("rayproject/ray:2.60.0-py311-cu130-extra") is None


def test_readme_names_the_configured_images_and_driver_floor():
    text = README.read_text()
    assert "## Deployment: drivers, images, versions" in text
    ray_version = _rayjob()["spec"]["rayClusterSpec"]["rayVersion"]
    tags = [m.group(0) for m in re.finditer(r"rayproject/ray:[0-9][\w.-]*[\w]", text)]
    assert tags, "the README should name the Ray images"
    stale = [t for t in tags if not t.startswith(f"rayproject/ray:{ray_version}-")]
    assert not stale, f"README names Ray images of another release than {ray_version}: {stale}"
    for image in _gpu_images():
        assert image in text, f"README does not mention the configured GPU image {image}"
    needs = VLLM_NEEDS[_pinned_vllm()]
    assert f"CUDA Version: {needs['cuda_major']}.x" in text  # how to check a node
    assert f"version {needs['min_driver']} or newer" in text  # NVIDIA: CUDA 13.x needs driver >= 580
