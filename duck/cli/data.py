"""``duck-data``: data set utilities. ``duck-data index data=NAME [split=train|test|both]`` writes
``index.csv`` (one row per sample: ``index,source,label,class_name``, :mod:`duck.data.index`) into the run
directory, so forget ids can be chosen by file or class and read back by people."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from duck.cli._app import fail, hydra_entry
from duck.data.base import DatasetSplits
from duck.data.imagefolder import listing_only
from duck.data.index import SPLITS, split_dataset, write_index
from duck.errors import DuckInputError
from duck.pipeline.config import hydra_output_dir

#: the subcommands, the first word on the command line (it may be left out: ``index`` is the default)
COMMANDS = ("index",)


def index_task(cfg: DictConfig) -> list[Path]:
    """Write ``index.csv`` for ``cfg.split`` (``train`` or ``test``), or ``index_train.csv`` and
    ``index_test.csv`` for ``both``, into the run directory; print and return their paths."""
    split = cfg.get("split", "train")
    if split not in (*SPLITS, "both"):
        raise DuckInputError(f"split={split!r} must be train, test or both")
    from duck.pipeline.job import build_data  # here, not at the top: `duck-data --help` needs none of the job

    with listing_only():  # paths and labels only: no image is opened, none is resized, no warning says so
        data = build_data(cfg)
    out = hydra_output_dir()
    targets = [(s, out / f"index_{s}.csv") for s in SPLITS] if split == "both" else [(split, out / "index.csv")]
    for s, _ in targets:  # a missing test split is refused before anything is written
        split_dataset(data, s)
    paths = [write_index(data, path, s) for s, path in targets]
    print(index_summary(data))
    for path in paths:
        print(f"wrote {path}")
    return paths


def index_summary(data: DatasetSplits) -> str:
    """The line ``duck-data index`` prints: the sample and class counts and, for images held in memory, their
    shape (``CxHxW``). Image files (``imagefolder``, ``tinyimagenet``, user data listing its files) are listed
    without being opened, so their size is left out: ``data.img_size`` is only what they are resized to when
    a job loads them, not what is on disk."""
    if getattr(data.train, "files", None) is None:
        return data.describe()
    test = f"{len(data.test)} test" if data.test is not None else "no test split"
    return f"{data.name}: {len(data.train)} train / {test} image files, {data.num_classes} classes"


#: what ``duck-data --help`` says the command does
ABOUT = ("write index.csv, every sample of a data set (index, source file or position, label, class name), in "
         "the order that forget ids and forget_ids.txt refer to; the command word index may be left out")

index_main = hydra_entry("dataset", index_task, ABOUT)


def main() -> None:
    """``duck-data [COMMAND] [overrides]``: the first word, when it is not an override or an option, names the
    command (``index``, the only one and the default)."""
    args = sys.argv[1:]
    if args and "=" not in args[0] and not args[0].startswith("-"):
        if args[0] not in COMMANDS:
            fail(f"unknown duck-data command {args[0]!r}; choose one of: {', '.join(COMMANDS)}")
        sys.argv = [sys.argv[0], *args[1:]]
    index_main()


if __name__ == "__main__":
    main()
