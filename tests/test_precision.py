import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import float16_products_atol, small_config, tree_allclose


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("p=f32,c=bf16,o=f32", ("float32", "bfloat16", "float32")),
        ("params=float32,compute=bfloat16,output=float32", ("float32", "bfloat16", "float32")),
        ("c=f16", ("float32", "float16", "float32")),
        ("p=f32,c=f16", ("float32", "float16", "float32")),
        ("bfloat16", ("bfloat16", "bfloat16", "bfloat16")),
        (" P = F32 , C = BF16 ", ("float32", "bfloat16", "float32")),
    ],
)
def test_from_string_parses_jmp_style_specs(spec, expected):
    from eqx_fmnist.precision import Policy

    p = Policy.from_string(spec)
    assert (p.param_dtype.name, p.compute_dtype.name, p.output_dtype.name) == expected
    assert Policy.from_string(str(p)) == p  # str round-trips


@pytest.mark.parametrize("spec", ["p=f32,c=int8", "q=f32", "p=f32,p=bf16", "p:f32", "", "f8"])
def test_bad_specs_raise_value_error_listing_valid_names(spec):
    from eqx_fmnist.precision import Policy

    with pytest.raises(ValueError) as info:
        Policy.from_string(spec)
    assert spec.split(",")[0] in str(info.value) or "twice" in str(info.value)


def test_presets_and_str():
    from eqx_fmnist.precision import FLOAT32, MIXED_BF16, MIXED_F16

    assert str(FLOAT32) == "p=f32,c=f32,o=f32"
    assert str(MIXED_BF16) == "p=f32,c=bf16,o=f32"
    assert str(MIXED_F16) == "p=f32,c=f16,o=f32"
    assert MIXED_F16.needs_loss_scale and not MIXED_BF16.needs_loss_scale


def test_casts_touch_only_floating_leaves():
    from eqx_fmnist.precision import MIXED_BF16

    tree = {"w": jnp.ones(3), "i": jnp.arange(3), "n": np.ones(2, np.float64), "s": "x", "f": 1.5}
    out = MIXED_BF16.cast_to_compute(tree)
    assert out["w"].dtype == jnp.bfloat16 and out["n"].dtype == jnp.bfloat16
    assert out["i"].dtype == jnp.int32 and out["s"] == "x" and out["f"] == 1.5
    assert MIXED_BF16.cast_to_param(out)["w"].dtype == jnp.float32


def test_dynamic_loss_scale_grows_after_period_and_halves_on_overflow():
    from eqx_fmnist.precision import DynamicLossScale

    s = DynamicLossScale(8.0, period=3, factor=2.0, min_loss_scale=2.0)
    finite, overflow = jnp.array(True), jnp.array(False)
    seen = []
    for ok in [finite, finite, finite, finite, overflow, overflow, overflow]:
        s = s.adjust(ok)
        seen.append((float(s.loss_scale), int(s.counter)))
    assert seen == [(8, 1), (8, 2), (16, 0), (16, 1), (8, 0), (4, 0), (2, 0)]
    assert float(s.adjust(overflow).loss_scale) == 2.0  # clamped at min_loss_scale
    assert float(s.unscale(s.scale(jnp.array(3.0)))) == 3.0


def test_all_finite():
    from eqx_fmnist.precision import all_finite

    assert bool(all_finite({"a": jnp.ones(2), "b": jnp.arange(3)}))
    assert not bool(all_finite({"a": jnp.array([1.0, jnp.inf])}))
    assert not bool(all_finite([jnp.array(jnp.nan, jnp.float16)]))


# ----------------------------------------------------------------------------- in training


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@pytest.mark.parametrize("compute", ["float32", "bfloat16", "float16"])
def test_training_dtypes_follow_the_policy(compute):
    import equinox as eqx
    import jax
    import jax.tree_util as jtu

    from eqx_fmnist.dataset import ArrayDataset, normalize
    from eqx_fmnist.losses import recipe_loss
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_step

    from helpers import at_once, small_config, synthetic_arrays

    a = synthetic_arrays(n_train=64)
    ds = ArrayDataset(a["train_images"], a["train_labels"])
    config = small_config(steps=2, precision=f"p=f32,c={compute},o={compute}")
    state = init_state(config, len(ds))
    x, y = ds.images[:32], ds.labels[:32]

    def forward_and_gradients(state, x, y):
        logits = jax.vmap(
            lambda v: state.model(v.astype(jnp.float32) / 255.0, policy=state.policy)
        )(x)
        grads = eqx.filter_grad(
            lambda m: state.loss_scale.scale(
                recipe_loss(m, normalize(x), y, policy=state.policy)[0]
            ),
            has_aux=False,
        )(state.model)
        return logits, grads

    logits, grads = at_once(forward_and_gradients, state, x, y)
    assert logits.dtype == jnp.dtype(compute)
    assert {g.dtype for g in jtu.tree_leaves(grads)} == {jnp.dtype("float32")}
    new, _ = train_step(state, x, y)
    floats = [
        v
        for v in jtu.tree_leaves(new.opt_state)
        + jtu.tree_leaves(eqx.filter(new.model, eqx.is_inexact_array))
        if jnp.issubdtype(v.dtype, jnp.floating)
    ]
    assert floats and {v.dtype for v in floats} == {jnp.dtype("float32")}
    assert type(new.loss_scale).__name__ == (
        "DynamicLossScale" if compute == "float16" else "NoOpLossScale"
    )


@pytest.mark.slow
def test_bfloat16_compute_tracks_float32(real_splits):
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.train import fit

    results = {}
    for compute in ("f32", "bf16"):
        config = TrainConfig.codelab(steps=100, log_every=100, precision=f"p=f32,c={compute},o=f32")
        results[compute] = fit(config, real_splits)
    f32, bf16 = results["f32"], results["bf16"]
    assert abs(f32.history[-1]["loss"] - bf16.history[-1]["loss"]) < 0.02
    assert abs(f32.test.accuracy - bf16.test.accuracy) < 0.01


@pytest.mark.slow
def test_float16_with_dynamic_loss_scale_trains_and_skips_overflows(real_datasets, real_splits):
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.precision import DynamicLossScale
    from eqx_fmnist.state import init_state
    from eqx_fmnist.train import fit

    train, _ = real_datasets
    config = TrainConfig.codelab(steps=200, log_every=100, precision="p=f32,c=f16,o=f32")
    # 2**40 overflows float16 at once: steps are skipped and the scale halves until it fits.
    state = eqx_tree_at_loss_scale(init_state(config, len(train)), DynamicLossScale(2.0**40))
    result = fit(config, real_splits, state=state)
    skipped = sum(h["skipped"] for h in result.history)
    assert skipped >= 1
    assert all(np.isfinite(h["loss"]) for h in result.history)
    assert float(result.state.loss_scale.loss_scale) < 2.0**40
    assert result.history[-1]["loss"] < 0.6 and result.test.accuracy > 0.8


def test_float16_overflows_to_infinity_as_ieee_float16_does_on_every_backend():
    """`precision.astype` against numpy's IEEE float16 conversion at the edge of its range
    (65504 is the largest finite, 65520 the first to round to infinity), through a
    compiled program, and the dense layer's gradient under a loss scale of 2^40: the
    float16 cotangent overflows, so the weight gradient is infinite. (A TPU keeps float32's
    range in its float16 values: there both were finite before `astype` said otherwise.)"""
    import jax

    from eqx_fmnist.precision import MIXED_F16, astype

    x = np.array([65504, 65519.99, 65520, -65520, 1e9, -3e38, 6e-8, 1.5, np.nan], np.float32)
    got = jax.jit(lambda v: astype(v, jnp.float16).astype(jnp.float32))(x)
    with np.errstate(over="ignore"):  # numpy warns of the overflow it is asked for
        ieee = x.astype(np.float16).astype(np.float32)
    got = np.asarray(got)
    # Infinite exactly where IEEE's are, with their signs; the finite values rounded as
    # float16 rounds (a TPU may keep more of their digits: it stores float32 there).
    assert (np.isinf(got) == np.isinf(ieee)).all() and (np.isnan(got) == np.isnan(ieee)).all()
    assert (got[np.isinf(got)] == ieee[np.isinf(ieee)]).all()
    finite = np.isfinite(ieee)
    np.testing.assert_allclose(got[finite], x[finite], rtol=2.0**-11, atol=2.0**-25)

    def scaled(w):
        return (MIXED_F16.dense(jnp.ones((4, 8)), w) * 2.0**40).sum()

    dw = jax.jit(jax.grad(scaled))(jnp.ones((3, 8)))
    assert np.isinf(np.asarray(dw)).all()


def eqx_tree_at_loss_scale(state, loss_scale):
    import equinox as eqx

    return eqx.tree_at(lambda s: s.loss_scale, state, loss_scale)


@pytest.mark.parametrize("compute", ["bfloat16", "float16"])
def test_dense_multiplies_in_the_compute_dtype_forward_and_backward(compute):
    """The custom gradient against numpy: the cotangent and the operands rounded to the
    compute dtype (bfloat16 or float16), the products summed in float64 (float32
    accumulation is within 1e-5 here)."""
    import jax

    import eqx_fmnist as ef

    from helpers import at_once

    if compute == "float16" and jax.default_backend() == "tpu":
        pytest.skip("a TPU rounds float16 operands to bfloat16 (a run refuses c=f16 there)")
    policy = ef.Policy("float32", compute, "float32")

    def rounded(a):  # numpy's rounding to the compute dtype (ml_dtypes for bfloat16)
        return np.asarray(a, np.float32).astype(jnp.dtype(compute)).astype(np.float64)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 20)).astype(np.float32)
    w = rng.standard_normal((7, 20)).astype(np.float32)
    g = rng.standard_normal((32, 7)).astype(np.float32)

    def forward_and_back(x, w, g):
        out, pull = jax.vjp(policy.dense, x, w)
        return out, *pull(g)

    out, dx, dw = at_once(forward_and_back, x, w, g)
    assert out.dtype == dx.dtype == dw.dtype == jnp.float32

    def close(got, a, b):
        atol = 1e-5  # float32 accumulation of 20 terms
        if compute == "float16":  # the TPU's three passes (`float16_products_atol`)
            atol += float16_products_atol(a, b).max()
        np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=atol)

    close(out, rounded(x), rounded(w).T)
    close(dx, rounded(g), rounded(w))
    close(dw, rounded(g).T, rounded(x))
    # Not what float32 operands would give: the rounding is really there (float16
    # keeps 11 bits, bfloat16 8).
    assert np.abs(np.asarray(dw) - g.T.astype(np.float64) @ x).max() > 1e-4


def test_the_batch_forward_is_the_vmapped_model_exactly_in_float32():
    import jax
    import jax.random as jr

    import eqx_fmnist as ef
    from eqx_fmnist.precision import FLOAT32, MIXED_BF16

    from helpers import at_once

    model = at_once(lambda key: ef.MLP(key=key), jr.key(0))
    x = np.random.default_rng(1).uniform(size=(16, 784)).astype(np.float32)
    # Each its own program (one program might share the two computations' work).
    vmapped = at_once(lambda m, x: jax.vmap(m)(x), model, x)
    assert np.array_equal(
        at_once(lambda m, x: m.forward_batch(x, policy=FLOAT32), model, x), vmapped
    )
    bf16 = at_once(lambda m, x: m.forward_batch(x, policy=MIXED_BF16), model, x)
    per_example = at_once(lambda m, x: jax.vmap(lambda e: m(e, policy=MIXED_BF16))(x), model, x)
    np.testing.assert_allclose(bf16, per_example, atol=1e-4)
    assert not np.array_equal(bf16, vmapped)


@pytest.mark.parametrize(
    "precision, bf16_dots, asked",
    [
        ("float32", 0, "precision = [HIGHEST, HIGHEST]"),
        ("p=f32,c=bf16,o=f32", 8, "precision = [DEFAULT, DEFAULT]"),
        ("p=f32,c=f16,o=f32", 0, "precision = [HIGHEST, HIGHEST]"),
    ],
)
def test_a_bf16_step_takes_bf16_operands_in_all_eight_dots(precision, bf16_dots, asked):
    """The lowered StableHLO of `train_step`: 3 forward dots, 3 weight gradients and 2
    input gradients (the pixels' gradient is not computed). Every dot of a float32
    policy asks for `HIGHEST` precision (float32 products on a TPU or GPU too), a
    bfloat16 policy's dots for the default (bfloat16 products are exact), and a float16
    policy's for `HIGHEST` (at the default a TPU rounds float16 operands to bfloat16)."""
    import re

    import equinox as eqx

    import eqx_fmnist as ef

    state = ef.init_state(ef.TrainConfig(precision=precision, batch_size=64), 1024)
    x, y = jnp.zeros((64, 784), jnp.uint8), jnp.zeros((64,), jnp.int32)
    text = eqx.filter_jit(ef.train_step).lower(state, x, y).as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    both_bf16 = [d for d in dots if re.search(r"\(tensor<[^>]*bf16>, tensor<[^>]*bf16>\)", d)]
    assert len(dots) == 8 and len(both_bf16) == bf16_dots
    assert all(asked in d for d in dots)


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@pytest.mark.parametrize("spec", ["bfloat16", "p=f16,c=f16,o=f32", "p=bf16,c=bf16,o=f32"])
def test_parameters_stored_in_a_low_precision_dtype_train(small, spec):
    """Parameters in bfloat16 or float16 (the codelab's bfloat16 run) train: the fused
    chunk keeps each parameter's dtype (a `lax.scan` carry may not change type), AdamW's
    moments stay float32, the weight average keeps the parameters' dtype, and the run
    learns the small set about as the float32 run does."""
    import eqx_fmnist as ef

    def run(precision):
        config = ef.TrainConfig(
            precision=precision,
            steps=96,
            batch_size=32,
            hidden_sizes=(32,),
            log_every=32,
            schedule="constant",
            learning_rate=1e-2,
            label_smoothing=0.0,
            shift=0,
            mirror=False,
            ema_decay=0.9,
        )
        return ef.fit(config, ef.Splits(small, small))

    low, full = run(spec), run("float32")
    dtype = ef.Policy.from_string(spec).param_dtype
    assert low.state.model.layers[0].weight.dtype == dtype
    assert low.state.average.layers[0].weight.dtype == dtype
    moments = [x for x in jax.tree.leaves(low.state.opt_state) if x.ndim == 2]
    assert moments and all(x.dtype == jnp.float32 for x in moments)
    losses = [h["loss"] for h in low.history]
    assert np.isfinite(losses).all() and losses[-1] < 0.7 * losses[0]
    assert low.test.accuracy > 0.5 and abs(low.test.accuracy - full.test.accuracy) < 0.25


def test_a_state_built_directly_with_a_weight_average_trains(small):
    """`TrainState(..., ema_decay=...)` starts its average as a copy of the model: every
    compiled path donates the state, and the same buffer cannot be donated twice."""
    import jax.random as jr

    import eqx_fmnist as ef
    from eqx_fmnist.optim import make_optimizer
    from eqx_fmnist.state import TrainState

    from helpers import small_config

    config = small_config(steps=4, ema_decay=0.9)
    numbers = {
        k: jnp.float32(v)
        for k, v in {"learning_rate": 3e-3, "weight_decay": 0.0, "label_smoothing": 0.0}.items()
    }
    model = ef.MLP(hidden_sizes=(16,), key=jr.PRNGKey(0))
    state = TrainState(
        model, make_optimizer(config), key=jr.PRNGKey(1), hyperparams=numbers, ema_decay=0.9
    )
    state, metrics = ef.train_steps(state, small, batch_size=32, num_steps=2)
    assert np.isfinite(np.asarray(metrics["loss"])).all() and int(state.step) == 2


def test_bf16_members_train_as_one_program_like_single_runs(small):
    """The hand-written bf16 gradient (its transpose held by an optimisation barrier)
    under `vmap`: two bf16 members' steps are each member's own steps alone."""
    import eqx_fmnist as ef

    configs = [small_config(precision="p=f32,c=bf16,o=f32", seed=s) for s in (0, 1)]
    stacked, _ = ef.train_steps(
        ef.init_members(configs, len(small)), small, batch_size=32, num_steps=3
    )
    for i, config in enumerate(configs):
        alone, _ = ef.train_steps(
            ef.init_state(config, len(small)), small, batch_size=32, num_steps=3
        )
        member = ef.select_members(stacked.model, i)
        assert tree_allclose(member, alone.model, rtol=1e-5, atol=1e-6)


def test_a_dtype_jax_would_truncate_or_none_is_refused_at_once():
    """`o=f64` (without JAX's 64-bit mode, JAX computes float32 and warns on every call)
    is refused when the policy is made (`Policy(None)`: `test_checks.py`, without this
    suite's type checker, which refuses it first)."""
    import pytest

    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.precision import Policy

    with pytest.raises(ValueError, match="float64 needs JAX's 64-bit mode"):
        Policy.from_string("p=f32,c=f32,o=f64")
    with pytest.raises(ValueError, match="`precision`: .*float64"):
        TrainConfig(precision="o=f64")
