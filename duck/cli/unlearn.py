"""``duck-unlearn ckpt=PATH method=NAME scenario=...``: checkpoint in, unlearned checkpoint out."""

from duck.cli._app import job_entry

main = job_entry("unlearn", "checkpoint in, unlearned checkpoint out: loads ckpt=PATH, unlearns the scenario's "
                            "forget set with method=NAME, writes unlearned.safetensors (the input's own key names), "
                            "metrics.json and forget_ids.txt (audit=true: also the LiRA audit and report)")

if __name__ == "__main__":
    main()
