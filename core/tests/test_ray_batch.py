"""ort-core on Ray Data: a local 2-CPU cluster runs a classifier over a few thousand rows; results equal a plain
session's, refused rows are reported once each, a dying actor loses nothing and duplicates nothing, and the
``ort-core batch`` command reads, writes and summarizes."""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

ray = pytest.importorskip("ray", reason='Ray Data is an extra: pip install "ort-core[ray]"')
pytest.importorskip("ray.data", reason='Ray Data is an extra: pip install "ort-core[ray]"')
pq = pytest.importorskip("pyarrow.parquet", reason="comes with Ray Data")

import ort_core  # noqa: E402
from ort_core.integrations import ray as ort_ray  # noqa: E402

ROWS = 3000
FEATURES = 16
CLASSES = 10


def _classifier(batch: int | str = "N") -> bytes:
    """A seeded two-layer classifier: features [batch, 16] -> class probabilities [batch, 10]."""
    rng = np.random.default_rng(3)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [FEATURES, 32], rng.standard_normal((FEATURES, 32)).ravel())
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [32, CLASSES], rng.standard_normal((32, CLASSES)).ravel())
    nodes = [helper.make_node("MatMul", ["features", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    graph = helper.make_graph(nodes, "classifier",
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, [batch, FEATURES])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, CLASSES])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


X = np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    sess = ort_core.InferenceSession(_classifier(), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"features": x[k:k + 64]})[0] for k in range(0, len(x), 64)])


@pytest.fixture(scope="module")
def cluster():
    # a scheduling mistake shows as a hang, not a failure: stop the whole run with every thread's stack instead
    faulthandler.dump_traceback_later(600, exit=True)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()
    faulthandler.cancel_dump_traceback_later()


def _dataset(x: np.ndarray, blocks: int = 6):
    return ray.data.from_items([{"key": k, "x": row} for k, row in enumerate(x)], override_num_blocks=blocks)


def _by_key(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    rows = sorted(rows, key=lambda r: r["key"])
    return np.array([r["key"] for r in rows]), np.stack([r["probs"] for r in rows])


def test_outputs_equal_a_plain_session_over_a_few_thousand_rows(cluster):
    out = ort_ray.map_batches(_dataset(X), _classifier(), input_map={"x": "features"}, concurrency=2)
    keys, probs = _by_key(out.take_all())
    np.testing.assert_array_equal(keys, np.arange(ROWS))
    np.testing.assert_allclose(probs, _expected(X), rtol=1e-5, atol=1e-7)


def test_each_cpu_actor_takes_the_cpu_providers_and_one_thread_per_cpu_it_holds(cluster):
    model = ort_ray.share_model(_classifier())
    assert isinstance(model, ort_ray.StoredModel)  # bytes go into the object store once
    chosen = ort_ray.choose_providers(ort_core.get_available_providers(), 0)  # OpenVINO first where installed
    assert chosen[-1] == "CPUExecutionProvider"
    for cpus in (1, 2):
        actor = ray.remote(num_cpus=cpus)(ort_ray.OrtPredictor).remote(model)
        assert ray.get(actor.describe.remote(), timeout=120) == {"providers": chosen, "intra_op_num_threads": cpus}
        ray.kill(actor)


def test_gpu_actors_take_the_gpu_providers_or_say_none_is_there():
    assert ort_ray.choose_providers(["CUDAExecutionProvider", "CPUExecutionProvider"], 1) == [
        "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert ort_ray.choose_providers(["OpenVINOExecutionProvider", "CPUExecutionProvider"], 0) == [
        "OpenVINOExecutionProvider", "CPUExecutionProvider"]
    with pytest.raises(RuntimeError, match="given 1 GPU.* no GPU provider is available"):
        ort_ray.choose_providers(["CPUExecutionProvider"], 1)


def test_a_fixed_batch_model_from_a_path_pads_the_last_partial_batch(cluster, tmp_path):
    path = tmp_path / "fixed8.onnx"
    path.write_bytes(_classifier(batch=8))
    assert ort_ray.fixed_batch_size(str(path)) == 8
    x = X[:1001]
    out = ort_ray.map_batches(_dataset(x, blocks=3), str(path), input_map={"x": "features"}, batch_size=50,
                              concurrency=2)
    keys, probs = _by_key(out.take_all())
    assert len(keys) == 1001
    np.testing.assert_allclose(probs, _expected(x), rtol=1e-5, atol=1e-7)


def _with_bad_rows(x: np.ndarray, bad: list[int]) -> list:
    rows = [row for row in x]
    for k in bad:
        rows[k] = x[k][:FEATURES - 1]  # one feature short
    return rows


def test_refused_rows_are_skipped_and_reported_with_their_id_and_reason(cluster):
    bad = [5, 777, 2999]
    rows = _with_bad_rows(X, bad)
    ds = ray.data.from_items([{"key": k, "x": r} for k, r in enumerate(rows)], override_num_blocks=6)
    log = ort_ray.FailureLog.remote()
    out = ort_ray.map_batches(ds, _classifier(), input_map={"x": "features"}, id_column="key", on_error="skip",
                              failure_log=log, concurrency=2)
    keys, probs = _by_key(out.take_all())
    good = np.setdiff1d(np.arange(ROWS), bad)
    np.testing.assert_array_equal(keys, good)
    np.testing.assert_allclose(probs, _expected(X[good]), rtol=1e-5, atol=1e-7)
    failures = sorted(ray.get(log.rows.remote()), key=lambda f: f["row"])
    assert [f["row"] for f in failures] == bad
    assert all("input 'features' takes rows of shape [16], got [15]" in f["reason"] for f in failures)


def test_without_an_id_column_skipped_rows_are_named_by_an_added_row_id(cluster):
    rows = _with_bad_rows(X[:200], [10])
    ds = ray.data.from_items([{"x": r} for r in rows])
    log = ort_ray.FailureLog.remote()
    out = ort_ray.map_batches(ds, _classifier(), on_error="skip", failure_log=log, concurrency=1).take_all()
    assert len(out) == 199 and ort_ray.ROW_ID in out[0]
    (failure,) = ray.get(log.rows.remote())
    assert failure["row"] not in {r[ort_ray.ROW_ID] for r in out}


def test_on_error_fail_stops_the_run_naming_the_row(cluster):
    rows = _with_bad_rows(X[:300], [42])
    ds = ray.data.from_items([{"key": k, "x": r} for k, r in enumerate(rows)])
    out = ort_ray.map_batches(ds, _classifier(), id_column="key", concurrency=1)
    with pytest.raises(Exception, match=r"row 42 refused: column 'x': input 'features' takes rows of shape"):
        out.take_all()


def test_the_same_adapter_runs_onnxruntime_for_comparison(cluster):
    pytest.importorskip("onnxruntime")
    out = ort_ray.map_batches(_dataset(X[:500], blocks=2), _classifier(), runtime="onnxruntime",
                              input_map={"x": "features"}, concurrency=2)
    keys, probs = _by_key(out.take_all())
    np.testing.assert_allclose(probs, _expected(X[:500]), rtol=1e-5, atol=1e-6)


class _DiesOnce(ort_ray.OrtPredictor):
    """Kills its own process on its first batch, once for the whole cluster (a marker file says it happened)."""

    marker = ""

    def __call__(self, batch):
        if not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write("died")
            os._exit(1)
        return super().__call__(batch)


def test_an_actor_that_dies_is_replaced_its_batch_retried_and_nothing_is_written_twice(cluster, tmp_path):
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    _DiesOnce.marker = str(tmp_path / "died")
    bad = [100, 2000]
    ds = ray.data.from_items([{"key": k, "x": r} for k, r in enumerate(_with_bad_rows(X, bad))],
                             override_num_blocks=6)
    log = ort_ray.FailureLog.remote()
    ort_ray.map_batches(ds, _classifier(), id_column="key", on_error="skip", failure_log=log, concurrency=2,
                        predictor=_DiesOnce).write_parquet(str(tmp_path / "out"))
    assert os.path.exists(_DiesOnce.marker)  # an actor did die
    table = pq.read_table(str(tmp_path / "out"))
    keys = np.sort(table.column("key").to_numpy())
    np.testing.assert_array_equal(keys, np.setdiff1d(np.arange(ROWS), bad))  # every row once
    assert sorted(f["row"] for f in ray.get(log.rows.remote())) == bad


# -- the command ------------------------------------------------------------------------------------------------


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_DATA_DISABLE_PROGRESS_BARS": "1"}
    return subprocess.run([sys.executable, "-m", "ort_core.cli", "batch", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_the_batch_command_writes_parquet_and_lists_refused_rows(tmp_path):
    import pyarrow as pa

    (tmp_path / "model.onnx").write_bytes(_classifier())
    x = X[:400]
    rows = _with_bad_rows(x, [7])
    pq.write_table(pa.table({"key": np.arange(400), "features": [r.tolist() for r in rows]}), tmp_path / "in.parquet")
    done = _cli("model.onnx", "-i", "in.parquet", "-o", "out", "--on-error", "skip", "--id-column", "key",
                "--concurrency", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows written: 399 to out (parquet)" in done.stdout and "rows refused: 1" in done.stdout
    table = pq.read_table(tmp_path / "out")
    order = np.argsort(table.column("key").to_numpy())
    keys = table.column("key").to_numpy()[order]
    probs = np.stack(table.column("probs").to_numpy(zero_copy_only=False))[order]
    good = np.setdiff1d(np.arange(400), [7])
    np.testing.assert_array_equal(keys, good)
    np.testing.assert_allclose(probs, _expected(x[good]), rtol=1e-5, atol=1e-7)
    (failure,) = [json.loads(line) for line in (tmp_path / "out" / "_failures.jsonl").read_text().splitlines()]
    assert failure["row"] == 7 and "got [15]" in failure["reason"]
    again = _cli("model.onnx", "-i", "in.parquet", "-o", "out", cwd=tmp_path)
    assert again.returncode == 1 and "output folder 'out' already holds files" in again.stderr


def test_the_batch_command_reads_csv_columns_as_features_and_writes_csv(tmp_path):
    import onnx

    model = onnx.load_from_string(_classifier())
    model.graph.node.append(helper.make_node("ArgMax", ["probs"], ["top"], axis=1, keepdims=1))
    model.graph.output.append(helper.make_tensor_value_info("top", TensorProto.INT64, ["N", 1]))
    onnx.save(model, tmp_path / "model.onnx")
    x = np.round(X[:250], 3)
    header = "key," + ",".join(f"f{i}" for i in range(FEATURES))
    lines = [f"{k}," + ",".join(f"{v:.3f}" for v in row) for k, row in enumerate(x)]
    (tmp_path / "in.csv").write_text("\n".join([header, *lines]) + "\n")
    done = _cli("model.onnx", "-i", "in.csv", "-o", "out", "--format", "csv", "--id-column", "key",
                "--output-map", "top=top", cwd=tmp_path)  # the 16 feature columns stack into the input in order
    assert done.returncode == 0, done.stderr[-3000:]
    got = {}
    for path in (tmp_path / "out").glob("*.csv"):
        for line in path.read_text().splitlines()[1:]:
            key, top = line.split(",")
            got[int(key)] = int(top)
    assert got == dict(enumerate(np.argmax(_expected(x), axis=1).tolist()))
    done = _cli("model.onnx", "-i", "in.csv", "-o", "out2", "--format", "csv", cwd=tmp_path)
    assert done.returncode == 1 and "output 'probs' has rows of shape [10]: CSV holds one value" in done.stderr


def test_the_batch_command_reads_a_folder_of_images_at_the_models_size(tmp_path):
    from PIL import Image

    from ort_core.cli import demo_model_path

    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (12, 28, 28), dtype=np.uint8)
    for k, p in enumerate(pixels):
        Image.fromarray(p).save(images / f"{k:02d}.png")
    done = _cli(demo_model_path(), "-i", "images", "-o", "out", "--mean", "0.5", "--std", "0.25", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows written: 12" in done.stdout
    table = pq.read_table(tmp_path / "out")
    sess = ort_core.InferenceSession(demo_model_path())
    name, out_name = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    for path, probs in zip(table.column("path").to_pylist(), table.column(out_name).to_numpy(zero_copy_only=False)):
        k = int(os.path.basename(path)[:2])
        x = ((pixels[k].astype(np.float32) / 255 - 0.5) / 0.25)[None, None]
        np.testing.assert_allclose(np.asarray(probs).ravel(), sess.run(None, {name: x})[0].ravel(), rtol=1e-5,
                                   atol=1e-6)


def test_the_batch_command_names_bad_arguments_without_starting_a_cluster(tmp_path):
    (tmp_path / "model.onnx").write_bytes(_classifier())
    done = _cli("model.onnx", "-i", "missing", "-o", "out", cwd=tmp_path)
    assert done.returncode == 1 and "input 'missing' does not exist" in done.stderr
    done = _cli("model.onnx", "-i", "model.onnx", "-o", "out", cwd=tmp_path)
    assert done.returncode == 1 and "holds no .parquet, .csv or image" in done.stderr
    done = _cli("model.onnx", "-i", ".", "-o", "out", "--input-map", "nope", cwd=tmp_path)
    assert done.returncode == 1 and "--input-map expects COLUMN=INPUT, got 'nope'" in done.stderr


def test_without_ray_the_command_says_which_extra_to_install(monkeypatch, tmp_path, capsys):
    from ort_core import cli

    monkeypatch.setitem(sys.modules, "ray", None)
    (tmp_path / "model.onnx").write_bytes(_classifier())
    assert cli.main(["batch", str(tmp_path / "model.onnx"), "-i", str(tmp_path), "-o", str(tmp_path / "o")]) == 1
    assert 'needs Ray Data: pip install "ort-core[ray]"' in capsys.readouterr().err
