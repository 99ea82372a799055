"""The Hydra config tree of duck-unlearn, shipped in the wheel as the package ``duck.conf`` (pyproject.toml
maps it to this folder) and found through Hydra's ``pkg://duck.conf`` search path."""
