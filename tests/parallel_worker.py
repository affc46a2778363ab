"""Run in a subprocess by test_parallel.py: XLA_FLAGS and jax.distributed must be set
before JAX starts, which a test process cannot do for itself.

    python parallel_worker.py OUT_NPZ DEVICES [COORDINATOR PROCESS_ID NUM_PROCESSES]
"""

import sys

import numpy as np


def main() -> None:
    out, devices = sys.argv[1], int(sys.argv[2])
    import jax

    if len(sys.argv) > 3:
        from helpers import join_processes  # the worker's folder is on sys.path

        join_processes(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    import jax.tree_util as jtu

    import eqx_fmnist as ef
    from eqx_fmnist.dataset import ArrayDataset

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (512, 28, 28), dtype=np.uint8)
    labels = (np.arange(512) % 10).astype(np.uint8)
    ds = ArrayDataset(images, labels)
    config = ef.TrainConfig(
        steps=12, batch_size=64, hidden_sizes=(32,), log_every=4, devices=devices
    )
    result = ef.fit(config, ef.Splits(ds, ds))
    checks = {}
    if devices > 1:
        from eqx_fmnist.parallel import batch_sharding, make_mesh, replicate

        mesh = make_mesh(devices)
        batch = jax.device_put(ds.images[:64], batch_sharding(mesh))
        checks["batch_shards"] = sorted(
            (s.device.id, s.data.shape, int(s.index[0].start or 0))
            for s in batch.addressable_shards
        )
        state = replicate(ef.init_state(config, len(ds)), mesh)
        run = ef.compile_steps(state, replicate(ds, mesh), batch_size=64, num_steps=4, mesh=mesh)
        checks["all_reduce"] = "all-reduce" in run.compiled.as_text()
    trained = result.state.eval_model  # what evaluation used, over every process
    leaves = jtu.tree_leaves(trained)
    weight, local = trained.layers[0].weight, result.model.layers[0].weight
    info = {
        "devices_of_weight": len(weight.sharding.device_set),
        # `result.model` is this process's full copy of the same weights.
        "model_is_local": bool(local.is_fully_addressable),
        "model_matches_state": bool(
            np.array_equal(np.asarray(local), np.asarray(weight.addressable_data(0)))
        ),
        "process_count": jax.process_count(),
        "accuracy": result.test.accuracy,
        "count": result.test.count,
        **checks,
    }
    if jax.process_count() > 1:
        leaves = [
            np.asarray(jax.experimental.multihost_utils.process_allgather(x, tiled=True))
            if not x.is_fully_addressable
            else np.asarray(x)
            for x in leaves
        ]
    if jax.process_index() == 0:  # only process 0 writes files
        np.savez(out, *[np.asarray(x) for x in leaves], info=np.array(repr(info)))


if __name__ == "__main__":
    main()
