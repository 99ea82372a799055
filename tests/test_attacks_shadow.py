"""Shadow bank: balanced keep matrix, batched training == separate training, caching, resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attacks import shadow as shadow_mod
from attacks.batched import calibrate, check_batchable, device_dataset, train_batched
from attacks.shadow import PoolDataset, ShadowBank, keep_matrix, shadow_seed
from duck.data.registry import build_datasets
from duck.errors import DuckInputError
from duck.models import create_model
from duck.training import Recipe, train_classifier

CPU = {"accelerator": "cpu", "devices": 1}



@pytest.fixture(scope="module")
def data():
    return build_datasets("synthetic", n_train=160, n_test=40)


def factory(data):
    return lambda: create_model("smallcnn", data.num_classes, 1, 8, width=4)


def recipe(opt: str = "adam", epochs: int = 2) -> Recipe:
    optim = ({"_target_": "torch.optim.Adam", "_partial_": True, "lr": 1e-2, "weight_decay": 5e-4}
             if opt == "adam"
             else {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.05, "momentum": 0.9,
                   "nesterov": True,
                   "weight_decay": 5e-4})
    sched = {"_target_": "torch.optim.lr_scheduler.CosineAnnealingLR", "_partial_": True, "T_max": epochs}
    return Recipe(epochs=epochs, batch_size=16, optimizer=optim, scheduler=sched)


# ------------------------------------------------------------------------------------------- keep matrix
@pytest.mark.parametrize("e,n,seed", [(2, 7, 0), (16, 100, 1), (64, 33, 2)])
def test_keep_matrix_is_balanced(e: int, n: int, seed: int) -> None:
    keep = keep_matrix(e, n, seed)
    assert keep.shape == (e, n) and keep.dtype == bool
    assert (keep.sum(0) == e // 2).all()  # every example IN for exactly half of the shadows
    np.testing.assert_array_equal(keep, keep_matrix(e, n, seed))
    assert not np.array_equal(keep, keep_matrix(e, n, seed + 1)) or e == 2 and n < 3
    if n > 30:  # rows are random halves: about N/2 each
        assert np.all(np.abs(keep.sum(1) - n / 2) < 4 * np.sqrt(n) / 2 + 1)


def test_keep_matrix_rejects_odd_or_tiny_banks() -> None:
    for e in (0, 1, 3):
        with pytest.raises(DuckInputError, match="even number"):
            keep_matrix(e, 10, 0)


def test_shadow_seeds_are_distinct() -> None:
    seeds = {shadow_seed(0, k) for k in range(256)} | {shadow_seed(1, k) for k in range(256)}
    assert len(seeds) == 512


# --------------------------------------------------------------------- batched == separately trained
@pytest.mark.parametrize("opt,augment,matmul", [("adam", ["flip"], False), ("sgd", [], False), ("adam", [], True)])
def test_batched_models_equal_separately_trained_ones(data, opt: str, augment: list[str], matmul: bool) -> None:
    """K models trained at once equal K models trained one after another by the target's recipe
    (``train_classifier``, Lightning) with the same seeds: same init, data order, augmentation, BatchNorm
    running statistics and optimiser state — up to float rounding."""
    rec = recipe(opt)
    keep = keep_matrix(4, len(data.train), 0)
    index_sets = [np.flatnonzero(keep[k]) for k in range(3)]  # unequal sizes: ragged epochs
    assert len({len(i) // rec.batch_size for i in index_sets}) > 1 or len({len(i) for i in index_sets}) > 1
    seeds = [shadow_seed(0, k) for k in range(3)]

    def fresh(s: int):
        torch.manual_seed(s)
        return factory(data)()

    separate = [train_classifier(fresh(s), data.train, rec, indices=i, augment=augment, seed=s,
                                 trainer_cfg=CPU)[0]
                for i, s in zip(index_sets, seeds, strict=True)]
    batched = train_batched([fresh(s) for s in seeds], data.train, rec, index_sets, seeds, augment=augment,
                            matmul_convs=matmul)
    for a, b in zip(separate, batched, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for name in sa:
            torch.testing.assert_close(sb[name], sa[name], rtol=1e-4, atol=1e-5, msg=name)
    # and training did something: models differ from each other and from their initialisation
    assert not torch.allclose(batched[0].net.fc.weight, batched[1].net.fc.weight)
    assert not torch.allclose(batched[0].net.fc.weight, fresh(seeds[0]).net.fc.weight)


def test_batching_refuses_coupled_optimisers_and_mixed_precision() -> None:
    lbfgs = Recipe(epochs=1, batch_size=8, optimizer={"_target_": "torch.optim.LBFGS", "_partial_": True})
    with pytest.raises(DuckInputError, match="attack.mode=sequential"):
        check_batchable(lbfgs)
    adafactor = Recipe(epochs=1, batch_size=8, optimizer={"_target_": "torch.optim.Adafactor", "_partial_": True})
    with pytest.raises(DuckInputError, match="Adafactor"):
        check_batchable(adafactor)
    with pytest.raises(DuckInputError, match="precision"):
        check_batchable(recipe(), {"precision": "16-mixed"})
    check_batchable(recipe(), {"precision": "32-true", "accelerator": "cpu", "deterministic": True})


@pytest.mark.parametrize("setting", [{"gradient_clip_val": 0.01}, {"accumulate_grad_batches": 4},
                                     {"max_steps": 3}, {"limit_train_batches": 0.5}])
def test_trainer_settings_that_change_training_are_not_dropped(data, tmp_path: Path, setting) -> None:
    """Batched training does not implement them: it refuses them (auto then trains sequentially with
    Lightning, which applies them), and they enter the bank's key (a bank trained without clipping was reused
    for a target trained with it)."""
    with pytest.raises(DuckInputError, match=f"trainer.{next(iter(setting))}=.*attack.mode=sequential"):
        check_batchable(recipe(), setting)
    base = make_bank(data, tmp_path)
    bank = make_bank(data, tmp_path, mode="auto", trainer_cfg={**CPU, **setting})
    assert bank.key != base.key
    mode, info = bank.resolve_mode()
    assert mode == "sequential" and "batching unsupported" in info["reason"]
    with pytest.raises(DuckInputError, match="changes training"):
        make_bank(data, tmp_path, mode="batched", trainer_cfg={**CPU, **setting}).resolve_mode()


def test_calibration_measures_both_modes(data) -> None:
    cal = calibrate(factory(data), data.train, recipe(), 2, steps=2, warmup=1)
    assert cal["batched_s_per_model_step"] > 0 and cal["sequential_s_per_model_step"] > 0
    ratio = cal["sequential_s_per_model_step"] / cal["batched_s_per_model_step"]
    assert cal["speedup"] == pytest.approx(ratio)


# --------------------------------------------------------------------------------- cache and resume
def interrupt_after_first_chunk(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Make every bank's training stop (``KeyboardInterrupt``, as a kill would) after its first chunk; returns
    the chunks trained."""
    calls: list[list[int]] = []
    original = ShadowBank._train_chunk

    def crash_after_first(self, chunk, mode):
        if calls:
            raise KeyboardInterrupt("simulated kill")
        calls.append(list(chunk))
        return original(self, chunk, mode)

    monkeypatch.setattr(ShadowBank, "_train_chunk", crash_after_first)
    return calls


def make_bank(data, root: Path, **kw) -> ShadowBank:
    args = dict(n_shadow=4, seed=0, mode="batched", chunk_size=2, trainer_cfg=CPU)
    args.update(kw)
    rec = args.pop("recipe", recipe(epochs=1))
    return ShadowBank(root, data, factory(data), rec, **args)


def test_bank_cache_hit_miss_and_resume(data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an uninterrupted reference bank
    ref = make_bank(data, tmp_path / "ref")
    ref.train()

    # interrupted after the first chunk (2 of 4 shadows saved)
    original = ShadowBank._train_chunk
    calls = interrupt_after_first_chunk(monkeypatch)
    bank = make_bank(data, tmp_path / "c")
    with pytest.raises(KeyboardInterrupt):
        bank.train()
    assert calls == [[0, 1]] and bank.missing() == [2, 3]
    assert not list((bank.dir / "shadows").glob(".*.tmp"))  # atomic writes: no partial files left

    # resume: only the missing shadows are trained, and the bank equals the uninterrupted one
    monkeypatch.setattr(ShadowBank, "_train_chunk", original)
    resumed = make_bank(data, tmp_path / "c")
    assert resumed.key == bank.key == ref.key  # the key depends on the setup, not on the cache root
    info = resumed.train()
    assert info["trained"] == [2, 3] and resumed.missing() == []
    np.testing.assert_array_equal(resumed.keep, ref.keep)
    for k in range(4):
        a, b = ref.load_shadow(k).state_dict(), resumed.load_shadow(k).state_dict()
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6)

    # cache hit: nothing to train, φ computed once then reused
    again = make_bank(data, tmp_path / "c")
    assert again.train()["trained"] == []
    phi_tr, phi_te, reused = again.shadow_phi(["identity", "flip"])
    assert phi_tr.shape == (4, len(data.train), 2) and phi_te.shape == (4, len(data.test), 2) and not reused
    phi_tr2, _, reused2 = make_bank(data, tmp_path / "c").shadow_phi(["identity", "flip"])
    assert reused2 and np.array_equal(phi_tr, phi_tr2)
    model = again.load_shadow(1)
    from attacks.lira import lira_phi, view_logits

    logits, y = view_logits(model, data.train, None, ["identity"])
    np.testing.assert_allclose(phi_tr[1, :, 0], lira_phi(logits[0], y).numpy(), rtol=1e-6)


def test_bank_key_changes_with_the_setup(data, tmp_path: Path) -> None:
    base = make_bank(data, tmp_path)
    assert make_bank(data, tmp_path, mode="sequential", chunk_size=1).key == base.key  # how, not what
    quiet = {**CPU, "enable_progress_bar": False, "deterministic": True, "log_every_n_steps": 5}
    assert make_bank(data, tmp_path, trainer_cfg=quiet).key == base.key  # where/how it runs, not what
    assert make_bank(data, tmp_path, n_shadow=6).key != base.key
    assert make_bank(data, tmp_path, seed=1).key != base.key
    assert make_bank(data, tmp_path, recipe=recipe(epochs=2)).key != base.key
    assert make_bank(data, tmp_path, pool="train+test").key != base.key
    other = build_datasets("synthetic", n_train=160, n_test=40, seed=1)
    assert ShadowBank(tmp_path, other, factory(other), recipe(epochs=1), n_shadow=4).key != base.key
    with pytest.raises(DuckInputError, match="shadow_pool"):
        make_bank(data, tmp_path, pool="test")
    with pytest.raises(DuckInputError, match="attack.mode"):
        make_bank(data, tmp_path, mode="fast")


def test_sequential_bank_trains_with_the_recipe(data, tmp_path: Path) -> None:
    bank = make_bank(data, tmp_path, n_shadow=2, mode="sequential")
    info = bank.train()
    assert info["mode"] == "sequential" and info["trained"] == [0, 1]
    torch.manual_seed(shadow_seed(0, 1))
    expected, _ = train_classifier(factory(data)(), data.train, recipe(epochs=1),
                                   indices=np.flatnonzero(bank.keep[1]),
                                   seed=shadow_seed(0, 1), trainer_cfg=CPU)
    torch.testing.assert_close(bank.load_shadow(1).state_dict(), expected.state_dict())


def test_pool_dataset_and_shadow_in(data, tmp_path: Path) -> None:
    pool = PoolDataset(data.train, data.test)
    n = len(data.train)
    x, y, idx = pool.__getitems__([n + 3, 2, n])
    torch.testing.assert_close(x[0], data.test[3][0])
    torch.testing.assert_close(x[1], data.train[2][0])
    assert idx.tolist() == [n + 3, 2, n] and y[2].item() == data.test.labels[0]

    class ItemsOnly(torch.utils.data.Dataset):  # a split read item by item (no batched fetch, no ``to``)
        def __init__(self, ds) -> None:
            self.ds, self.labels = ds, ds.labels

        def __len__(self) -> int:
            return len(self.ds)

        def __getitem__(self, i: int):
            return self.ds[i]

    lazy = PoolDataset(data.train, ItemsOnly(data.test))
    x2, y2, _ = lazy.__getitems__([n + 3, 2, n])
    torch.testing.assert_close(x2, x)
    assert y2.tolist() == y.tolist()
    assert device_dataset(lazy, torch.device("cpu")) is None and device_dataset(pool, torch.device("cpu")) is not None
    bank = make_bank(data, tmp_path, pool="train+test")
    assert bank.keep.shape == (4, n + len(data.test))
    sin = bank.shadow_in(np.array([0, 5]), np.array([1]))
    np.testing.assert_array_equal(sin, bank.keep[:, [0, 5, n + 1]])
    plain = make_bank(data, tmp_path)
    assert not plain.shadow_in(np.array([0]), np.array([1, 2]))[:, 1:].any()


def test_incomplete_bank_refuses_inference(data, tmp_path: Path) -> None:
    bank = make_bank(data, tmp_path)
    with pytest.raises(DuckInputError, match="incomplete"):
        bank.shadow_phi(["identity"])
    assert shadow_mod.BANK_FORMAT >= 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_batched_training_on_cuda_matches_cpu_sequential(data) -> None:
    rec = recipe("adam")
    keep = keep_matrix(4, len(data.train), 0)
    index_sets = [np.flatnonzero(keep[k]) for k in range(4)]
    seeds = [shadow_seed(0, k) for k in range(4)]

    def fresh(s: int):
        torch.manual_seed(s)
        return factory(data)()

    separate = [train_classifier(fresh(s), data.train, rec, indices=i, seed=s, trainer_cfg=CPU)[0]
                for i, s in zip(index_sets, seeds, strict=True)]
    # full float32 on the GPU (cuDNN convolutions default to TF32, ~1e-3 relative error per product,
    # which two epochs of Adam amplify past any fixed tolerance)
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True, allow_tf32=False):
            batched = train_batched([fresh(s) for s in seeds], data.train, rec, index_sets, seeds, device="cuda")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    for a, b in zip(separate, batched, strict=True):
        for name, t in a.state_dict().items():
            torch.testing.assert_close(b.state_dict()[name].cpu(), t, rtol=1e-3, atol=1e-4,
                                       msg=lambda m, name=name: f"{name}: {m}")


def test_attacks_package_is_light() -> None:
    import subprocess
    import sys

    code = "import sys, attacks; assert 'torch' not in sys.modules and 'sklearn' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_thread_setting_is_scoped() -> None:
    from attacks.threads import intra_op_threads, resolve_threads

    before = torch.get_num_threads()
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    assert resolve_threads(None) is None and resolve_threads(3) == 3
    assert resolve_threads("auto") in (1, None)
    with pytest.raises(DuckInputError, match="attack.threads"):
        resolve_threads("many")


@pytest.mark.parametrize("stride,padding,dilation,bias", [(1, 1, 1, False), (2, 0, 1, True), (1, 2, 2, True)])
def test_matmul_conv_equals_conv2d_under_vmap(stride: int, padding: int, dilation: int, bias: bool) -> None:
    """The im2col convolution of batched training is F.conv2d (float64, forward and gradients), per model."""
    from torch.func import functional_call, vmap

    from attacks.batched import _use_matmul_convs

    conv = torch.nn.Conv2d(3, 5, 3, stride=stride, padding=padding, dilation=dilation, bias=bias).double()
    fast = torch.nn.Conv2d(3, 5, 3, stride=stride, padding=padding, dilation=dilation, bias=bias).double()
    _use_matmul_convs(fast, n_models=4, max_elements=1 << 30)
    assert type(fast).__name__ == "_MatmulConv2d"
    params = {n: torch.randn(4, *p.shape, dtype=torch.float64, requires_grad=True) for n, p in conv.named_parameters()}
    x = torch.randn(4, 2, 3, 9, 9, dtype=torch.float64)
    outs = [vmap(lambda p, xi, m=m: functional_call(m, p, (xi,)))(params, x) for m in (conv, fast)]
    torch.testing.assert_close(outs[1], outs[0])
    grads = [torch.autograd.grad((o ** 2).sum(), list(params.values())) for o in outs]
    for g_fast, g_ref in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(g_fast, g_ref)
    fast.max_elements = 10  # too large for the budget: the grouped convolution runs instead
    torch.testing.assert_close(vmap(lambda p, xi: functional_call(fast, p, (xi,)))(params, x), outs[0])


def test_direct_batch_draws_equal_the_loaders(data) -> None:
    """The batch plan drawn directly equals what the models' own loaders yield, epoch after epoch, for
    subsets above, at and below the batch size (a partial batch exhausts the sampler: one more draw)."""
    from attacks.batched import _BatchSource

    sizes = [100, 37, 16, 15, 64, 65, 1]
    index_sets = [np.sort(np.random.default_rng(n).choice(len(data.train), n, replace=False)) for n in sizes]
    seeds = [shadow_seed(3, k) for k in range(len(sizes))]
    direct = _BatchSource(data.train, index_sets, seeds, 16, torch.device("cpu"))
    loaders = _BatchSource(data.train, index_sets, seeds, 16, torch.device("cpu"))
    loaders.direct = False
    assert direct.direct
    for _ in range(3):
        for step_a, step_b in zip(direct.epoch(), loaders.epoch(), strict=True):
            assert [g for g, _, _ in step_a] == [g for g, _, _ in step_b]
            for (_, xa, ya), (_, xb, yb) in zip(step_a, step_b, strict=True):
                assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_batch_source_falls_back_to_loaders_when_draws_differ(data, monkeypatch) -> None:
    from attacks.batched import _BatchSource

    monkeypatch.setattr(_BatchSource, "_draw", lambda self, k, gen: torch.zeros((1, 1), dtype=torch.long))
    src = _BatchSource(data.train, [np.arange(40)], [0], 16, torch.device("cpu"))
    assert not src.direct and len(list(src.epoch())) == 2
    with pytest.raises(DuckInputError, match="empty"):
        train_batched([factory(data)()], data.train, recipe(), [np.arange(0)], [0])


# ------------------------------------------------------------------------- corrupt cache entries rebuilt
def test_corrupt_bank_entries_are_rebuilt_with_a_warning(data, tmp_path: Path, capsys) -> None:
    bank = make_bank(data, tmp_path)
    bank.train()
    phi_tr, phi_te, _ = bank.shadow_phi(["identity"])
    phi_file = bank.phi_path(["identity"])
    capsys.readouterr()

    for content in (b"garbage", phi_file.read_bytes()[:50]):  # corrupt / truncated phi file: recomputed
        phi_file.write_bytes(content)
        again, _, reused = make_bank(data, tmp_path).shadow_phi(["identity"])
        assert not reused and np.allclose(again, phi_tr)
        assert "warning:" in capsys.readouterr().err
    np.savez(phi_file, phi_train=phi_tr[:, :3], phi_test=phi_te, views=np.array(["identity"]))  # wrong shape
    assert not make_bank(data, tmp_path).shadow_phi(["identity"])[2]
    np.savez(phi_file, views=np.array(["identity"]))  # missing keys
    assert not make_bank(data, tmp_path).shadow_phi(["identity"])[2]

    keep_file = bank.dir / "keep.npy"
    for content in (b"garbage", keep_file.read_bytes()[:40]):  # keep.npy is deterministic: rewritten
        keep_file.write_bytes(content)
        b = make_bank(data, tmp_path)
        np.testing.assert_array_equal(b.keep, bank.keep)
        assert "corrupt keep.npy" in capsys.readouterr().err and b.missing() == []

    phi_file.unlink()  # a corrupt shadow checkpoint is trained again, not reported as a user file
    bank.shadow_path(2).write_bytes(b"not a checkpoint")
    again, _, _ = make_bank(data, tmp_path).shadow_phi(["identity"])
    err = capsys.readouterr().err
    assert "shadow_0002.ckpt" in err and "training it again" in err and "torch.save" not in err
    np.testing.assert_allclose(again, phi_tr, rtol=1e-4, atol=1e-4)

    for content in ("", "garbage", "[1, 2]"):  # corrupt meta.json: the whole bank is rebuilt
        (bank.dir / "meta.json").write_text(content)
        b = make_bank(data, tmp_path)
        assert b.train()["trained"] == [0, 1, 2, 3]
        assert "corrupt meta.json" in capsys.readouterr().err


def test_cache_dir_that_is_a_file_is_refused(data, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DuckInputError, match="DUCK_CACHE_DIR"):
        make_bank(data, f)


# ----------------------------------------------- damaged cache entries: rebuilt, never used, never a traceback
@pytest.fixture(scope="module")
def trained_bank(data, tmp_path_factory) -> tuple[Path, np.ndarray]:
    """A trained 4-shadow bank with its identity-view φ, copied by :func:`bank_copy` for each test."""
    root = tmp_path_factory.mktemp("bank")
    bank = make_bank(data, root)
    bank.train()
    phi_tr, _, _ = bank.shadow_phi(["identity"])
    return root, phi_tr


def bank_copy(data, trained_bank, tmp_path: Path) -> ShadowBank:
    import shutil

    shutil.copytree(trained_bank[0], tmp_path / "c")
    return make_bank(data, tmp_path / "c")


def test_phi_with_nan_is_recomputed(data, trained_bank, tmp_path: Path, capsys) -> None:
    bank = bank_copy(data, trained_bank, tmp_path)
    phi_file = bank.phi_path(["identity"])
    with np.load(phi_file) as f:
        arrays = dict(f)
    arrays["phi_train"][1, 3, 0] = np.nan
    arrays["phi_test"][0, 0, 0] = np.inf
    np.savez(phi_file, **arrays)
    capsys.readouterr()
    phi_tr, phi_te, reused = make_bank(data, tmp_path / "c").shadow_phi(["identity"])
    assert not reused and np.isfinite(phi_tr).all() and np.isfinite(phi_te).all()
    np.testing.assert_allclose(phi_tr, trained_bank[1], rtol=1e-5, atol=1e-5)
    err = capsys.readouterr().err
    assert "warning:" in err and "NaN or inf" in err and "recomputing it" in err
    assert make_bank(data, tmp_path / "c").shadow_phi(["identity"])[2]  # the rewritten file is reused


@pytest.mark.parametrize("edit", [
    {"trained": 5}, {"trained": ["a"]}, {"trained": [0, 99]}, {"trained": None}, {"train_seconds": "slow"},
    {"train_seconds": -1}, {"runs": {}}, {"key": "elsewhere"}, {"spec": {}}, {"spec": None}, {"spec": {"a": 1}},
    {"spec": "edited"},
])
def test_malformed_meta_is_rebuilt(data, trained_bank, tmp_path: Path, capsys, edit) -> None:
    """A meta.json of the right JSON syntax but the wrong structure, an empty spec, or a spec of another setup
    in this directory (it does not hash to the directory's key) is damage: the bank is rebuilt with a warning."""
    import json

    bank = bank_copy(data, trained_bank, tmp_path)
    meta = json.loads((bank.dir / "meta.json").read_text())
    if edit.get("spec") == "edited":
        edit = {"spec": {**meta["spec"], "seed": 12345}}
    meta.update(edit)
    (bank.dir / "meta.json").write_text(json.dumps(meta))
    bank.shadow_path(3).unlink()  # a missing shadow: train() runs and updates meta.json
    capsys.readouterr()
    again = make_bank(data, tmp_path / "c")
    assert again.train()["trained"] == [0, 1, 2, 3]
    err = capsys.readouterr().err
    assert "warning:" in err and "corrupt meta.json" in err and "rebuilding the bank" in err
    assert json.loads((again.dir / "meta.json").read_text())["trained"] == [0, 1, 2, 3]


def test_key_collision_is_refused(data, tmp_path: Path, monkeypatch) -> None:
    """Another setup whose spec hashes to the same key (made to happen here) is not rebuilt over."""
    import json

    from duck import store

    monkeypatch.setattr(store, "spec_key", lambda kind, version, fields: "k" * 20)
    bank = make_bank(data, tmp_path)
    _ = bank.keep
    meta = json.loads((bank.dir / "meta.json").read_text())
    meta["spec"]["seed"] = 12345
    (bank.dir / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DuckInputError, match="hashes to the same key"):
        make_bank(data, tmp_path).train()


def test_file_in_place_of_a_directory_and_the_reverse_is_rebuilt(data, trained_bank, tmp_path: Path,
                                                                 capsys) -> None:
    import shutil

    bank = bank_copy(data, trained_bank, tmp_path)
    shutil.rmtree(bank.dir / "shadows")
    (bank.dir / "shadows").write_text("not a directory")
    capsys.readouterr()
    again = make_bank(data, tmp_path / "c")
    assert again.train()["trained"] == [0, 1, 2, 3] and again.missing() == []
    err = capsys.readouterr().err
    assert "warning:" in err and "shadows is not a directory" in err

    again.shadow_path(1).unlink()
    again.shadow_path(1).mkdir()  # a directory where a checkpoint belongs
    phi_file = again.phi_path(["identity"])
    phi_file.unlink()
    phi_file.mkdir()  # and where the φ file belongs
    third = make_bank(data, tmp_path / "c")
    assert third.train()["trained"] == [1]
    phi_tr, _, reused = third.shadow_phi(["identity"])
    assert not reused and phi_file.is_file()
    np.testing.assert_allclose(phi_tr, trained_bank[1], rtol=1e-4, atol=1e-4)
    err = capsys.readouterr().err
    assert "shadow_0001.ckpt is a directory" in err and f"{phi_file.name} is a directory" in err


def test_checkpoint_of_another_shadow_is_retrained(data, trained_bank, tmp_path: Path, capsys) -> None:
    """shadow_0002.ckpt overwritten by shadow 0's checkpoint (it loads fine) is caught by its manifest and
    trained again, and the job reports it (bank.job: what audit.json's bank.trained_now counts)."""
    import shutil

    bank = bank_copy(data, trained_bank, tmp_path)
    shutil.copyfile(bank.shadow_path(0), bank.shadow_path(2))
    bank.phi_path(["identity"]).unlink()
    capsys.readouterr()
    again = make_bank(data, tmp_path / "c")
    assert again.train()["trained"] == []
    phi_tr, _, reused = again.shadow_phi(["identity"])
    assert not reused
    np.testing.assert_allclose(phi_tr, trained_bank[1], rtol=1e-4, atol=1e-4)
    err = capsys.readouterr().err
    assert "shadow_0002.ckpt" in err and "holds shadow 0" in err and "training it again" in err
    assert again.job["trained"] == [2] and again.job["seconds"] > 0 and again.job["mode"] == "batched"
    with pytest.raises(DuckInputError, match="not shadow 1"):
        shutil.copyfile(again.shadow_path(0), again.shadow_path(1))
        again.load_shadow(1)
    other = make_bank(data, tmp_path / "other", seed=1)  # a checkpoint of another bank, same shadow id
    other.train()
    shutil.copyfile(other.shadow_path(1), again.shadow_path(1))
    with pytest.raises(DuckInputError, match=f"bank {other.key}"):
        again.load_shadow(1)


def test_audit_counts_shadows_retrained_while_loading(data, trained_bank, tmp_path: Path, capsys) -> None:
    """A truncated shadow checkpoint (and no φ file) is retrained inside shadow_phi: audit.json's bank block
    counts it and its training time."""
    import json

    from attacks.audit import audit_models
    from duck.data.scenarios import build_scenario

    bank = bank_copy(data, trained_bank, tmp_path)
    ckpt = bank.shadow_path(1)
    ckpt.write_bytes(ckpt.read_bytes()[:200])
    bank.phi_path(["identity"]).unlink()
    scenario = build_scenario("class_removal", data.train.labels, data.test.labels, data.num_classes,
                              forget_classes=[1])
    attack = {"n_shadow": 4, "mode": "batched", "chunk_size": 2, "ci": {"n_boot": 200},
              "svm_mia": {"enabled": False}}
    audits = audit_models(attack, data, scenario, {"unlearned": factory(data)()}, recipe=recipe(epochs=1),
                          model_factory=factory(data), cache_dir=tmp_path / "c", trainer_cfg=CPU,
                          out_dirs={"unlearned": tmp_path / "out"})
    info = json.loads((tmp_path / "out" / "audit.json").read_text())["bank"]
    assert info == audits["unlearned"]["bank"]
    assert info["trained_now"] == 1 and info["train_s"] > 0 and info["mode"] == "batched"
    assert not info["phi_reused"] and info["phi_s"] >= 0
    assert "shadow_0001.ckpt" in capsys.readouterr().err


def test_concurrent_jobs_take_turns_on_a_bank(data, trained_bank, tmp_path: Path, capsys) -> None:
    """A second job waits for the one holding the bank's lock, then trains nothing twice and keeps the
    first job's ``meta.json`` entries (the read-modify-write used to race)."""
    import fcntl
    import json
    import threading

    bank = bank_copy(data, trained_bank, tmp_path)
    bank.shadow_path(3).unlink()
    other = make_bank(data, tmp_path / "c")
    result: dict[str, object] = {}
    with open(bank.dir.parent / f"{bank.key}.lock", "a+b") as held:  # another job holds the lock
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=lambda: result.update(other.train()))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not result  # waiting, not training
        assert "is being trained or checked by another job; waiting for it" in capsys.readouterr().err
        # meanwhile the lock holder trains shadow 3 and records it
        bank._train_unlocked()
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join(timeout=60)
    assert not worker.is_alive() and result["trained"] == []  # found it saved: not trained twice
    meta = json.loads((bank.dir / "meta.json").read_text())
    assert meta["trained"] == [0, 1, 2, 3] and [r["trained"] for r in meta["runs"]][-1] == [3]
