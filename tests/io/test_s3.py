"""The store on S3: a moto S3 server on 127.0.0.1, read back with Polars and DuckDB, outages, secrets."""

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import polars as pl
import pytest
import yaml
from conftest import S3_CREDS, S3_PORT
from polars.testing import assert_frame_equal

from raylc.evaluate import evaluate
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "raylc-test"
SMALL = {"suite.problems_per_task": 20, "suite.max_units": 200}  # the quickstart, smaller
# with point fits (the fits are compared, not the posterior, which would cost ~6 s a fit)
POINT_FIT = {"fit.uncertainty": "none"}
TABLES = ["build/problems.parquet", "sample/spans.parquet", "score/observations.parquet", "fits/problems.parquet",
          "fits/tasks.parquet", "report/categories.parquet", "report/recovery.parquet", "report/problems.parquet"]


class S3Server:
    def __init__(self, port: int):
        from moto.server import ThreadedMotoServer

        self._cls = ThreadedMotoServer
        self.port = port
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = None

    def start(self):
        self.server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self):
        self.server.stop()


@pytest.fixture(scope="module")
def s3():
    """The session's S3 endpoint (conftest: AWS_ENDPOINT_URL on 127.0.0.1, set before Ray
    started so that Ray workers reach it too) served by moto for this module."""
    server = S3Server(S3_PORT)
    server.start()
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    yield server, S3_CREDS
    server.stop()


@pytest.fixture(scope="module")
def runs(s3, ray_session, tmp_path_factory):
    """The quickstart written to S3 and to a local folder."""
    local = tmp_path_factory.mktemp("local")
    logs: list[str] = []
    base = ROOT / "jobs" / "quickstart.yaml"
    job_s3 = load_job(base, {"store.path": f"s3://{BUCKET}/runs", "ray.no_progress_timeout_s": 300, **SMALL,
                             **POINT_FIT})
    job_local = load_job(base, {"store.path": str(local), "ray.no_progress_timeout_s": 300, **SMALL, **POINT_FIT})
    evaluate(job_s3, "qs", log=logs.append)
    evaluate(job_local, "qs", log=logs.append)
    return local, logs


def _duckdb(s3):
    import duckdb
    import duckdb_ext

    server, creds = s3
    ext = glob.glob(os.path.join(duckdb_ext.__path__[0], "extensions", "*", "*", "httpfs.duckdb_extension"))[0]
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    con.execute(
        f"CREATE SECRET (TYPE s3, KEY_ID '{creds['AWS_ACCESS_KEY_ID']}', SECRET '{creds['AWS_SECRET_ACCESS_KEY']}', "
        f"ENDPOINT '127.0.0.1:{server.port}', URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')"
    )
    return con


@pytest.mark.ray
def test_s3_tables_equal_local_run_in_polars_and_duckdb(s3, runs):
    local, _ = runs
    con = _duckdb(s3)
    for rel in TABLES:
        remote = pl.read_parquet(f"s3://{BUCKET}/runs/qs/{rel}")
        assert remote.equals(pl.read_parquet(local / "qs" / rel)), rel
        via_duckdb = con.execute(f"SELECT * FROM 's3://{BUCKET}/runs/qs/{rel}'").pl()
        assert via_duckdb.height == remote.height and via_duckdb.columns == remote.columns, rel
    keys = ["task", "problem_id", "C", "start"]
    infer_s3 = pl.read_parquet(f"s3://{BUCKET}/runs/qs/infer/**/*.parquet", hive_partitioning=True).sort(keys)
    infer_local = pl.read_parquet(f"{local}/qs/infer/**/*.parquet", hive_partitioning=True).sort(keys)
    assert infer_s3.equals(infer_local)
    n = con.execute(f"SELECT count(*) FROM read_parquet('s3://{BUCKET}/runs/qs/infer/*/*.parquet', "
                    "hive_partitioning=true)").fetchone()[0]
    assert n == infer_local.height
    manifest = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key="runs/qs/manifest.json")["Body"].read())
    assert all(v["status"] == "done" for v in manifest["stages"].values())


@pytest.mark.ray
def test_credentials_never_written(s3, runs):
    _, creds = s3
    local, logs = runs
    client = boto3.client("s3")
    blobs = [client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
             for o in client.list_objects_v2(Bucket=BUCKET, Prefix="runs/")["Contents"]]
    blobs += [p.read_bytes() for p in local.rglob("*") if p.is_file()]
    blobs.append("\n".join(logs).encode())
    for secret in creds.values():
        assert not any(secret.encode() in b for b in blobs)


def _raylc(args, env_extra=None, **kw):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "raylc", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


@pytest.mark.ray
def test_s3_outage_mid_run_leaves_no_partial_table_and_resumes(s3, runs, ray_address, tmp_path):
    server, creds = s3
    # both runs join the session's Ray (as a job on a cluster does), which saves starting two more
    joined = {"RAY_ADDRESS": ray_address}
    job_file = tmp_path / "quickstart-small.yaml"
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    spec["suite"].update({k.split(".")[1]: v for k, v in SMALL.items()})
    spec["fit"].update({k.split(".")[1]: v for k, v in POINT_FIT.items()})
    job_file.write_text(yaml.safe_dump(spec))
    client = boto3.client("s3")
    store = f"s3://{BUCKET}/outage"
    proc = _raylc(["run", str(job_file), "--store", store, "--run-id", "o1"], joined)
    deadline = time.time() + 300
    while time.time() < deadline:  # stop the server while inference writes its shards
        try:
            body = client.get_object(Bucket=BUCKET, Key="outage/o1/manifest.json")["Body"].read()
            if json.loads(body)["stages"].get("infer", {}).get("status") == "running":
                break
        except client.exceptions.NoSuchKey:
            pass
        time.sleep(0.5)
    else:
        pytest.fail("the run never reached inference")
    server.stop()
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        server.start()
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: {store}/o1") and "storage error" in last and "--run-id o1" in last
    # no traceback: neither raylc's nor the one Ray Data logs for the failed read (kept in the
    # session's logs/ray-data/ files; the console shows it at --verbose)
    assert "Traceback" not in err and 'File "' not in err, err[-3000:]
    for secret in creds.values():
        assert secret not in out + err
    # every object that is visible is a complete table (or JSON), never a partial one
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="outage/o1/").get("Contents", [])]
    for key in keys:
        if key.endswith(".parquet"):
            pl.read_parquet(f"s3://{BUCKET}/{key}")
        elif key.endswith(".json"):
            json.loads(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    manifest = json.loads(client.get_object(Bucket=BUCKET, Key="outage/o1/manifest.json")["Body"].read())
    assert manifest["stages"].get("infer", {}).get("status") != "done"

    proc = _raylc(["run", str(job_file), "--store", store, "--run-id", "o1"], joined)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert "[build] done already, skipped" in err
    for rel in TABLES:
        assert pl.read_parquet(f"{store}/o1/{rel}").equals(pl.read_parquet(f"s3://{BUCKET}/runs/qs/{rel}")), rel


@pytest.mark.ray
def test_fit_command_reads_and_writes_s3(s3, runs):
    from raylc.dolce import fit_observations
    from raylc.dolce.options import FitOptions

    local, _ = runs
    out = f"s3://{BUCKET}/fit-out"
    proc = subprocess.run([sys.executable, "-m", "raylc", "fit", f"s3://{BUCKET}/runs/qs/score/observations.parquet",
                           "--out", out, "--no-ray", "--uncertainty", "none"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    problems, tasks = fit_observations(pl.read_parquet(local / "qs" / "score" / "observations.parquet"),
                                       FitOptions(uncertainty="none"))
    assert pl.read_parquet(f"{out}/problems.parquet").equals(problems)
    assert pl.read_parquet(f"{out}/tasks.parquet").equals(tasks)
    keys = {o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="fit-out/")["Contents"]}
    assert {"fit-out/categories.png", "fit-out/lambda_k.png"} <= keys


@pytest.mark.ray
# the DOLCE run on S3 above runs in CI; both families share the one inference path (pipeline.infer,
# its request table read from the store by the Ray workers) and the one store; RAYLC_SLOW=1 runs it
@pytest.mark.slow
def test_length_sweep_on_s3_equals_local(s3, ray_session, tmp_path):
    """A length-controlled run on S3: its request table is read from S3 by the Ray workers."""
    small = {"suite.lengths": [2048, 4096], "suite.base_lengths": [2048], "suite.samples_per_length": 6}
    base = ROOT / "jobs" / "helmet-recall.yaml"
    evaluate(load_job(base, {"store.path": f"s3://{BUCKET}/sweep", **small}), "h", log=lambda m: None)
    evaluate(load_job(base, {"store.path": str(tmp_path), **small}), "h", log=lambda m: None)
    for rel in ("build/samples.parquet", "score/scores.parquet"):
        assert pl.read_parquet(f"s3://{BUCKET}/sweep/h/{rel}").equals(pl.read_parquet(tmp_path / "h" / rel)), rel
    # the bootstrap's float sums may differ in the last bits between any two runs
    assert_frame_equal(pl.read_parquet(f"s3://{BUCKET}/sweep/h/report/summary.parquet"),
                       pl.read_parquet(tmp_path / "h" / "report" / "summary.parquet"), rel_tol=1e-9)
    keys = {o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="sweep/h/")["Contents"]}
    assert not any("/requests/" in k for k in keys)  # the request table is removed after the stage
