"""Every `eqx-fmnist` command the README and the docs show runs here, in a quick form.

The commands are read from the pages themselves (each `eqx-fmnist ...` line of a
```bash block), so a command added to a page is run without editing this file. The quick
form of a command that trains is the same command with a short run (`--steps`, a small
hidden layer) and its own `--out`; placeholders name what the page means (`runs/<run>`
is the last run made, `runs/<sweep>` the last sweep, `photo.jpg` and `shirt.png` are
test images saved as photos). Commands run in process, in order, in a fresh folder, and
each must exit 0 with what it promises on disk.
"""

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

import eqx_fmnist.config as ef_config

from helpers import child_env

# The documentation tier: what the pages and scripts show. Compiled as users' commands
# are: the pages' recipes run long enough for the running time to count.
pytestmark = [pytest.mark.docs, pytest.mark.optimized]

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.M | re.S)
QUICK = ["--steps", "12", "--log-every", "4", "--hidden", "16", "--batch-size", "256"]
QUICK_TEACHER = classmethod(
    lambda cls, **changes: cls(model="cnn", steps=12, batch_size=256).with_changes(**changes)
)


def shown_commands(page: Path) -> list[list[str]]:
    """The `eqx-fmnist` command lines of a page's ```bash blocks, comments dropped."""
    commands = []
    for block in BLOCK.findall(page.read_text()):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if "eqx-fmnist " in line:  # `pip install -e . && eqx-fmnist train` too
                commands.append(shlex.split(line.split("eqx-fmnist ", 1)[1]))
    return commands


PAGES_WITH_COMMANDS = [p for p in PAGES if shown_commands(p)]


def subcommand(argv: list[str]) -> str:
    """The command of a command line (`train` in `--distributed train ...`)."""
    return next(a for a in argv if not a.startswith("-"))


def alone(argv: list[str]) -> bool:
    """A command that needs no earlier one and takes a while: its own test case, so the
    suite's workers share the page's commands."""
    return "--devices" in argv


def _makes(argv: list[str]) -> str | None:
    """What a command leaves for later ones: the folder named by `--out`, else the kind
    of folder a placeholder names (`<run>`, `<sweep>`, `<cv>`)."""
    if "--out" in argv:
        return argv[argv.index("--out") + 1]
    return {"train": "<run>", "sweep": "<sweep>", "cv": "<cv>"}.get(subcommand(argv))


def _needed(commands: list[list[str]], shown_before: set[str]) -> list[list[str]]:
    """The commands of a page that run: those not shown word for word before (on an
    earlier page, or higher up on this one), and the commands that make the folders those
    read (the last `train` before a `runs/<run>`, the command whose `--out` a later one
    names)."""
    texts = [" ".join(c) for c in commands]
    keep = [t not in shown_before and t not in texts[:i] for i, t in enumerate(texts)]
    changed = True
    while changed:
        changed = False
        for i in range(len(commands)):
            if not keep[i]:
                continue
            for j in range(i - 1, -1, -1):
                made = _makes(commands[j])
                if made and made in texts[i]:
                    if not keep[j]:
                        keep[j] = changed = True
                    break
    return [c for c, k in zip(commands, keep, strict=True) if k]


def _cases() -> list[tuple[Path, str]]:
    """Each page's commands in order (those an earlier page showed word for word run
    there, once), and each command that runs alone once, on the first page that shows it
    (the README and tutorial 10 both show `train --devices 8`)."""
    cases, seen, shown = [], set(), set()
    for page in PAGES_WITH_COMMANDS:
        commands = shown_commands(page)
        if _needed([c for c in commands if not alone(c)], shown):
            cases.append((page, "in order"))
        for group in dict.fromkeys(" ".join(c) for c in commands if alone(c)):
            if group not in seen:
                seen.add(group)
                cases.append((page, group))
        shown |= {" ".join(c) for c in commands}
    return cases


CASES = _cases()


def test_the_finder_reads_the_readmes_commands():
    readme = shown_commands(ROOT / "README.md")
    assert ["data"] in readme and ["train"] in readme
    assert all(
        subcommand(c) in {"data", "train", "sweep", "evaluate", "predict", "export", "cv", "audit"}
        for p in PAGES_WITH_COMMANDS
        for c in shown_commands(p)
    )


def test_a_page_runs_what_no_earlier_page_ran_and_what_that_reads():
    earlier = {"train --calibrate 5000", "cv --folds 5 --out runs/cv", "audit runs/cv"}
    page = [
        ["train", "--calibrate", "5000"],
        ["train", "--seeds", "5"],
        ["evaluate", "runs/<run>", "--members"],
        ["cv", "--folds", "5", "--out", "runs/cv"],
        ["audit", "runs/cv"],
        ["export", "runs/cv"],
    ]
    assert _needed(page, earlier) == page[1:3] + page[3:4] + page[5:]
    assert _needed(page[:1] + page[4:5], earlier) == []
    assert _needed(page[1:2] * 2, set()) == page[1:2]  # the same command twice: once


def test_every_subcommand_is_shown_somewhere():
    from eqx_fmnist.cli import build_parser

    shown = {subcommand(c) for p in PAGES_WITH_COMMANDS for c in shown_commands(p)}
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) <= shown, set(sub.choices) - shown


class Session:
    """Runs one page's commands in order, in `folder`, remembering the runs made."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.runs: list[Path] = []
        self.sweeps: list[Path] = []
        self.cvs: list[Path] = []

    def resolve(self, arg: str) -> str:
        if "runs/<cv>" in arg:
            if not self.cvs:
                self.run(["cv", "--folds", "3"])  # the page assumes a cv folder exists
            return arg.replace("runs/<cv>", str(self.cvs[-1]))
        if "runs/<run>" in arg or "runs/<sweep>" in arg:
            if "<run>" in arg and not self.runs:
                self.run(["train"])  # the page assumes a run exists
            last = (self.runs if "<run>" in arg else self.sweeps)[-1]
            return arg.replace("runs/<run>", str(last)).replace("runs/<sweep>", str(last))
        return arg

    def quick(self, argv: list[str]) -> list[str]:
        argv = [self.resolve(a) for a in argv]
        if subcommand(argv) in ("train", "sweep", "cv") and "--resume" not in argv:
            for flag in ("--epochs", "--steps"):
                while flag in argv:
                    i = argv.index(flag)
                    del argv[i : i + 2]
            argv += QUICK
            if "--out" not in argv:
                argv += ["--out", f"runs/quick-{len(self.runs) + len(self.sweeps) + len(self.cvs)}"]
        return argv

    def run(self, argv: list[str]) -> str:
        from eqx_fmnist.cli import main

        argv = self.quick(argv)
        if "--resume" in argv:
            # The pages resume an interrupted run; the runs made here finished, and a
            # finished run is read-only to --resume. One stopped after its last
            # checkpoint, before its summary, stands in: the resume finishes it.
            resumed = self.folder / argv[argv.index("--resume") + 1]
            (resumed if resumed.is_dir() else resumed.parent).joinpath("summary.json").unlink()
        if "--distributed" in argv:  # `srun --ntasks=2 ...`: Slurm's variables by hand
            done = run_under_slurm(argv, self.folder)
            assert all(d.returncode == 0 for d in done), (argv, [d.stderr[-2000:] for d in done])
            printed = done[0].stdout
        elif "--devices" in argv:  # more devices than this process has: a fresh one
            eight = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
            env = child_env({**eight, "JAX_PLATFORMS": "cpu"})
            done = subprocess.run(
                [sys.executable, "-m", "eqx_fmnist", "--no-compile-cache", *argv],
                cwd=self.folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, (argv, done.stderr[-2000:])
            printed = done.stdout
        else:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.ExitStack() as stack:
                if "--distilled" in argv:  # the teacher's quick form: a few steps of its CNN
                    stack.enter_context(
                        mock.patch.object(ef_config.TrainConfig, "teacher", QUICK_TEACHER)
                    )
                status = main(["--no-compile-cache", *argv])
            printed = out.getvalue()
            assert status == 0, (argv, printed[-2000:])
        if subcommand(argv) == "cv":
            folder = self.folder / argv[argv.index("--out") + 1]
            assert (folder / "cv.json").is_file() and (folder / "out_of_fold.npz").is_file()
            self.cvs.append(folder)
        if subcommand(argv) in ("train", "sweep"):
            if "--out" in argv:
                folder = self.folder / argv[argv.index("--out") + 1]
            else:  # --resume RUN or RUN/checkpoint.eqx
                resumed = self.folder / argv[argv.index("--resume") + 1]
                folder = resumed if resumed.is_dir() else resumed.parent
            assert (folder / "summary.json").is_file() and (folder / "checkpoint.eqx").is_file()
            (self.sweeps if subcommand(argv) == "sweep" else self.runs).append(folder)
            if "--profile" in argv:
                assert list((folder / "profile").rglob("*.trace.json.gz")), "no trace"
            if "--calibrate" in argv:
                assert (folder / "calibration.safetensors").is_file()
        return printed


def run_under_slurm(argv: list[str], folder: Path, tasks: int = 2):
    """`srun --ntasks=TASKS eqx-fmnist ARGV` on this machine: each process with its own
    CPU device and the variables Slurm would set; their completed processes."""
    from helpers import slurm_env, slurm_job

    job = slurm_job()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "eqx_fmnist", "--no-compile-cache", *argv],
            cwd=folder,
            env={**os.environ, "JAX_PLATFORMS": "cpu", **slurm_env(job, rank, tasks)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(tasks)
    ]
    try:
        outputs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [
        subprocess.CompletedProcess(p.args, p.returncode, out, err)
        for p, (out, err) in zip(procs, outputs, strict=True)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("page, group", CASES, ids=lambda x: getattr(x, "stem", x))
def test_every_shown_command_runs(page, group, real_data, tmp_path, monkeypatch):
    """`group` is "in order" (the page's commands in order, but for those that run alone)
    or one command that runs alone."""
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "120")
    Image.fromarray(255 - real_data.test_images[0]).resize((120, 120)).save("photo.jpg")
    Image.fromarray(255 - real_data.test_images[1]).resize((90, 90)).save("shirt.png")
    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))  # found as the user has it
    session = Session(tmp_path)
    commands = shown_commands(page)
    if group == "in order":
        earlier = PAGES_WITH_COMMANDS[: PAGES_WITH_COMMANDS.index(page)]
        shown = {" ".join(c) for p in earlier for c in shown_commands(p)}
        commands = _needed([c for c in commands if not alone(c)], shown)
    else:
        commands = [c for c in commands if " ".join(c) == group]
    assert commands
    for argv in commands:
        printed = session.run(list(argv))
        command = subcommand(argv)
        if command == "data":
            assert "checksums verified" in printed and "60,000" in printed
        elif command == "evaluate":
            assert "accuracy" in printed and "Per-class accuracy" in printed
            if "--members" in argv:
                assert "member 0" in printed
        elif command == "predict":
            images = [a for a in argv[2:] if a.endswith((".jpg", ".png"))]
            assert sum(line.startswith(tuple(images)) for line in printed.splitlines()) or (
                "--json" in argv and printed.count("{") >= len(images)
            ), printed
            if "--show" in argv:
                assert Path(Path(images[0]).stem + ".prepared.png").is_file()
        elif command == "export":
            fmt = argv[argv.index("--format") + 1] if "--format" in argv else "stablehlo"
            target = Path(session.resolve(argv[1])) / f"model.{fmt}"
            assert target.is_file() and Path(f"{target}.manifest.json").is_file()
            assert "0 of 10,000 test images predicted differently" in " ".join(printed.split())
        elif command == "audit":
            folder = Path(session.resolve(argv[1]))
            assert (folder / "suspects_train.csv").is_file() and "Label issues" in printed


def readme_example() -> str:
    """The README's ```python block."""
    return re.search(r"^```python\n(.*?)^```$", (ROOT / "README.md").read_text(), re.M | re.S)[1]


@pytest.mark.slow
def test_the_readmes_example_runs(real_data, capsys, monkeypatch):
    """The README's example, as written (it runs in seconds): each line it prints says
    what the comment beside it promises."""
    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))
    code = readme_example()
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == code.count("print(")
    count, accuracy = printed[0].split()
    assert count == "10000" and 0.8 < float(accuracy) < 1  # every test image; it learned
    assert printed[1] == "235146"
