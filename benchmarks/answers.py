"""Answers a person can act on, measured: conformal prediction sets, test-time
augmentation (the image and its mirror) and integrated-gradients attributions.

For each model (the default recipe, seed 0; optionally an ensemble of seeds, `best()`
and a default-recipe student distilled from the ensemble), 5,000 training images held
out to calibrate and 5,000 more to validate on (the models train on 50,000):

- **sets** at 90% and 95%, one threshold and one per class: coverage on all 10,000 test
  images (overall and the worst class), mean set size, share of single classes; and the
  spread of the coverage over five random halves of the held-out images (fitted on one
  half, measured on the other: images drawn like the calibration ones);
- **TTA**: accuracy and calibrated ECE on the validation images (where the default is
  chosen), accuracy on the test images as they are, mirrored and shifted by 1-3 pixels
  (mean of 4 directions), and the calibrated test ECE, without views, with the mirror's
  and with the mirror's and 1-pixel moves (each calibrated on the outputs it is applied
  to), and the cost of the views;
- **attributions** (one model): the completeness error against the number of steps on
  100 test images, and the randomisation check (Spearman's rank correlation of the
  trained model's maps with those of the same architecture's random weights).

    python benchmarks/answers.py [--seeds 0 1 2 3 4] [--best] [--distill]
        [--out benchmarks/results/answers.md]
"""

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import eqx_fmnist as ef
from eqx_fmnist.calibration import calibration_metrics, fit_temperature
from eqx_fmnist.conformal import fit_sets, set_report
from eqx_fmnist.views import TTA_MIRROR, TTA_SHIFTS

from harness import machine_line


def sets_rows(name, cal_logits, cal_y, test_logits, test_y, temperature) -> list[str]:
    """The sets' table rows of one model: coverage on the test set, and over halves of
    the held-out images."""

    def softmax(z):
        return np.asarray(jax.nn.softmax(jnp.asarray(z) / temperature, axis=-1), np.float64)

    cal_p, test_p, rows = softmax(cal_logits), softmax(test_logits), []
    for coverage in (0.9, 0.95):
        for per_class in (False, True):
            fitted = fit_sets(cal_p, cal_y, coverage=coverage, per_class=per_class)
            r = set_report(fitted.sets(test_p), test_y)
            halves = []
            for seed in range(5):
                order = np.random.default_rng(seed).permutation(len(cal_y))
                a, b = order[: len(order) // 2], order[len(order) // 2 :]
                half = fit_sets(cal_p[a], cal_y[a], coverage=coverage, per_class=per_class)
                halves.append(set_report(half.sets(cal_p[b]), cal_y[b]).coverage)
            kind = "per class" if per_class else "one"
            rows.append(
                f"| {name} | {coverage:.0%} | {kind} | {r.coverage:.4f} | "
                f"{ef.CLASS_NAMES[r.worst_class]} {min(r.class_coverage):.4f} | "
                f"{r.mean_size:.2f} | {r.singletons:.1%} | "
                f"{np.mean(halves):.4f} ± {np.std(halves):.4f} |"
            )
    return rows


VIEWS = {None: "the image", TTA_MIRROR: "image and mirror", TTA_SHIFTS: "mirror and 1-px moves"}


def tta_row(name, model, splits, tta) -> str:
    """Validation accuracy and ECE; test accuracy clean / mirrored / shifted and the
    calibrated ECE, with `tta` views."""
    test, validation = splits.test, splits.validation
    calibration = ef.calibrate(model, splits.train, splits.calibration, tta=tta)

    def ece(dataset):
        logits = ef.predict_logits(model, dataset.images, tta=tta)
        return calibration_metrics(logits, dataset.labels, temperature=calibration.temperature).ece

    val = ef.evaluate(model, validation, tta=tta).accuracy
    robust = ef.evaluate_robustness(model, test, tta=tta)
    ef.predict_logits(model, test.images, tta=tta).block_until_ready()  # compiled: this shape
    t = time.perf_counter()
    ef.predict_logits(model, test.images, tta=tta).block_until_ready()
    ms = 1000 * (time.perf_counter() - t)
    cells = [val, ece(validation), robust.clean, robust.mirrored, *robust.shifted.values()]
    return (
        f"| {name} | {VIEWS[tta]} | "
        + " | ".join(f"{c:.4f}" for c in cells)
        + f" | {ece(test):.4f} | {ms:.0f} |"
    )


def attribution_lines(model, random_model, images) -> list[str]:
    lines = [
        "| steps | completeness error, median | 95th percentile | of the score change |",
        "|---|---|---|---|",
    ]
    for steps in (4, 16, 64, 256):
        e = ef.explain(model, images, steps=steps)
        err, rel = e.completeness_error, e.completeness_error / np.abs(e.score_change)
        lines.append(
            f"| {steps} | {np.median(err):.1e} | {np.quantile(err, 0.95):.1e} | "
            f"{np.median(rel):.1e} |"
        )
    a = ef.explain(model, images, steps=64)
    b = ef.explain(random_model, images, target=a.target, steps=64).attributions

    def ranks(v):
        return np.argsort(np.argsort(v))

    rho = [
        np.corrcoef(ranks(x[m]), ranks(y[m]))[0, 1]
        for x, y, m in zip(a.attributions, b, images > 0, strict=True)
    ]
    return lines + [
        "",
        f"Randomisation check: Spearman's rank correlation of the trained "
        f"model's maps with a random model's, over each image's inked pixels: "
        f"median {np.median(rho):.3f} (5th-95th percentile {np.quantile(rho, 0.05):.3f}"
        f" to {np.quantile(rho, 0.95):.3f}) on {len(images)} test images.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/answers.md"))
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=[], help="also an ensemble of these seeds"
    )
    parser.add_argument("--best", action="store_true", help="also `best()`, seed 0")
    parser.add_argument(
        "--distill",
        action="store_true",
        help="also a default-recipe student of the ensemble (needs --seeds)",
    )
    parser.add_argument("--steps", type=int, help="a quick check: train this many steps")
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    quick = {"steps": args.steps} if args.steps else {}
    size = min(5000, len(data.train_images) // 12)  # 5,000 of the 60,000; less in a smoke run
    held_out = {"calibration_size": size, "validation_size": size}
    config = ef.TrainConfig(**held_out, **quick)
    splits = ef.split_data(data, **held_out)
    models = {"default recipe, seed 0": ef.fit(config, splits)}
    if args.seeds:
        members = ef.ensemble.Seeds(tuple(args.seeds))
        models[f"ensemble of {len(args.seeds)}"] = ensemble = ef.fit(
            config, splits, members=members
        )
        if args.distill:
            models["distilled from the ensemble"] = ef.fit(config, splits, teacher=ensemble.model)
    if args.best:
        models["`best()`, seed 0"] = ef.fit(ef.TrainConfig.best(**held_out, **quick), splits)
    lines = [
        f"{machine_line()} "
        f"5,000 training images held out to calibrate, 5,000 to validate; the models train "
        f"on 50,000; the test set is all 10,000.",
        "",
        "## Prediction sets (score 1 - p, calibrated probabilities)",
        "",
        "| model | coverage asked | thresholds | test coverage | worst class | "
        "mean size | single classes | held-out halves: coverage, mean ± sd of 5 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    tta_lines = [
        "## Test-time augmentation",
        "",
        "| model | views | validation | validation ECE | test: clean | mirrored | shift 1 | "
        "shift 2 | shift 3 | test ECE (calibrated) | ms per 10,000 images |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in models.items():
        cal, test = splits.calibration, splits.test
        cal_z = np.asarray(ef.predict_logits(r.model, cal.images), np.float32)
        test_z = np.asarray(ef.predict_logits(r.model, test.images), np.float32)
        t = fit_temperature(cal_z, np.asarray(cal.labels))
        lines += sets_rows(name, cal_z, np.asarray(cal.labels), test_z, np.asarray(test.labels), t)
        for tta in VIEWS:
            tta_lines.append(tta_row(name, r.model, splits, tta))
        print(f"measured {name}", flush=True)
    single = models["default recipe, seed 0"].model
    random_model = ef.MLP(hidden_sizes=config.hidden_sizes, key=jax.random.PRNGKey(1))
    images = data.test_images[:100].reshape(100, -1)
    lines += [
        "",
        *tta_lines,
        "",
        "## Attributions (integrated gradients, default recipe)",
        "",
        *attribution_lines(single, random_model, images),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
