"""The `eqx-fmnist` command line, the only part of the package that prints.

The modules: `command` (the parser and `main`), a module per group of commands, none
importing another (`info`: `data`; `train`: `train` and `sweep`, one way to
make a run folder; `evaluate`; `predict`; `export`; `folds`: `cv` and `audit`), `flags`
(flags generated from `TrainConfig`, and the flags the commands share), `common`
(consoles, the download and progress bars, tables).
"""

from .command import build_parser as build_parser, main as main
