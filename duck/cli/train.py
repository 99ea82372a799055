"""``duck-train``: train the original (or, with ``retrain=true``, the oracle on the retain set)."""

from duck.cli._app import job_entry

main = job_entry("train", "train a classifier (with scenario=... retrain=true: the retrained oracle on the retain "
                          "set); writes model.ckpt and metrics.json")

if __name__ == "__main__":
    main()
