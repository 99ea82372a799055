"""``data.subset``: a fixed random subset of an in-memory data set, re-indexed; the whole data set's manifests
and cache keys stay those written before the option existed."""

from __future__ import annotations

import numpy as np
import pytest

from duck.errors import DuckInputError
from duck.pipeline.config import compose
from duck.pipeline.job import build_data, data_identity


def test_subset_is_fixed_by_its_seed_and_keeps_the_data_sets_settings():
    full = build_data(compose("run", []))
    a = build_data(compose("run", ["data.subset.n_train=300", "data.subset.n_test=100"]))
    again = build_data(compose("run", ["data.subset.n_train=300", "data.subset.n_test=100"]))
    other = build_data(compose("run", ["data.subset.n_train=300", "data.subset.seed=1"]))
    assert len(a.train) == 300 and len(a.test) == 100 and len(other.test) == len(full.test)
    assert a.class_names == full.class_names and a.num_classes == full.num_classes
    assert np.array_equal(a.train.labels, again.train.labels) and a.fingerprint() == again.fingerprint()
    assert a.fingerprint() != other.fingerprint() != full.fingerprint()
    # the images are the full set's rows (no re-normalisation): each subset image occurs in the full set
    rows = {bytes(x.numpy().tobytes()) for x in full.train.images}
    assert all(bytes(x.numpy().tobytes()) in rows for x in a.train.images[:20])
    assert "subset" not in data_identity(compose("run", []))
    assert data_identity(compose("run", ["data.subset.n_train=300"]))["subset"]["n_train"] == 300


@pytest.mark.parametrize("override,match", [
    ("data.subset.n_train=1", "data.subset.n_train=1 must be an integer >= 2"),
    ("data.subset.n_test=abc", "data.subset.n_test='abc'"),
    ("data.subset.seed=-1", "data.subset.seed=-1"),
])
def test_bad_subsets_are_refused(override, match):
    with pytest.raises(DuckInputError, match=match):
        build_data(compose("run", [override]))
