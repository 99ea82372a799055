"""Differentially private statistics about outliers (Okada et al., seeds/004) and the DP mechanisms.

This package imports nothing from the deep-learning side of duck-unlearn (torch, numpy, scipy only).
"""

from duck.privacy.empirical import dp_histogram_test
from duck.privacy.mechanisms import (
    DPRelease,
    exponential_mechanism,
    gaussian_mechanism,
    gaussian_sigma,
    make_generator,
    smooth_gaussian_mechanism,
    smooth_gaussian_params,
    top_h_without_replacement,
)
from duck.privacy.neighbours import LSHNeighbours, neighbour_counts
from duck.privacy.outliers import (
    KISSING_NUMBER_UPPER,
    dp_outlier_count,
    dp_top_subspaces,
    global_sensitivity_bounds,
    kissing_configuration,
    kissing_number_upper,
    outlier_count,
    subspace_outlier_counts,
)
from duck.privacy.shareable import shareable_outlier_statistics
from duck.privacy.smooth_sensitivity import (
    ball_count_upper_bound,
    local_sensitivity_bound,
    max_ball_count_exact,
    smooth_sensitivity_bound,
)

__all__ = [
    "KISSING_NUMBER_UPPER",
    "LSHNeighbours",
    "DPRelease",
    "ball_count_upper_bound",
    "dp_histogram_test",
    "dp_outlier_count",
    "dp_top_subspaces",
    "exponential_mechanism",
    "gaussian_mechanism",
    "gaussian_sigma",
    "global_sensitivity_bounds",
    "kissing_configuration",
    "kissing_number_upper",
    "local_sensitivity_bound",
    "make_generator",
    "max_ball_count_exact",
    "neighbour_counts",
    "outlier_count",
    "shareable_outlier_statistics",
    "smooth_gaussian_mechanism",
    "smooth_gaussian_params",
    "smooth_sensitivity_bound",
    "subspace_outlier_counts",
    "top_h_without_replacement",
]
