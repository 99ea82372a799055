"""Where batched shadow training spends a step (GPU or CPU): per-epoch times of a few variants and a
torch.profiler table. A diagnostic for attacks/batched.py, not a benchmark (``duck-bench audit`` is).

    python scripts/profile_batched.py [--models 64] [--width 32] [--epochs 3] [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
import torch

from attacks.batched import batch_shape, train_batched
from attacks.shadow import keep_matrix, shadow_seed
from duck.data.registry import build_datasets
from duck.models import create_model
from duck.training import Recipe


class _NoDevice(torch.utils.data.Dataset):
    """The data set without ``to``: batches are gathered on the CPU and copied (the fallback path)."""

    def __init__(self, ds: torch.utils.data.Dataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitems__(self, idx: list[int]):
        return self.ds.__getitems__(idx)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    device = torch.device(args.device)
    data = build_datasets("digits")
    keep = keep_matrix(args.models + args.models % 2, len(data.train), 0)
    index_sets = [np.flatnonzero(keep[k]) for k in range(args.models)]
    seeds = [shadow_seed(0, k) for k in range(args.models)]
    adam = {"_target_": "torch.optim.Adam", "_partial_": True, "lr": 1e-3, "weight_decay": 5e-4}
    steps = int(np.mean([batch_shape(len(i), 64)[0] for i in index_sets]))

    def models() -> list:
        out = []
        for s in seeds:
            torch.manual_seed(s)
            out.append(create_model("smallcnn", data.num_classes, data.in_chans, data.img_size, width=args.width))
        return out

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def epoch_s(dataset, epochs: int, matmul_convs: bool = False, **opt) -> float:
        rec = Recipe(epochs=epochs, batch_size=64, optimizer={**adam, **opt})
        ms = models()
        sync()
        t0 = time.perf_counter()
        train_batched(ms, dataset, rec, index_sets, seeds, device=device, matmul_convs=matmul_convs)
        sync()
        return (time.perf_counter() - t0) / epochs

    def sequential_step_s(n: int = 50) -> float:
        model = create_model("smallcnn", data.num_classes, data.in_chans, data.img_size, width=args.width)
        model = model.to(device).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y, _ = data.train.__getitems__(list(range(64)))
        x, y = x.to(device), y.to(device)
        for i in range(n + 5):
            if i == 5:
                sync()
                t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        sync()
        return (time.perf_counter() - t0) / n

    epoch_s(data.train, 1)  # warm-up
    cudnn = torch.backends.cudnn
    rows = [("sequential bare step x K (per step of K models)", sequential_step_s() * args.models * steps)]
    rows.append(("batched, data on device", epoch_s(data.train, args.epochs)))
    rows.append(("batched, CPU gather + copy", epoch_s(_NoDevice(data.train), args.epochs)))
    epoch_s(data.train, 1, matmul_convs=True)
    rows.append(("batched, data on device, matmul convs", epoch_s(data.train, args.epochs, matmul_convs=True)))
    rows.append(("batched, data on device, fused Adam", epoch_s(data.train, args.epochs, fused=device.type == "cuda")))
    with cudnn.flags(enabled=True, benchmark=True) if device.type == "cuda" else contextlib.nullcontext():
        epoch_s(data.train, 1)
        rows.append(("batched, data on device, cudnn.benchmark", epoch_s(data.train, args.epochs)))
    with cudnn.flags(enabled=True, allow_tf32=False) if device.type == "cuda" else contextlib.nullcontext():
        rows.append(("batched, data on device, no TF32", epoch_s(data.train, args.epochs)))

    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        epoch_s(data.train, 1)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))
    print(f"{args.models} x smallcnn(width {args.width}) on digits, ~{steps} steps/epoch, device {device}"
          f" ({torch.cuda.get_device_name(0) if device.type == 'cuda' else 'cpu'})")
    for name, secs in rows:
        print(f"  {name:55s} {secs:8.3f} s/epoch  {1e3 * secs / steps:8.2f} ms/step")


if __name__ == "__main__":
    main()
