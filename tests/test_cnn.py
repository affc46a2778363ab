"""Models other than the MLP: the CNN computes the convolutions written out in numpy,
trains through `fit` as the MLP does (members, precision, checkpoints, resume,
distillation), and a model of your own trains, saves and loads; exports built on the
MLP's layers refuse another model in one line."""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from helpers import at_once, classes_agree, float32_widening, numpy_gelu, run_cli_here, same_arrays


def numpy_cnn(model, images):
    """The CNN's logits in float64 numpy: each 3 x 3 convolution of stride 2 as a sum
    over its nine taps of the image padded by a pixel of zeros, GELU (tanh form), then
    the head."""
    x = np.asarray(images, np.float64).reshape(-1, 28, 28, 1)
    for kernel, bias in zip(model.kernels, model.biases, strict=True):
        k, side = np.asarray(kernel, np.float64), (x.shape[1] + 1) // 2
        padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        taps = [
            padded[:, i : i + 2 * side : 2, j : j + 2 * side : 2] @ k[i, j]
            for i in range(3)
            for j in range(3)
        ]
        x = numpy_gelu(sum(taps) + np.asarray(bias, np.float64))
    h = x.reshape(len(x), -1)
    for i, layer in enumerate(model.head.layers):
        h = h @ np.asarray(layer.weight, np.float64).T + np.asarray(layer.bias, np.float64)
        h = numpy_gelu(h) if i < len(model.head.layers) - 1 else h
    return h


@pytest.mark.parametrize("channels", [(4,), (4, 8), (2, 3, 5)])
def test_the_cnn_computes_its_convolutions_as_written_out(channels):
    from eqx_fmnist.model import CNN, count_params

    model = at_once(lambda key: CNN(channels, (16,), key=key), jr.key(0))
    x = np.random.default_rng(1).uniform(size=(6, 784)).astype(np.float32)
    side = {1: 14, 2: 7, 3: 4}[len(channels)]
    convs = sum(9 * a * b + b for a, b in zip((1, *channels), channels, strict=False))
    assert count_params(model) == convs + channels[-1] * side**2 * 16 + 16 + 16 * 10 + 10
    atol = 2e-5 * float32_widening()  # IEEE float32 here; a TPU's is looser
    vmapped, batched = at_once(lambda m, x: (jax.vmap(m)(x), m.forward_batch(x)), model, x)
    np.testing.assert_allclose(vmapped, numpy_cnn(model, x), atol=atol)
    np.testing.assert_allclose(batched, numpy_cnn(model, x), atol=atol)
    std = float(model.kernels[0].std())  # He-normal: sqrt(2 / (9 * 1))
    assert abs(std - np.sqrt(2 / 9)) < 0.35 * np.sqrt(2 / 9)


@pytest.mark.parametrize("form", ["patches", "native", "native_forward"])
def test_each_form_of_the_convolution_is_the_convolution_and_its_gradient(form):
    """`conv_stride2` in each form against float64 numpy: the maps (a sum over the
    nine taps of the padded input) and the kernel's gradient of a weighted sum of them
    (the taps' inputs times the weights), each within float32's rounding of its sum
    (`k` terms: `sqrt(k) u` of the terms' magnitudes, times `SAFETY`); a transposed tap
    or a flipped kernel is off by the terms' own size (both tried: each fails)."""
    from eqx_fmnist.model import conv_stride2

    from helpers import F32_U, SAFETY

    rng = np.random.default_rng(0)
    y, kernel = rng.normal(size=(3, 7, 7, 4)), rng.normal(size=(3, 3, 4, 5))
    w = rng.normal(size=(3, 4, 4, 5))  # the weights of the sum the gradient is of
    padded = np.pad(y, ((0, 0), (1, 1), (1, 1), (0, 0)))
    taps = {(i, j): padded[:, i : i + 8 : 2, j : j + 8 : 2] for i in range(3) for j in range(3)}
    want = sum(t @ kernel[i, j] for (i, j), t in taps.items())
    size = sum(np.abs(t) @ np.abs(kernel[i, j]) for (i, j), t in taps.items())
    y32, kernel32 = y.astype(np.float32), kernel.astype(np.float32)
    got = at_once(lambda y, k: conv_stride2(y, k, form=form), y32, kernel32)
    u = F32_U * float32_widening()
    np.testing.assert_array_less(np.abs(np.asarray(got) - want), SAFETY * np.sqrt(37) * u * size)
    weighted = jax.grad(lambda k, y: jnp.sum(conv_stride2(y, k, form=form) * w))
    grad = at_once(weighted, kernel32, y32)
    want = np.stack(
        [np.stack([np.einsum("bhwc,bhwo->co", taps[i, j], w) for j in range(3)]) for i in range(3)]
    )
    size = np.stack(
        [
            np.stack([np.einsum("bhwc,bhwo->co", np.abs(taps[i, j]), np.abs(w)) for j in range(3)])
            for i in range(3)
        ]
    )
    np.testing.assert_array_less(
        np.abs(np.asarray(grad) - want), SAFETY * np.sqrt(49) * u * size + 1e-30
    )


def test_the_convolution_lowers_to_patches_on_a_cpu_and_to_a_convolution_elsewhere():
    """The default form is chosen when the program is lowered: the same traced CNN holds
    XLA's convolution when lowered for a TPU or a GPU and none for a CPU; its gradient
    holds none anywhere (the patches' pullback: XLA's convolution gradient compiled for
    minutes on a TPU); a bfloat16 policy keeps the patches everywhere, and asking it for
    a native form is refused."""
    from eqx_fmnist.model import CNN, conv_stride2
    from eqx_fmnist.precision import Policy

    model, x = CNN((4, 8), (16,), key=jr.key(0)), jnp.zeros((2, 784))
    traced = jax.jit(lambda m, x: m.forward_batch(x)).trace(model, x)
    lowered = {p: traced.lower(lowering_platforms=(p,)).as_text() for p in ("cpu", "tpu", "cuda")}
    assert "stablehlo.convolution" not in lowered["cpu"]
    assert "stablehlo.convolution" in lowered["tpu"] and "stablehlo.convolution" in lowered["cuda"]
    grad = jax.jit(jax.grad(lambda m, x: jnp.sum(m.forward_batch(x) ** 2))).trace(model, x)
    for p in ("tpu", "cuda"):
        assert "stablehlo.convolution" not in grad.lower(lowering_platforms=(p,)).as_text()
    bf16 = Policy.from_string("p=f32,c=bf16,o=f32")
    low = jax.jit(lambda m, x: m.forward_batch(x, policy=bf16)).trace(model, x)
    assert "stablehlo.convolution" not in low.lower(lowering_platforms=("tpu",)).as_text()
    y, kernel = jnp.zeros((1, 7, 7, 1)), jnp.zeros((3, 3, 1, 2))
    for form in ("native", "native_forward"):
        with pytest.raises(ValueError, match="native convolution is a float32 policy's"):
            conv_stride2(y, kernel, bf16, form=form)
    with pytest.raises(ValueError, match="one of patches, native, native_forward or None"):
        unchecked = getattr(conv_stride2, "__wrapped__", conv_stride2)  # past the hook's check
        unchecked(y, kernel, form="nativ")


def test_the_default_cnn_and_bad_channels():
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.model import CNN, count_params

    assert count_params(CNN(key=jr.key(0))) == 9 * 32 + 32 + 9 * 32 * 64 + 64 + 3136 * 256 + 256 + (
        256 * 128 + 128 + 128 * 10 + 10
    )
    for bad in [(), (4, 4, 4, 4), (0,), (3, -1)]:
        with pytest.raises(ValueError, match="`channels` must be one to three positive ints"):
            TrainConfig(model="cnn", channels=bad)
    with pytest.raises(ValueError, match="`model` must be one of 'mlp', 'cnn'"):
        TrainConfig.from_dict({"model": "resnet"})


def test_the_cnn_in_bfloat16_accumulates_in_float32():
    from eqx_fmnist.model import CNN
    from eqx_fmnist.precision import Policy

    model = at_once(lambda key: CNN((4, 8), (16,), key=key), jr.key(0))
    x = np.random.default_rng(1).uniform(size=(8, 784)).astype(np.float32)
    policy = Policy.from_string("p=f32,c=bf16,o=f32")
    low = at_once(lambda m, x: m.forward_batch(x, policy=policy), model, x)
    assert low.dtype == jnp.float32
    np.testing.assert_allclose(low, numpy_cnn(model, x), atol=0.05)
    grads = at_once(eqx.filter_grad(lambda m, x: m.forward_batch(x, policy=policy).sum()), model, x)
    assert all(g.dtype == jnp.float32 for g in grads.kernels)


def test_a_cnn_trains_members_and_resumes_exactly_from_its_checkpoint(small, tmp_path):
    import eqx_fmnist as ef
    from eqx_fmnist.checkpoint import load_checkpoint, save_checkpoint

    from helpers import SMALL_CNN, small_config

    config = small_config(**SMALL_CNN)
    splits = ef.Splits(small, None)
    whole = ef.fit(config, splits, members=ef.ensemble.Seeds(2))
    assert whole.num_members == 2 and isinstance(whole.model, ef.CNN)
    half = ef.fit(config.with_changes(steps=8), splits, members=ef.ensemble.Seeds(2))
    path = save_checkpoint(
        tmp_path / "c.eqx", half.state, config, num_train=len(small), members=half.configs
    )
    saved = load_checkpoint(path)
    assert isinstance(saved.state.model, ef.CNN) and saved.config.model == "cnn"
    resumed = ef.fit(config, splits, members=ef.ensemble.Seeds(2), state=saved.state)
    assert same_arrays(resumed.model, whole.model)
    first_loss = whole.history[0]["loss"]
    assert all(np.isfinite(r["loss"]) for r in whole.history) and first_loss > 0


class Linear784(eqx.Module):
    """A model of one's own: a linear map from pixels to logits."""

    linear: eqx.nn.Linear

    def __init__(self, *, key):
        self.linear = eqx.nn.Linear(784, 10, key=key)

    def __call__(self, x):
        return self.linear(x)


def test_a_model_of_your_own_trains_saves_and_loads(small, tmp_path):
    import optax

    import eqx_fmnist as ef
    from eqx_fmnist.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
    from eqx_fmnist.dataset import batch_indices, normalize

    from helpers import small_config

    config = small_config(steps=6, weight_decay=0.0, label_smoothing=0.0, shift=0, mirror=False)
    result = ef.fit(config, ef.Splits(small, None), model=Linear784)
    assert isinstance(result.model, Linear784)
    # The same six steps written by hand: Optax AdamW on the library's batch order.
    model = Linear784(key=jr.split(jr.PRNGKey(config.seed))[0])
    data_key = jr.split(jr.PRNGKey(config.seed))[1]
    opt = optax.adamw(config.learning_rate, weight_decay=0.0)
    opt_state = opt.init(eqx.filter(model, eqx.is_array))
    for step in range(6):
        idx = batch_indices(data_key, jnp.int32(step), len(small), config.batch_size)
        x, y = normalize(jnp.asarray(small.images)[idx]), jnp.asarray(small.labels)[idx]

        def loss(m, x=x, y=y):
            logp = jax.nn.log_softmax(jax.vmap(m)(x))
            return -jnp.mean(logp[jnp.arange(len(y)), y])

        grads = eqx.filter_grad(loss)(model)
        with jax.numpy_dtype_promotion("standard"):  # Optax's bias correction mixes dtypes
            updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
    np.testing.assert_allclose(result.model.linear.weight, model.linear.weight, atol=1e-6)

    path = save_checkpoint(tmp_path / "own.eqx", result.state, config, num_train=len(small))
    with pytest.raises(CheckpointError, match="a model of your own, .*Linear784: load it with"):
        load_checkpoint(path)
    loaded = load_checkpoint(path, model=Linear784)
    assert same_arrays(loaded.state.model, result.model)


def test_a_model_of_your_own_is_refused_where_it_cannot_train(small):
    import eqx_fmnist as ef

    from helpers import small_config

    splits = ef.Splits(small, None)
    refusals = [
        (dict(precision="p=f32,c=bf16,o=f32"), {}, "trains in float32"),
        (dict(model="cnn"), {}, "not both"),
    ]
    for changes, kwargs, message in refusals:
        with pytest.raises(ValueError, match=message):
            ef.fit(small_config(**changes), splits, model=Linear784, **kwargs)

    wrong = eqx.nn.Linear(784, 7, key=jr.key(0))
    with pytest.raises(ValueError, match=r"logits of shape \(7,\); it must give one logit"):
        ef.fit(small_config(), splits, model=wrong)
    built = Linear784(key=jr.key(0))  # members draw their own weights: a constructor
    with pytest.raises(ValueError, match="give its constructor"):
        ef.fit(small_config(), splits, model=built, members=ef.ensemble.Seeds(2))


def test_a_cnn_teaches_the_mlp(small):
    """The student's first loss is distillation's formula against the CNN's answers (a
    float64 numpy forward pass of each): weight * T^2 * CE(the teacher's softened
    probability, the student's) + (1 - weight) * the labels' smoothed cross-entropy,
    on the first batch, at the student's initial weights; the plain run's is not."""
    import eqx_fmnist as ef
    from eqx_fmnist.dataset import batch_indices

    from helpers import SMALL_CNN, numpy_reference, small_config

    splits = ef.Splits(small, None)
    teacher = ef.fit(small_config(**SMALL_CNN), splits).model
    t, w, smoothing = 2.0, 0.5, 0.1
    config = small_config(
        steps=1,
        log_every=1,
        shift=0,
        mirror=False,
        label_smoothing=smoothing,
        distill_weight=w,
        distill_temperature=t,
    )
    student = ef.fit(config, splits, teacher=teacher)
    plain = ef.fit(config, splits)
    start = ef.init_state(config, len(small))
    rows = np.asarray(batch_indices(start.key, 0, len(small), config.batch_size))
    x, y = np.asarray(small.images)[rows], np.asarray(small.labels)[rows]

    def log_softmax(z):
        z = z - z.max(1, keepdims=True)
        return z - np.log(np.exp(z).sum(1, keepdims=True))

    s = numpy_reference(start.model, x)["logits"]
    target = np.exp(log_softmax(numpy_cnn(teacher, x / 255.0) / t))
    soft = -(target * log_softmax(s / t)).sum(1).mean() * t**2
    log_p = log_softmax(s)
    hard = (-(1 - smoothing) * log_p[np.arange(len(y)), y] - smoothing * log_p.mean(1)).mean()
    want = w * soft + (1 - w) * hard
    assert isinstance(student.model, ef.MLP)
    assert student.history[0]["loss"] == pytest.approx(want, rel=1e-5)
    assert abs(plain.history[0]["loss"] - want) > 1e-3


def test_exports_of_the_mlps_layers_refuse_a_cnn_and_stablehlo_carries_it(
    small, test_images, tmp_path
):
    import eqx_fmnist as ef
    from eqx_fmnist.export import ExportError, export_model, load_artifact

    from helpers import SMALL_CNN, small_config

    config = small_config(**SMALL_CNN)
    result = ef.fit(config, ef.Splits(small, None))
    images = test_images[:256]
    for format in ("safetensors", "html"):
        with pytest.raises(ExportError, match=f"the {format} export writes the MLP's layers, "):
            export_model(
                result.model,
                result.policy,
                config,
                tmp_path / f"m.{format}",
                check_images=images,
                format=format,
            )
    path = tmp_path / "cnn.stablehlo"
    manifest = export_model(result.model, result.policy, config, path, check_images=images)
    assert classes_agree(manifest["parity"])
    logits, _ = load_artifact(path)(images)
    np.testing.assert_allclose(logits, numpy_cnn(result.model, images / 255.0), atol=1e-4)
    assert not any(tmp_path.glob("m.*"))


@pytest.mark.slow  # trains, evaluates and exports at the command line
def test_the_command_line_trains_a_cnn_and_refuses_to_export_it_as_onnx(
    real_data, tmp_path, monkeypatch
):
    """Trained, reported and evaluated on a slice of the real images (a CNN's report runs
    it over every test image 14 times: 10,000 of them made this the fast tier's
    slowest test)."""
    from helpers import use_a_slice

    use_a_slice(real_data, monkeypatch, 2048, 500)
    out = tmp_path / "cnn"
    args = ["--model", "cnn", "--channels", "4,8", "--steps", "4", "--hidden", "16"]
    trained = run_cli_here("train", *args, "--out", out)
    assert trained.returncode == 0, trained.stderr
    from eqx_fmnist.checkpoint import load_checkpoint
    from eqx_fmnist.model import CNN

    saved = load_checkpoint(out / "checkpoint.eqx").model  # what trained, not a folder name
    assert isinstance(saved, CNN) and saved.channels == (4, 8)
    shown = run_cli_here("evaluate", out)
    assert shown.returncode == 0 and "accuracy" in shown.stdout
    refused = run_cli_here("export", out, "--format", "safetensors")
    assert refused.returncode != 0
    assert "export it as StableHLO (--format stablehlo)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # trains a CNN teacher, then its student, at the command line
@pytest.mark.optimized  # the teacher's table: its CNN on 50 views of every image
def test_train_distilled_trains_its_cnn_teacher_first_then_the_mlp(
    real_data, tmp_path, monkeypatch
):
    import json

    import eqx_fmnist.config

    from helpers import use_a_slice

    use_a_slice(real_data, monkeypatch, 2048, 500)
    monkeypatch.setattr(eqx_fmnist.config, "TEACHER_EPOCHS", 1)
    out = tmp_path / "distilled"
    args = ["train", "--distilled", "--epochs", "1", "--hidden", "32", "--channels", "4,8"]
    trained = run_cli_here(*args, "--out", out)
    assert trained.returncode == 0, trained.stderr
    teacher = json.loads((out / "teacher" / "config.json").read_text())
    student = json.loads((out / "config.json").read_text())
    assert teacher["model"] == "cnn" and teacher["epochs"] == 1
    assert teacher["channels"] == [32, 64]  # the teacher's recipe, not the student's flags
    assert student["model"] == "mlp" and student["hidden_sizes"] == [32]
    assert (student["distill_weight"], student["distill_temperature"]) == (0.7, 2.0)
    named = json.loads((out / "teacher.json").read_text())
    # the teacher's checkpoint in its folder, named relative to the run, with its checksum
    assert named["teacher"] == "teacher/checkpoint.eqx" and len(named["sha256"]) == 64
    assert Path(named["absolute"]) == (out / "teacher" / "checkpoint.eqx").resolve()
    assert "teacher: a CNN, 1 epoch (" in trained.stdout
    assert trained.stdout.count("Test results") == 2

    for file in out.iterdir():  # the student's results gone, its teacher kept: reused
        if file.is_file():
            file.unlink()
    again = run_cli_here(*args, "--out", out)
    assert again.returncode == 0, again.stderr
    assert "trained before" in again.stdout and again.stdout.count("Test results") == 1
    clash = run_cli_here("train", "--distilled", "--best", "--out", tmp_path / "x")
    assert clash.returncode == 2 and "not --best and --distilled" in clash.stderr

    (out / "summary.json").write_text("{}")  # not the run's results: refused at once
    (out / "teacher" / "summary.json").unlink()  # so the teacher would train again
    refused = run_cli_here(*args, "--out", out)
    assert refused.returncode == 2 and "summary.json was changed since" in refused.stderr
    assert "teacher:" not in refused.stdout and not (out / "teacher" / "summary.json").exists()
