"""Seconds from calling `fit()` to the first evaluation at or above 0.88 and 0.90 test
accuracy, default recipe: cold (a first process on an empty cache) and warm (later
processes on the cache the first one filled).

Each measurement is a fresh Python process whose `$XDG_CACHE_HOME` is one temporary
folder shared by all of them, with the command line's persistent compilation cache and
the decoded-data cache in it. The clock starts when `fit(config, ef.split_data(data))`
is called (moving the data to the device, building the state, compiling and every
evaluation count); loading the files is timed on its own.

    python benchmarks/time_to_accuracy.py [--warm 3] [--precision p=f32,c=bf16,o=f32]
        [--recipe default | "before augmentation"]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGETS = (0.88, 0.90)


RECIPES = {
    "default": {},
    "before augmentation": {"shift": 0, "mirror": False, "epochs": 30},
}
"""The recipes this can time: the default, and the same MLP without the moves and mirrors
(30 epochs)."""


def time_to_accuracy(data, config, targets=TARGETS) -> tuple[dict[float, float | None], float]:
    """Seconds from calling `fit` to the first end-of-interval evaluation on all 10,000
    test images at or above each target (moving the data to the device, building the
    state, compiling and every evaluation count; loading the files does not), and the
    final test accuracy. A target never reached gives `None`."""
    import eqx_fmnist as ef

    test = ef.ArrayDataset(data.test_images, data.test_labels)
    reached: dict[float, float | None] = dict.fromkeys(targets)

    def callback(entry, state):
        accuracy = ef.evaluate(state.eval_model, test, policy=state.policy).accuracy
        now = time.perf_counter() - start
        for t in targets:
            if reached[t] is None and accuracy >= t:
                reached[t] = now

    start = time.perf_counter()
    result = ef.fit(config, ef.split_data(data), callback=callback)  # moving data is timed
    return reached, result.test.accuracy


def child(precision: str, recipe: str) -> None:
    t0 = time.perf_counter()
    import eqx_fmnist as ef
    from eqx_fmnist.cache import compile_cache_dir, enable_compile_cache

    enable_compile_cache(compile_cache_dir())  # what `eqx-fmnist train` does
    t1 = time.perf_counter()
    data = ef.load_fashion_mnist()
    t2 = time.perf_counter()
    config = ef.TrainConfig(precision=precision, **RECIPES[recipe])
    reached, final = time_to_accuracy(data, config, TARGETS)
    print(
        json.dumps(
            {
                "import": t1 - t0,
                "load": t2 - t1,
                "reached": {str(k): v for k, v in reached.items()},
                "final": final,
            }
        )
    )


def run_child(cache: str, precision: str, recipe: str) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    env.pop("EQX_FMNIST_COMPILE_CACHE", None)
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--precision", precision, "--recipe", recipe],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=3, help="warm processes (3)")
    parser.add_argument("--precision", default="p=f32,c=f32,o=f32")
    parser.add_argument("--recipe", choices=list(RECIPES), default="default")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.precision, args.recipe)
    with tempfile.TemporaryDirectory() as cache:
        cold = run_child(cache, args.precision, args.recipe)
        warm = [run_child(cache, args.precision, args.recipe) for _ in range(args.warm)]

    def cell(runs, key):
        values = [r["reached"][key] for r in runs]
        if any(v is None for v in values):
            return "not reached in " + f"{sum(v is None for v in values)} of {len(values)}"
        return f"{statistics.median(values):.1f}" + (
            f" ({min(values):.1f}..{max(values):.1f})" if len(values) > 1 else ""
        )

    from harness import machine_line

    print(machine_line() + "\n")
    print(f"{args.recipe} recipe, {args.precision}; seconds from calling fit()\n")
    print("| process | " + " | ".join(f"to {t:.2f}" for t in TARGETS) + " | load s | final |")
    print("|---|" + "---|" * (len(TARGETS) + 2))
    for name, runs in [("cold (empty cache)", [cold]), (f"warm (median of {len(warm)})", warm)]:
        cells = " | ".join(cell(runs, str(t)) for t in TARGETS)
        load = statistics.median(r["load"] for r in runs)
        final = statistics.median(r["final"] for r in runs)
        print(f"| {name} | {cells} | {load:.2f} | {final:.4f} |")


if __name__ == "__main__":
    main()
