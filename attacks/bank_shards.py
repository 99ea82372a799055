"""Banks built as array jobs (``attack.num_shards=N attack.shard=I``): the job trains only slice ``I`` of every
bank its audit needs (the LiRA shadow bank; with the forgetting audit the retrain bank and the controls'
banks; with U-LiRA the shadow pairs' retrains) and of the bank its method learns from (oracle, datamodel and
subset matching's references) into the shared cache, then stops. The slices run side by side
(:meth:`attacks.shadow.ShadowBank.train_slice`); once all have finished, the same job without
``attack.num_shards`` finds every bank complete and trains nothing::

    duck-audit ckpt=... scenario.forget_classes=[3] attack.num_shards=4 -m 'attack.shard=range(0,4)' \\
        hydra/launcher=submitit_slurm
    duck-audit ckpt=... scenario.forget_classes=[3]         # the audit itself, from the cache
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from attacks.context import AuditContext
from duck.io import atomic_save_json


def banks_of(ctx: AuditContext) -> dict[str, Any]:
    """Every bank the job's audit will need, constructed exactly as the audit constructs them (same keys)."""
    from attacks.ulira_audit import lira_bank, shadow_retrain_bank

    shadow = lira_bank(ctx)
    banks: dict[str, Any] = {"shadow bank": shadow}
    f = ctx.attack.forgetting
    if f["enabled"] and ctx.scenario is not None:
        from attacks.forgetting_audit import forgetting_banks

        banks.update({f"forgetting: {name}": bank for name, bank in forgetting_banks(ctx).items()})
        if f["ulira"]:
            banks["U-LiRA retrains"] = shadow_retrain_bank(ctx, shadow)
    return banks


def train_bank_slices(ctx: AuditContext, out: Path,
                      method_banks: Mapping[str, tuple[Any, Collection[int] | None]] | None = None
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train slice ``attack.shard`` of ``attack.num_shards`` of every bank (:func:`banks_of`) and of the banks
    the method learns from (``method_banks``: name → (its oracles, shadow or subset bank, built by the pipeline
    as the runs will ask for it; the models they will load, None for all); one the audit also needs is trained
    once); write ``shard.json`` (what this slice trained) into ``out``. The job's models are not trained or
    audited."""
    a = ctx.attack
    t0 = time.perf_counter()
    done: dict[str, Any] = {}
    banks: dict[str, tuple[Any, Collection[int] | None]] = {name: (bank, None) for name, bank in banks_of(ctx).items()}
    seen = {bank.dir for bank, _ in banks.values()}
    banks.update({name: entry for name, entry in (method_banks or {}).items() if entry[0].dir not in seen})
    whose = "the audit's and the method's" if method_banks else "the audit's"
    print(f"[shard {a.shard + 1}/{a.num_shards}] training slice {a.shard} of {a.num_shards} of {whose} banks "
          "into the shared cache")
    for name, (bank, models) in banks.items():
        info = bank.train_slice(a.shard, a.num_shards, models)
        wanted = range(bank.n_shadow) if models is None else sorted(models)
        missing = sorted(set(bank.missing()) & set(wanted))
        done[name] = {"dir": str(bank.dir), "n_models": bank.n_shadow, "trained": info["trained"],
                      "seconds": round(info["seconds"], 2), "missing_after": len(missing),
                      **({} if models is None else {"models_used": list(wanted)})}
        used = "" if models is None else f" (its runs use {len(wanted)} of its {bank.n_shadow} models)"
        print(f"      {name} {bank.key[:8]}: trained {len(info['trained'])} model(s) of slice {a.shard}{used} "
              f"({len(missing)} of {len(wanted)} still missing)")
    result = {"shard": a.shard, "num_shards": a.num_shards, "banks": done,
              "time_s": round(time.perf_counter() - t0, 2)}
    atomic_save_json(out / "shard.json", result)
    print(f"slice {a.shard} of {a.num_shards} done in {result['time_s']:.2f} s; once every slice has finished, run "
          "the same command without attack.num_shards / attack.shard: it trains nothing")
    return result, {"out": out}
