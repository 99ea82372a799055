"""The Levenberg-Marquardt margin fit (baselines/margin_fit.py; the matching methods' ``fit: margins``): its
per-example Jacobian against torch.func's (an independent implementation), one step against the damped minimum-norm
Gauss-Newton step computed by hand from that Jacobian, the layers it fits, its refusals, and the matching methods
moving each forget example's margin onto its target."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_matching import CPU, _data, _hp
from test_subset_matching import _refs, setup  # noqa: F401  (a fixture)
from torch import nn
from torch.func import functional_call, jacrev, vmap

import baselines.margin_fit as mf
from attacks.lira import lira_phi
from duck.errors import DuckInputError
from duck.metrics import predict_logits
from duck.unlearn import create_unlearner


class Net(nn.Module):
    """Every layer kind the hooks handle: padded strided conv with bias, dilated conv without, batch norm (not
    fitted), a Linear on a (B, T, d) input, a Linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(2, 3, 3, padding=1, stride=2)
        self.bn = nn.BatchNorm2d(3)
        self.c2 = nn.Conv2d(3, 4, 3, padding=2, dilation=2, bias=False)
        self.tok = nn.Linear(4, 5)
        self.fc = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.c2(torch.relu(self.bn(self.c1(x)))))  # (B, 4, 4, 4)
        h = torch.tanh(self.tok(h.flatten(2).transpose(1, 2)))  # (B, 16, 5)
        return self.fc(h.mean(dim=1))


@pytest.fixture
def net():
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.2, 0.2)
        model.bn.running_var.uniform_(0.5, 1.5)
    return model.eval()


def _x(n=7):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 2, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def _func_jacobian(model, modules, x, y):
    names = [n for n, p in model.named_parameters() if any(p is q for m in modules for q in m.parameters())]
    params = {n: p.detach() for n, p in model.named_parameters()}
    fixed = {n: p for n, p in params.items() if n not in names}

    def phi(sub, xi, yi):
        out = functional_call(model, ({**fixed, **sub}, dict(model.named_buffers())), (xi[None],))
        return mf.margins_of(out, yi[None])[0]

    jac = vmap(jacrev(phi), in_dims=(None, 0, 0))({n: params[n] for n in names}, x, y)
    return torch.cat([jac[n].reshape(len(x), -1) for n in names], dim=1)


def test_margins_are_lira_phi():
    z, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    torch.testing.assert_close(mf.margins_of(z, y).double(), lira_phi(z, y), rtol=1e-6, atol=1e-6)


def test_jacobian_equals_torch_func_per_example(net):
    x, y = _x()
    modules = [net.c1, net.c2, net.tok, net.fc]
    fit = mf.MarginFit(net, modules, x, y, batch_size=3)  # three batches, the last one short
    J = fit.jacobian()
    assert J.shape == (7, fit.n_params) and fit.n_params == 57 + 108 + 25 + 18
    torch.testing.assert_close(J, _func_jacobian(net, modules, x, y), rtol=1e-4, atol=1e-5)
    assert all(p.grad is None for p in net.parameters())  # the Jacobian leaves no .grad behind
    assert len(net.fc._forward_hooks) == 0  # nor hooks


def test_fitted_layers_are_the_trailing_ones_within_the_budget(net):
    assert mf.fitted_modules(net, 43) == [net.tok, net.fc]  # 25 + 18
    assert mf.fitted_modules(net, 42) == [net.fc]
    assert mf.fitted_modules(net, 150) == [net.tok, net.fc]  # the budget counts every layer taken (43 + 108 > 150)
    assert mf.fitted_modules(net, 151) == [net.c2, net.tok, net.fc]
    assert mf.fitted_modules(net, 1) == [net.fc]  # at least the last layer
    assert mf.fitted_modules(net, 10**6) == [net.c1, net.c2, net.tok, net.fc]  # batch norm never
    depthwise = nn.Sequential(nn.Conv2d(4, 4, 3, groups=4), nn.Conv2d(4, 2, 1))
    assert mf.fitted_modules(depthwise, 10**6) == [depthwise[1]]
    with pytest.raises(DuckInputError, match=r"^method.fit=margins needs a model with Linear or Conv2d \(groups=1\) layers to "
                                             r"fit; use method.fit=logits$"):
        mf.fitted_modules(nn.Sequential(nn.Flatten(), nn.ReLU()), 100)


def test_one_step_is_the_damped_minimum_norm_gauss_newton_step(net):
    x, y = _x()
    modules = [net.c2, net.tok, net.fc]
    fit = mf.MarginFit(net, modules, x, y)
    theta, phi, c1 = fit.get(), fit.values(), net.c1.weight.detach().clone()
    target = phi + 0.05 * torch.linspace(-1, 1, len(x))  # near: the linearised step lowers the residual
    J = _func_jacobian(net, modules, x, y)
    r = (target - phi).double()
    want = theta + (J.double().T @ torch.linalg.solve(J.double() @ J.double().T + 2.0 * torch.eye(len(x)).double(),
                                                      r)).float()
    info = mf.fit_margins(fit, target, iterations=1, damping=2.0, tol=0.0)
    torch.testing.assert_close(fit.get(), want, rtol=1e-4, atol=1e-6)
    assert info["iterations"] == info["steps"] == 1 and info["damping"] == pytest.approx(2.0 / 3)
    assert info["residual_rms"] < info["residual_rms_start"] == pytest.approx(float(r.pow(2).mean().sqrt()), rel=1e-5)
    assert torch.equal(net.c1.weight, c1)  # an unfitted layer untouched


def test_fit_reaches_targets_and_leaves_other_weights_alone(net):
    x, y = _x(12)
    before = copy.deepcopy(net.state_dict())
    fit = mf.MarginFit(net, [net.c2, net.tok, net.fc], x, y)
    target = fit.values() + torch.linspace(-1.5, 1.5, 12)
    info = mf.fit_margins(fit, target, iterations=30, damping=10.0, tol=1e-3)
    assert info["residual_rms"] < 1e-3 < info["residual_rms_start"]
    assert 1 < info["iterations"] == info["steps"] < 30  # every step accepted; stopped on the tolerance
    torch.testing.assert_close(fit.values(), target, atol=3e-3, rtol=0)
    after = net.state_dict()
    for key in ("c1.weight", "c1.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"):
        assert torch.equal(after[key], before[key])
    assert not torch.equal(after["c2.weight"], before["c2.weight"])


def test_no_iterations_or_a_met_tolerance_change_nothing(net):
    x, y = _x()
    fit = mf.MarginFit(net, [net.fc], x, y)
    theta = fit.get()
    for iterations, tol in ((0, 0.0), (5, 10.0)):
        info = mf.fit_margins(fit, fit.values() + 0.5, iterations=iterations, damping=1.0, tol=tol)
        assert info["iterations"] == info["steps"] == 0 and torch.equal(fit.get(), theta)
        assert info["residual_rms"] == info["residual_rms_start"] == pytest.approx(0.5)


def test_a_step_that_never_helps_is_undone(net, monkeypatch):
    x, y = _x()
    fit = mf.MarginFit(net, [net.fc], x, y)
    theta = fit.get()
    real = fit.values
    calls = []

    def worse():  # every trial step appears to raise the residual
        calls.append(1)
        return real() if len(calls) == 1 else real() - 100.0

    monkeypatch.setattr(fit, "values", worse)
    info = mf.fit_margins(fit, real() + 1.0, iterations=3, damping=1.0, tol=0.0)
    assert torch.equal(fit.get(), theta) and len(calls) == 1 + mf.MAX_TRIES
    assert info["iterations"] == 1 and info["steps"] == 0 and info["damping"] == pytest.approx(5.0**mf.MAX_TRIES)


def test_the_tolerance_is_strict_and_an_equal_residual_is_no_progress(net, monkeypatch):
    x, y = _x()
    fit = mf.MarginFit(net, [net.fc], x, y)
    target = fit.values() + 0.5
    rms = float((target - fit.values()).pow(2).mean().sqrt())
    assert mf.fit_margins(fit, target, iterations=1, damping=1.0, tol=rms)["iterations"] == 1  # rms < tol only
    fit.set(torch.zeros_like(fit.get()))
    frozen = fit.values()
    monkeypatch.setattr(fit, "values", lambda: frozen)  # every trial step leaves the residual exactly as it was
    info = mf.fit_margins(fit, frozen + 1.0, iterations=2, damping=1.0, tol=0.0)
    assert info["steps"] == 0 and torch.equal(fit.get(), torch.zeros_like(fit.get()))


def test_refusals(net, monkeypatch):
    x, y = _x()
    monkeypatch.setattr(mf, "MAX_JACOBIAN", 7 * 18)
    assert mf.MarginFit(net, [net.fc], x, y).n_params == 18  # at the limit: allowed
    monkeypatch.setattr(mf, "MAX_JACOBIAN", 7 * 18 - 1)
    with pytest.raises(DuckInputError, match=r"^the margin fit's Jacobian would hold 7 x 18 floats \(more than 125\); "
                                             r"lower method.lm_max_params or the matching set \(method.retain_multiplier\)$"):
        mf.MarginFit(net, [net.fc], x, y)
    monkeypatch.undo()
    same = nn.Sequential(nn.Conv2d(2, 2, 3, padding="same"), nn.Flatten(), nn.Linear(128, 3)).eval()
    fit = mf.MarginFit(same, list(same)[::2], x, y)
    with pytest.raises(DuckInputError, match=r"padding='same', padding_mode='zeros' is not supported \(zero padding by "
                                             r"numbers only\); use method.fit=logits$"):
        fit.jacobian()
    reflect = nn.Sequential(nn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect"), nn.Flatten(), nn.Linear(128, 3))
    with pytest.raises(DuckInputError, match="padding_mode='reflect' is not supported"):
        mf.MarginFit(reflect.eval(), list(reflect)[::2], x, y).jacobian()


@pytest.mark.parametrize("method", ["subset_matching", "oracle_matching"])
def test_matching_with_fit_margins_puts_each_forget_margin_on_its_target(synthetic, setup, method):  # noqa: F811
    """Every OUT model (and every oracle) says class 2 with logit 6; after the fit each forget example's margin is
    that target's, φ = 0 − log(1 + e⁶ + 1), not only nearer to it."""
    model, models, keep, _, offsets = setup
    logits = np.zeros((offsets[-1], 4), np.float32)
    logits[:, 2] = 6.0
    refs = _refs(models, keep, logits, offsets)
    if method == "oracle_matching":
        from test_matching import ConstantLogits

        from duck.unlearn import ModelBank, ReferenceModels
        oracle = ConstantLogits(model, [0.0, 0.0, 6.0, 0.0])
        refs = ReferenceModels(oracle=lambda seed, n: ModelBank(load=lambda k: oracle, one_off_s=7.0))
    data, sc = _data(synthetic, model, refs)
    forget = np.asarray(sc.forget_idx)
    own = {"retain_targets": "original"} if method == "subset_matching" else {"num_oracles": 1}
    hp = _hp(method, fit="margins", lm_iterations=20, lm_tol=1e-3, retain_multiplier=1.0, **own)
    result = create_unlearner(method, model, data, hp, seed=0, trainer_cfg=CPU).unlearn()
    after, labels, _ = predict_logits(result.model, synthetic.train, indices=forget)
    want = -np.log(2 + np.exp(6.0))  # the forget class is 1
    np.testing.assert_allclose(lira_phi(after, labels).numpy(), want, atol=0.02)
    assert result.epochs == 0.0 and result.info["residual_rms"] < 1e-3 and result.info["iterations"] >= 1
    assert result.reached_target is None and result.info["fitted_parameters"] == sum(
        p.numel() for m in mf.fitted_modules(model, 100_000) for p in m.parameters())
    assert set(result.info) == {"matching_set", "fitted_parameters", "iterations", "steps", "residual_rms_start",
                                "residual_rms", "damping", "phases", "one_off_s"}
    assert result.info["matching_set"] == 2 * len(forget) and result.info["one_off_s"] == 7.0


def test_each_matching_example_reaches_its_own_target(synthetic, setup, monkeypatch):  # noqa: F811
    """Targets that differ per example (the example's own margin plus 0.1·(index mod 7) − 0.3): after the fit
    each one sits at its own, so images, labels and targets stay aligned in the matching set's order."""
    from baselines.subset_matching import SubsetMatching

    model, models, keep, logits, offsets = setup
    data, sc = _data(synthetic, model, _refs(models, keep, logits, offsets))
    own, labels, idx = predict_logits(model, synthetic.train)
    by_index = dict(zip(idx.tolist(), range(len(idx)), strict=True))

    def targets(self, indices):
        rows = own[[by_index[int(i)] for i in indices]].clone()
        rows[torch.arange(len(indices)), labels[[by_index[int(i)] for i in indices]]] += torch.as_tensor(
            0.1 * (np.asarray(indices) % 7) - 0.3, dtype=rows.dtype)
        return rows

    monkeypatch.setattr(SubsetMatching, "targets", targets)
    hp = _hp("subset_matching", fit="margins", lm_iterations=20, lm_tol=1e-4, retain_multiplier=1.0)
    unlearner = create_unlearner("subset_matching", model, data, hp, seed=0, trainer_cfg=CPU)
    result = unlearner.unlearn()
    after, after_labels, after_idx = predict_logits(result.model, synthetic.train)
    matched = np.unique(np.concatenate([np.asarray(sc.forget_idx), np.flatnonzero(np.isin(
        np.arange(len(synthetic.train)), np.asarray(sc.retain_idx)))]))
    rows = [by_index[int(i)] for i in after_idx.tolist()]
    assert np.array_equal(after_idx.numpy(), idx[rows].numpy())
    phi0, phi1 = lira_phi(own, labels).numpy(), lira_phi(after, after_labels).numpy()
    want = phi0 + 0.1 * (idx.numpy() % 7) - 0.3  # the shift of each example's true-class logit moves φ as much
    fitted = np.isin(idx.numpy(), matched) & np.isin(idx.numpy(), np.asarray(sc.forget_idx))
    np.testing.assert_allclose(phi1[fitted], want[fitted], atol=0.01)
    assert result.info["matching_set"] == 2 * len(sc.forget_idx)
