"""The `eqx-fmnist` command line, the only part of the package that prints.

The modules: `command` (the parser, `data`, `bench`), `train` (`train` and `sweep`: one way
to make a run folder), `evaluate`, `predict`, `export`, `flags` (flags generated from
`TrainConfig`), `common` (consoles, data loading, the progress bar).
"""

from .command import build_parser as build_parser, main as main
