#!/usr/bin/env bash
# GPU figures for docs/results.md, in one go on a CUDA machine (used on the lent H100 through the
# device tool; any CUDA machine with the project's dependencies works the same).
#
#   scripts/bench_gpu.sh STAGE [STAGE ...]      stages: env tests gputests profile audit retrain kmeans lsh spn duck subsetfm fmbanks fm60k
#
# Each stage runs `duck-bench SUITE` (through `python -m duck.cli.bench`, so an uninstalled checkout works)
# into $RUNS/SUITE and copies its bench.json and log to $OUT (default: ./gpu_out). Extra wheels in .whl/
# (hydra-core, omegaconf, antlr4 when the machine lacks them) are installed to /tmp/site first; a
# Fashion-MNIST copy in .fmnist/ is used when /usr/share/datasets/fashion-mnist is missing. To prepare both
# for a machine without package access (both folders are git-ignored; carry them):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl hydra-core==1.3.8 omegaconf==2.3.1
#   .venv/bin/pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
#   cp -r /usr/share/datasets/fashion-mnist .fmnist
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
RUNS=${RUNS:-/tmp/duck_gpu_runs}
PY=${PY:-python3}
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" DUCK_CONF_DIR="$PWD/conf"  # uninstalled: no duck.conf package
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
# an uninstalled checkout declares no entry point, so only DUCK and `none` would be registered: declare the
# baselines' (importlib.metadata reads *.dist-info folders on sys.path)
EP=/tmp/duck_ep/duck_unlearn_checkout-0.dist-info
mkdir -p "$EP" && printf 'Metadata-Version: 2.1\nName: duck-unlearn-checkout\nVersion: 0\n' > "$EP/METADATA" \
  && printf '[duck_unlearn.methods]\nbaselines = baselines\n' > "$EP/entry_points.txt" \
  && export PYTHONPATH="/tmp/duck_ep:$PYTHONPATH"
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ -d .fmnist ]; then
  mkdir -p /usr/share/datasets && ln -sfn "$PWD/.fmnist" /usr/share/datasets/fashion-mnist
fi

bench() {  # bench NAME LIMIT_S SUITE [overrides...]
  local name=$1 limit=$2 suite=$3; shift 3
  echo "=== $name: duck-bench $suite $*"
  local t0=$SECONDS
  timeout "$limit" $PY -m duck.cli.bench "$suite" "$@" "hydra.run.dir=$RUNS/$name" 2>&1 | tee "$OUT/$name.log" | tail -40
  echo "=== $name: rc ${PIPESTATUS[0]}, $((SECONDS - t0)) s"
  cp "$RUNS/$name/bench.json" "$OUT/$name.json" 2>/dev/null || true
}

left() { local l=$(( ${DEADLINE:-540} - SECONDS )); echo $(( l > 1 ? l : 1 )); }  # $DEADLINE: s after the start
# subset matching on the Fashion-MNIST 5,000-image subset, 10 % homogeneous removal, N = R = 32 (subsetfm, fmbanks)
fm=(bench.data=fashion_mnist bench.model=smallcnn28 bench.trainer=auto 'bench.methods=[subset_matching]'
    bench.forgetting.enabled=true "bench.cache_dir=$RUNS/cache" bench.progress=false)
big=('bench.overrides=["data.subset.n_train=5000","attack.mode=batched","attack.chunk_size=64"]'
     bench.forgetting.n_unlearned=32 bench.forgetting.n_retrained=32)
hr=('bench.scenarios=[homogeneous_removal]')

for stage in "$@"; do
  case $stage in
    env)
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
      $PY -c "import torch, lightning, timm, sklearn; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
torch.cuda.get_device_name(0), 'lightning', lightning.__version__, 'timm', timm.__version__, 'sklearn', sklearn.__version__)"
      nproc ;;
    tests)  # the CUDA tests, then the fast suite with CUDA visible
      timeout 150 $PY -m pytest -q -p no:cacheprovider -m "not slow" -n 8 tests 2>&1 | tee "$OUT/tests.log" | tail -25 ;;
    gputests)  # the test files with CUDA paths only
      timeout 150 $PY -m pytest -q -p no:cacheprovider -n 8 tests/test_lsh.py tests/test_lsh_bench.py \
        tests/test_attacks_shadow.py tests/test_spn.py tests/test_kmeans_pp.py tests/test_kmeans_inputs.py 2>&1 \
        | tee "$OUT/gputests.log" | tail -15 ;;
    profile)  # where a batched shadow-training step goes (scripts/profile_batched.py)
      timeout 200 $PY scripts/profile_batched.py --models 64 --width 32 2>&1 | tee "$OUT/profile.log" | tail -75 ;;
    audit)  # issue 4: batched vs sequential shadow training, E = 64 small CNNs on digits; ResNet-18 CIFAR-shaped
      bench audit 420 audit bench.device=cuda bench.threads=null bench.correctness.enabled=false \
        bench.forgetting.enabled=false \
        bench.throughput.setups.0.n_models=64 bench.throughput.setups.0.chunk_size=64 \
        bench.throughput.setups.1.n_models=16 bench.throughput.setups.1.chunk_size=16 \
        bench.throughput.setups.1.data.n_train=10000 bench.throughput.setups.1.recipe_overrides.epochs=3 ;;
    retrain)  # issue 25: the forgetting audit's retrain bank (64 digits CNNs on the retain set of class 3)
      bench retrain 330 audit bench.device=cuda bench.threads=null bench.correctness.enabled=false \
        bench.forgetting.enabled=false \
        'bench.throughput.setups=[{name: digits, data: {name: digits}, model: {name: smallcnn, width: 32}, recipe: digits, n_models: 64, chunk_size: 64, bank: retrain, forget_classes: [3]}]' ;;
    kmeans)
      bench kmeans 150 kmeans bench.device=cuda bench.datasets=[gaussian] bench.replicates=3 ;;
    lsh)
      bench lsh 150 lsh bench.device=cuda bench.repeats=3 ;;
    spn)
      bench spn 200 spn bench.device=cuda bench.spflow=false bench.repetitions=3 ${SPN_ARGS:-} ;;
    duck)
      bench duck 270 duck bench.trainer=auto bench.recipe_epochs=[24] bench.classes=[0] bench.seeds=[0] ;;
    subsetfm)  # issue 36: subset matching, Fashion-MNIST 5,000-image subset, 10 % homogeneous removal, N = R = 32:
               # a smoke run, the default row and the probe presets $SUBSETFM_PROBES (conf/preset/NAME.yaml, written
               # for the run: session u's four are given in docs/results.md) on
               # seed 0, the fastest `forgotten` of them on seed 1 (held out), then class removal of class 0;
               # $DEADLINE (s after the script's start) bounds the stages, the banks are shared through one cache
      bench fm_smoke 120 compare "${fm[@]}" "${hr[@]}" 'bench.seeds=[0]' bench.forgetting.n_unlearned=3 \
        bench.forgetting.n_retrained=3 'bench.overrides=["data.subset.n_train=600","attack.mode=batched"]' \
        || true  # the default 320-model bank on 600 images: seconds on a GPU
      grep -q '"verdict"' "$OUT/fm_smoke.json" 2>/dev/null || { echo "smoke failed: stopping"; exit 1; }
      probes=(${SUBSETFM_PROBES:-})
      bench fm_s0_default "$(left)" compare "${fm[@]}" "${big[@]}" "${hr[@]}" 'bench.seeds=[0]' \
        ${probes[0]:+"bench.presets={subset_matching: ${probes[0]}}"}
      for p in "${probes[@]:1}"; do
        [ "$(left)" -gt 60 ] && bench "fm_s0_$p" "$(left)" compare "${fm[@]}" "${big[@]}" "${hr[@]}" 'bench.seeds=[0]' \
          "bench.presets={subset_matching: $p}" bench.default_rows=false
      done
      best=$($PY - "$OUT" <<'PYEOF'
import glob, json, sys
rows = [r for f in glob.glob(sys.argv[1] + "/fm_s0_*.json") for r in json.load(open(f)).get("runs", [])
        if r.get("verdict") == "forgotten"]
rows.sort(key=lambda r: r["time_s"])
print(rows[0]["method"] if rows else "")
PYEOF
)
      echo "=== fastest forgotten on seed 0: ${best:-none}"
      if [ -n "$best" ] && [ "$(left)" -gt 60 ]; then
        pre=${best#subset_matching}; pre=${pre#+}
        bench fm_s1 "$(left)" compare "${fm[@]}" "${big[@]}" "${hr[@]}" 'bench.seeds=[1]' \
          ${pre:+"bench.presets={subset_matching: $pre}" bench.default_rows=false}
      fi
      [ "$(left)" -gt 60 ] && bench fm_class0 "$(left)" compare "${fm[@]}" "${big[@]}" 'bench.classes=[0]' \
        'bench.seeds=[0]' 'bench.scenarios=[class_removal]' ;;
    fmbanks)  # subsetfm's Fashion-MNIST banks (the subset bank; the audit's banks of seeds 0 and 1) packed into
              # $OUT/fm_cache.tar.* (15 MB pieces; `cat fm_cache.tar.* | tar xf -` in another machine's cache folder:
              # the cache keys do not depend on the device). About 75 MB without the unlearning runs: more than one
              # call of the device tool brings back (64 MiB), so FMBANKS_PIECES (a glob of the pieces' suffixes,
              # e.g. 'a[e-z]') keeps only those, for a second call on the still-warm machine (session u did so)
      bench fm_banks "${BANKS_LIMIT:-170}" compare "${fm[@]}" "${big[@]}" "${hr[@]}" 'bench.seeds=[0,1]'
      du -sh "$RUNS/cache"
      tar cf - -C "$RUNS" --exclude=unlearned_sets cache | split -b 15m - "$OUT/fm_cache.tar."
      if [ -n "${FMBANKS_PIECES:-}" ]; then
        for f in "$OUT"/fm_cache.tar.*; do
          case ${f##*.} in $FMBANKS_PIECES) ;; *) rm -f "$f" ;; esac
        done
      fi ;;
    fm60k)  # issue 36's GPU target: the Fashion-MNIST forgetting tables on the full 60,000-image training set,
            # N = R = 32, banks batched: class removal of class 0, then 10 % homogeneous removal (seed 0), each with
            # the methods $FM60K_METHODS (default below; their tuned rows) while $DEADLINE (s after the script's
            # start, default 540) lasts; $FM60K_OVERRIDES adds bench.overrides entries; $FM60K_PRESETS replaces
            # bench.presets (default tuned), e.g. '{duck: tuned_fashion_mnist_duck, oracle_matching:
            # oracle_matching_margins}' for oracle matching with the margin fit (session w) (the smoke run uses a
            # 600-image subset, which also runs on a CPU: `FM60K_SMOKE_ONLY=1 scripts/bench_gpu.sh fm60k`)
      methods=${FM60K_METHODS:-duck,finetune,boundary_shrink,oracle_matching}
      f60=(bench.data=fashion_mnist bench.model=smallcnn28 bench.trainer=auto "bench.methods=[$methods]"
           bench.forgetting.enabled=true "bench.cache_dir=$RUNS/cache60k" bench.progress=false
           "bench.presets=${FM60K_PRESETS:-tuned}" bench.default_rows=false)
      extra=""; IFS=, read -ra more <<< "${FM60K_OVERRIDES:-}"
      for o in "${more[@]}"; do extra+=",\"$o\""; done
      bench fm60k_smoke "${FM60K_SMOKE_LIMIT:-150}" compare "${f60[@]}" 'bench.classes=[0]' 'bench.seeds=[0]' \
        'bench.scenarios=[class_removal,homogeneous_removal]' bench.forgetting.n_unlearned=3 \
        bench.forgetting.n_retrained=3 "bench.overrides=[\"data.subset.n_train=600\",\"attack.mode=batched\"$extra]" || true
      grep -q '"verdict"' "$OUT/fm60k_smoke.json" 2>/dev/null || { echo "smoke failed: stopping"; exit 1; }
      [ -n "${FM60K_SMOKE_ONLY:-}" ] && continue
      b60=("bench.overrides=[\"attack.mode=batched\",\"attack.chunk_size=32\"$extra]" bench.forgetting.n_unlearned=32
           bench.forgetting.n_retrained=32)
      [ "$(left)" -gt 60 ] && bench fm60k_class0 "$(left)" compare "${f60[@]}" "${b60[@]}" 'bench.classes=[0]' \
        'bench.seeds=[0]' 'bench.scenarios=[class_removal]'
      [ "$(left)" -gt 60 ] && bench fm60k_hr0 "$(left)" compare "${f60[@]}" "${b60[@]}" 'bench.seeds=[0]' \
        'bench.scenarios=[homogeneous_removal]' ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
