"""Baselines: the loops the library's fast path replaces, written as their authors would.

These are **not** the library. They exist to be measured against it, in the same
process, on the same data and the same MLP:

- `codelab_trainer`: the codelab's loop.
  Parameters are a dict of arrays, images are converted to float32 once, every epoch
  is a `jax.random.permutation` and a gather of float32 batches on the device, and one
  step (`jax.jit`-compiled, or not) is dispatched from Python per batch.
- `pytorch_trainer`: the same MLP, initial
  weights and AdamW in PyTorch eager on the CPU.

Every trainer is a function `run(num_steps)` that trains `num_steps` more steps,
reading the loss back to the host every `read_every` steps (as a loop that logs does),
and returns the last loss it read: an `harness.suite.Trainer`, so that
`BASELINES` plus the library's `TRAINERS` go into one `compare_training`.
"""

import math
import os

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from eqx_fmnist.config import TrainConfig
from eqx_fmnist.dataset import ArrayDataset, normalize, steps_per_epoch
from eqx_fmnist.precision import optax_promotion
from eqx_fmnist.state import init_state

from harness.suite import TRAINERS, Trainer, TrainerFactory


def _codelab_params(hidden, key) -> dict[str, jax.Array]:
    sizes = (784, *hidden, 10)
    params = {}
    keys = jr.split(key, len(sizes) - 1)
    for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
        params[f"w{i}"] = jr.normal(k, (a, b)) * math.sqrt(2.0 / a)
        params[f"b{i}"] = jnp.zeros((1, b))  # a row: broadcasting stays explicit
    return params


def _codelab_loss(params, x, y):
    n = len(params) // 2
    for i in range(n):
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        if i < n - 1:
            x = jax.nn.gelu(x)
    logp = jax.nn.log_softmax(x)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def codelab_trainer(
    dataset: ArrayDataset, config: TrainConfig, *, read_every: int = 25, jit: bool = True
) -> Trainer:
    """The codelab's hand-written loop: one step dispatched from Python per batch.

    **Arguments:**

    - `dataset`: the training set.
    - `config`: batch size, hidden sizes, learning rate, weight decay and seed.
    - `read_every`: steps between host reads of the loss. Defaults to `25`.
    - `jit`: compile the step with `jax.jit` (the codelab's second cell) or dispatch
        every operation from Python (its first). Defaults to `True`.
    """
    tx = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    params = _codelab_params(config.hidden_sizes, jr.PRNGKey(config.seed))
    images, labels = normalize(dataset.images), dataset.labels
    batch = config.batch_size
    spe = steps_per_epoch(len(dataset), batch)

    def step(params, opt, x, y):
        loss, grads = jax.value_and_grad(_codelab_loss)(params, x, y)
        with optax_promotion():  # Adam's bias correction: float ** int32 count
            updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    step = jax.jit(step, donate_argnums=(0, 1)) if jit else step
    state = {"params": params, "opt": tx.init(params), "step": 0, "batches": None}

    def run(num_steps: int) -> float:
        params, opt, last = state["params"], state["opt"], math.nan
        for _ in range(num_steps):
            s = state["step"]
            if s % spe == 0:  # a new epoch: shuffle and gather on the device
                perm = jr.permutation(jr.fold_in(jr.PRNGKey(1), s // spe), len(dataset))
                idx = perm[: spe * batch].reshape(spe, batch)
                state["batches"] = (images[idx], labels[idx])
            xs, ys = state["batches"]
            params, opt, loss = step(params, opt, xs[s % spe], ys[s % spe])
            state["step"] = s + 1
            if state["step"] % read_every == 0:
                last = float(loss)
        state.update(params=params, opt=opt)
        return last

    return run


def scan_epoch_trainer(dataset: ArrayDataset, config: TrainConfig) -> Trainer:
    """Tutorial 4's hand-written epoch: the library's MLP, `optax.adamw`, and one
    `jax.jit`-compiled function per epoch that draws the epoch's permutation and runs
    its steps as one `lax.scan`, each step gathering its batch; the model multiplies as
    the config's policy says; the loss is read once per epoch. `run(num_steps)` runs whole epochs (`num_steps` a multiple of an
    epoch's steps)."""
    import equinox as eqx

    from eqx_fmnist.model import MLP

    tx = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    model = MLP(hidden_sizes=config.hidden_sizes, key=jr.PRNGKey(config.seed))
    batch, spe = config.batch_size, steps_per_epoch(len(dataset), config.batch_size)
    params, static = eqx.partition(model, eqx.is_array)

    def loss_fn(params, x, y):
        # The config's policy says the products (float32 at `highest`, or bfloat16).
        logits = jax.vmap(lambda e: eqx.combine(params, static)(e, policy=config.policy))(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def epoch(images, labels, params, opt, key):
        key, shuffle = jr.split(key)
        order = jr.permutation(shuffle, len(labels))[: spe * batch].reshape(spe, batch)

        def body(carry, idx):
            params, opt = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, normalize(images[idx]), labels[idx])
            with optax_promotion():
                updates, opt = tx.update(grads, opt, params)
            return (optax.apply_updates(params, updates), opt), loss

        (params, opt), losses = jax.lax.scan(body, (params, opt), order)
        return params, opt, key, losses

    state = {"params": params, "opt": tx.init(params), "key": jr.PRNGKey(1)}

    def run(num_steps: int) -> float:
        losses = None
        for _ in range(max(1, num_steps // spe)):
            s = state
            s["params"], s["opt"], s["key"], losses = epoch(
                dataset.images, dataset.labels, s["params"], s["opt"], s["key"]
            )
        return float(np.asarray(losses)[-1])

    return run


def pytorch_trainer(dataset: ArrayDataset, config: TrainConfig, *, read_every: int = 25) -> Trainer:
    """The same MLP, initial weights and AdamW in PyTorch eager on the CPU.

    Uses every core this process may run on. Raises `ImportError` when `torch` is not
    installed (`pip install torch`).
    """
    import torch  # pyright: ignore[reportMissingImports]

    torch.set_num_threads(
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    )
    model = init_state(config, len(dataset)).model
    layers = []
    for i, lin in enumerate(model.layers):
        t = torch.nn.Linear(lin.in_features, lin.out_features)
        with torch.no_grad():
            t.weight.copy_(torch.from_numpy(np.array(lin.weight)))
            t.bias.copy_(torch.from_numpy(np.array(lin.bias)))
        layers.append(t)
        if i < len(model.layers) - 1:
            layers.append(torch.nn.GELU(approximate="tanh"))
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(
        net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    images = torch.from_numpy(np.array(dataset.images)).float().div_(255.0)
    labels = torch.from_numpy(np.array(dataset.labels)).long()
    batch = config.batch_size
    spe = steps_per_epoch(len(dataset), batch)
    gen = torch.Generator().manual_seed(config.seed)
    loss_fn = torch.nn.CrossEntropyLoss()
    state = {"step": 0, "perm": None}

    def run(num_steps: int) -> float:
        last = math.nan
        for _ in range(num_steps):
            s = state["step"]
            if s % spe == 0:
                state["perm"] = torch.randperm(len(labels), generator=gen)[: spe * batch].view(
                    spe, batch
                )
            idx = state["perm"][s % spe]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(images[idx]), labels[idx])
            loss.backward()
            opt.step()
            state["step"] = s + 1
            if state["step"] % read_every == 0:
                last = loss.item()
        return last

    return run


BASELINES: dict[str, TrainerFactory] = {
    "python_dispatch": lambda ds, c, read_every: codelab_trainer(
        ds, c, read_every=read_every, jit=False
    ),
    "codelab_jit": lambda ds, c, read_every: codelab_trainer(ds, c, read_every=read_every),
}
"""The codelab's loop, without and with `jax.jit`."""


def all_trainers() -> tuple[dict[str, TrainerFactory], list[str]]:
    """`(trainers, skipped)`: the codelab's loops, the library's paths and PyTorch's loop
    if torch is installed (else a line saying why it is left out)."""
    trainers = {**BASELINES, **TRAINERS}
    try:
        import torch  # noqa: F401

        trainers["pytorch_eager"] = lambda ds, c, read_every: pytorch_trainer(
            ds, c, read_every=read_every
        )
        return trainers, []
    except ImportError:
        return trainers, ["pytorch_eager: torch is not installed (pip install torch)"]
