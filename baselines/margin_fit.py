"""Levenberg–Marquardt fit of per-example margins (ours, issue 36): move a model's margins
``φ_i(θ) = z_y(x_i; θ) − logsumexp_{y'≠y} z_{y'}(x_i; θ)`` (:func:`attacks.lira.lira_phi`) on a matching set to
given targets ``t_i``, all examples at once, with as small a change of the weights as the step allows.

Why: the matching methods (oracle, subset matching) fine-tune with Adam towards other models' outputs. On
Fashion-MNIST 10 % homogeneous removal that fit closes only a quarter of each forget example's gap to its target
within a fifth of retraining's time and under half at retraining's cost (docs/results.md, session v): gradient steps
move neighbouring examples together. A second-order step fits each example's own margin.

One step (Levenberg 1944, Marquardt 1963; the minimum-norm "kernel" form, as the rows are far fewer than the
weights): with ``J`` the ``n × P`` Jacobian of the margins with respect to the fitted weights and ``r = t − φ(θ)``,

    ``Δθ = Jᵀ (J Jᵀ + λ I)⁻¹ r``,

accepted when it lowers ``‖r‖`` (then ``λ ← λ / 3``), else retried with ``λ ← 5 λ`` (at most ``MAX_TRIES`` times).
``J`` comes from one backward pass of ``Σ_i φ_i`` per batch and layer hooks, as per-sample gradient libraries
compute them: for a ``Linear`` layer ``∂φ_i/∂W = δ_i a_iᵀ``, for a ``Conv2d`` layer ``δ_i`` (``C_out × L``) times
the unfolded input patches (``L × C_in k²``) — the formula of Opacus's ``compute_conv_grad_sample``
(pytorch/opacus ``opacus/grad_sample/conv.py``: ``unfold2d``, then ``einsum("noq,npq->nop")``). Written here
rather than taken from Opacus (a new dependency) because only a few trailing layers of the caller's unwrapped
model are fitted, in eval mode; ``torch.func`` (``vmap(jacrev)``) gives the same Jacobian (the tests compare
them) but took 2.4× as long on the Fashion-MNIST CNN (1.53 s against 0.64 s for 905 examples). In eval mode the examples do not
interact (batch norm uses its running statistics), so each ``δ_i`` is example ``i``'s own.

Fitted weights: the trailing ``Conv2d`` (``groups = 1``) and ``Linear`` modules, in module order, while their
parameters add up to at most ``max_params`` (at least the last one); everything else (batch norm, embeddings,
earlier layers) is left as it is. The Jacobian holds ``n × P`` floats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from duck.errors import DuckInputError

#: damping increases per iteration before the step is given up (``λ`` grows by 5**MAX_TRIES)
MAX_TRIES = 6
#: the Jacobian's size above which the fit refuses to start (floats): 2**28 (1 GiB in float32)
MAX_JACOBIAN = 2**28


def margins_of(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``φ = z_y − logsumexp_{y'≠y} z_{y'}`` row by row, in the logits' dtype, differentiable: the formula of
    :func:`attacks.lira.lira_phi` (float64 there), which the layer contracts keep baselines from importing (the
    tests compare the two)."""
    y = labels.long().view(-1, 1)
    return logits.gather(1, y)[:, 0] - torch.logsumexp(logits.scatter(1, y, float("-inf")), dim=1)


def _rms(r: torch.Tensor) -> float:
    return float(r.pow(2).mean().sqrt())


def fitted_modules(model: nn.Module, max_params: int) -> list[nn.Module]:
    """The trailing ``Conv2d`` (``groups = 1``) / ``Linear`` modules of ``model`` with at most ``max_params``
    parameters in all (at least the last one); :class:`DuckInputError` if it has neither."""
    layers = [m for m in model.modules()
              if isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and m.groups == 1)]
    if not layers:
        raise DuckInputError("method.fit=margins needs a model with Linear or Conv2d (groups=1) layers to fit; "
                             "use method.fit=logits")
    chosen: list[nn.Module] = []
    total = 0
    for m in reversed(layers):
        n = sum(p.numel() for p in m.parameters())
        if chosen and total + n > max_params:
            break
        chosen.append(m)
        total += n
    return chosen[::-1]


@dataclass
class MarginFit:
    """The margins of ``model`` on ``x`` (labels ``y``) as a function of ``modules``' parameters."""

    model: nn.Module
    modules: list[nn.Module]
    x: torch.Tensor
    y: torch.Tensor
    batch_size: int = 256

    def __post_init__(self) -> None:
        self.params = [p for m in self.modules for p in m.parameters()]
        self.n_params = sum(p.numel() for p in self.params)
        if len(self.x) * self.n_params > MAX_JACOBIAN:
            raise DuckInputError(f"the margin fit's Jacobian would hold {len(self.x)} x {self.n_params} floats (more "
                                 f"than {MAX_JACOBIAN}); lower method.lm_max_params or the matching set "
                                 "(method.retain_multiplier)")

    def values(self) -> torch.Tensor:
        """``φ_i(θ)`` for every example ``(n,)``."""
        with torch.no_grad():
            return torch.cat([margins_of(self.model(self.x[a:a + self.batch_size]), self.y[a:a + self.batch_size])
                              for a in range(0, len(self.x), self.batch_size)])

    def jacobian(self) -> torch.Tensor:
        """``∂φ_i/∂θ`` ``(n, P)``, the parameters in ``self.params``' order, each flattened as ``reshape(-1)``."""
        acts: dict[int, torch.Tensor] = {}
        grads: dict[int, torch.Tensor] = {}

        def hook(k: int) -> Callable[..., None]:
            def forward_hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
                acts[k] = inputs[0].detach()
                output.register_hook(lambda g: grads.__setitem__(k, g.detach()))
            return forward_hook

        handles = [m.register_forward_hook(hook(k)) for k, m in enumerate(self.modules)]
        needs = [p.requires_grad for p in self.params]
        for p in self.params:
            p.requires_grad_(True)
        rows = []
        try:
            for a in range(0, len(self.x), self.batch_size):
                phi = margins_of(self.model(self.x[a:a + self.batch_size]), self.y[a:a + self.batch_size])
                torch.autograd.grad(phi.sum(), self.params)
                rows.append(torch.cat([col for k, m in enumerate(self.modules)
                                       for col in per_example_grads(m, acts[k], grads[k])], dim=1))
        finally:
            for h in handles:
                h.remove()
            for p, n in zip(self.params, needs, strict=True):
                p.requires_grad_(n)
        return torch.cat(rows)

    def get(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def set(self, flat: torch.Tensor) -> None:
        with torch.no_grad():
            offset = 0
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()


def per_example_grads(module: nn.Module, a: torch.Tensor, g: torch.Tensor) -> list[torch.Tensor]:
    """Per-example gradients ``(B, ·)`` of ``module``'s parameters (in ``module.parameters()`` order: weight, then
    bias) from its input ``a`` and the gradient ``g`` at its output."""
    if isinstance(module, nn.Linear):
        a2, g2 = a.reshape(len(a), -1, a.shape[-1]), g.reshape(len(g), -1, g.shape[-1])  # (B, T, in), (B, T, out)
        cols = [torch.bmm(g2.transpose(1, 2), a2).flatten(1)]
        bias = g2.sum(dim=1)
    else:
        assert isinstance(module, nn.Conv2d)
        if isinstance(module.padding, str) or module.padding_mode != "zeros":
            raise DuckInputError(f"method.fit=margins: Conv2d with padding={module.padding!r}, padding_mode="
                                 f"{module.padding_mode!r} is not supported (zero padding by numbers only); use "
                                 "method.fit=logits")
        u = F.unfold(a, module.kernel_size, dilation=module.dilation, padding=module.padding, stride=module.stride)
        cols = [torch.bmm(g.flatten(2), u.transpose(1, 2)).flatten(1)]  # (B, C_out, C_in k²)
        bias = g.flatten(2).sum(dim=2)
    if module.bias is not None:
        cols.append(bias)
    return cols


def fit_margins(fit: MarginFit, target: torch.Tensor, iterations: int, damping: float, tol: float) -> dict[str, Any]:
    """Levenberg–Marquardt on ``‖t − φ(θ)‖²`` (module docstring), in place; stops after ``iterations`` Jacobians,
    when the residuals' RMS is below ``tol``, or when no damping up to ``5**MAX_TRIES · λ`` lowers it. Returns
    the Jacobians computed, the steps taken, the RMS before and after, and the last damping. (Chord steps, reusing
    ``J`` at the new point, were tried on Fashion-MNIST: none was ever accepted, the margins are too far from linear
    over one step.)"""
    theta, lam = fit.get(), float(damping)
    r = target - fit.values()
    rms0 = _rms(r)
    done = steps = 0
    for _ in range(int(iterations)):
        if _rms(r) < tol:
            break
        J = fit.jacobian()
        K = J @ J.T
        eye = torch.eye(len(K), dtype=K.dtype, device=K.device)
        done += 1
        for _ in range(MAX_TRIES):
            step = J.T @ torch.linalg.solve(K + lam * eye, r)
            fit.set(theta + step)
            r_new = target - fit.values()
            if float(r_new.norm()) < float(r.norm()):
                theta, r, lam = theta + step, r_new, lam / 3
                steps += 1
                break
            lam *= 5
        else:
            fit.set(theta)
            break
    return {"iterations": done, "steps": steps, "residual_rms_start": rms0,
            "residual_rms": _rms(r), "damping": lam}
