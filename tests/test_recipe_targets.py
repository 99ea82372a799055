"""A recipe's optimizer and scheduler can only build torch.optim classes with their own arguments (issue 26
item 5): no arbitrary callable, no unknown key, no nested mapping that Hydra would instantiate."""

from __future__ import annotations

import pytest

from duck.errors import DuckInputError
from duck.training import Recipe

BASE = {"epochs": 1, "batch_size": 8, "optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}}


@pytest.mark.parametrize("optimizer,match", [
    ({"_target_": "os.system", "lr": 0.1}, "must name a class of torch.optim"),
    ({"_target_": "torch.optim.sgd.SGD", "lr": 0.1}, "must name a class of torch.optim"),
    ({"_target_": "torch.optim.Optimizer", "lr": 0.1}, "is not a torch.optim class"),
    ({"_target_": "torch.optim.NoSuch", "lr": 0.1}, "is not a torch.optim class; choose one of .*Adam"),
    ({"_target_": "torch.optim.SGD", "lr": 0.1, "foo": 1}, r"recipe.optimizer.foo is not an argument of torch.optim.SGD"),
    ({"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": {"_target_": "pathlib.Path.unlink"}}, "holds a mapping"),
    ({"_target_": "torch.optim.SGD", "lr": 0.1, "_recursive_": True}, r"_recursive_ is not an argument"),
    ({"_target_": "torch.optim.Adam", "lr": 0.1, "momentum": 0.9},  # an SGD recipe switched to Adam
     r"recipe.optimizer.momentum is not an argument of torch.optim.Adam; .*drop it with ~recipe.optimizer.momentum\)"),
])
def test_bad_optimizers_are_refused(optimizer, match):
    with pytest.raises(DuckInputError, match=match):
        Recipe.from_cfg({**BASE, "optimizer": optimizer})


def test_schedulers_are_checked_and_the_shipped_recipes_pass():
    from omegaconf import OmegaConf

    from duck.pipeline.config import conf_dir

    with pytest.raises(DuckInputError, match="recipe.scheduler.bogus is not an argument"):
        Recipe.from_cfg({**BASE, "scheduler": {"_target_": "torch.optim.lr_scheduler.StepLR", "step_size": 3,
                                               "bogus": 1}})
    with pytest.raises(DuckInputError, match="must name a class of torch.optim.lr_scheduler"):
        Recipe.from_cfg({**BASE, "scheduler": {"_target_": "builtins.exec"}})
    for path in sorted((conf_dir() / "recipe").glob("*.yaml")):
        cfg = OmegaConf.to_container(OmegaConf.create({"recipe": OmegaConf.load(path)}), resolve=True)["recipe"]
        Recipe.from_cfg(cfg)
