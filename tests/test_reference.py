"""Results stay what they were: short runs compared with numbers stored in
`tests/data/reference_runs.json` (`tests/reference_runs.py` wrote them)."""

import json

import numpy as np
import pytest
from reference_runs import CONFIGS, REFERENCE, machine, run

pytestmark = pytest.mark.optimized  # compiled as a user's run is: what the numbers are of

# Another CPU kind or jax version runs other XLA kernels: the same computation, its sums
# accumulated in another order. float32 runs have met the stored numbers within 2e-3
# (relative) there. bfloat16 products are exact, but the kernels that accumulate them
# differ more from one CPU to the next (AVX512-BF16 against AMX): an AMX Xeon's
# codelab_bf16 parameter sums differed from an AVX512-BF16 EPYC's by up to 2.4e-3, so
# they are held to 5e-3. Either bound must still catch a real change of the recipe: the
# test runs each config again with its learning rate 1% higher and checks that its
# parameter sums fall outside the bound (there codelab_bf16's first weight sum moved by
# 2.1e-2 of itself, recipe_with_validation's by 4.3e-2).
RTOL = {"float32": 2e-3, "bfloat16": 5e-3}


def _close(got: dict, want: dict, rtol: float) -> bool:
    """Whether a run matches a stored one within `rtol` (every history number, the
    parameter sums, the test accuracy)."""
    if [h["step"] for h in got["history"]] != [h["step"] for h in want["history"]]:
        return False
    pairs = zip(got["history"], want["history"], strict=True)
    numbers = [(g[k], w[k]) for g, w in pairs for k in w]
    numbers += list(zip(got["param_sums"], want["param_sums"], strict=True))
    g, w = np.array(numbers, dtype=np.float64).T
    return bool(np.all(np.abs(g - w) <= rtol * np.abs(w) + 1e-4)) and (
        abs(got["test_accuracy"] - want["test_accuracy"]) < 0.01
    )


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_runs_reproduce_the_stored_reference(real_data):
    stored = json.loads(REFERENCE.read_text())
    same_machine = machine() == stored["machine"]
    for name, config in CONFIGS.items():
        got, want = run(name, real_data), stored["runs"][name]
        bf16 = "bf16" in str(config.get("precision", ""))
        # float32 on the same CPU kind and jax: the same XLA kernels, bit for bit. A
        # bfloat16 dot's kernel depends on more of the CPU than the recorded flags: two
        # AMD EPYCs that both report avx512_bf16 rounded codelab_bf16 differently (each
        # bitwise repeatable), so bfloat16 runs are held to the tolerance.
        if same_machine and not bf16:
            assert got == want, name
            continue
        rtol = RTOL["bfloat16" if bf16 else "float32"]
        assert got["history"][0].keys() == want["history"][0].keys(), name
        assert _close(got, want, rtol), (name, got["param_sums"], want["param_sums"])
        lr = config.get("learning_rate", 3e-3)
        changed = run(name, real_data, {**config, "learning_rate": lr * 1.01})["param_sums"]
        caught = not np.allclose(changed, got["param_sums"], rtol=rtol, atol=1e-4)
        assert caught, f"{name}: rtol {rtol} misses a 1% change of the learning rate"
