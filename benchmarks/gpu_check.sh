#!/usr/bin/env bash
# Issue #19 in one call on a lent GPU machine: `pytest -m gpu`, the GPU benchmarks of
# benchmarks/gpu_train.py, then one table (benchmarks/gpu_table.py). Under 8 minutes on one H200:
# each part has a time limit, cut to what is left of CHECK_SECONDS (440), and the parts run in the order
# of what issue #19 needs most; a part that runs out of time is a row of the table.
#
#   bash benchmarks/gpu_check.sh --wheels   # here, before the device call: the packages the device
#                                           # image lacks, as wheels into .whl/ (same versions as here)
#   bash benchmarks/gpu_check.sh            # on the GPU machine (device run with carry [".whl"])
#   bash benchmarks/gpu_check.sh --smoke    # without a GPU: every part for a step or two, demo model, CPU
#
# Output: the table on stdout; gpu_check.log (every part's output), pytest.xml, bench.jsonl,
# parts.tsv and table.md in $GPU_CHECK_DIR (default $OUT, the device's returned folder, else a new
# temporary directory).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS="pydantic pydantic_core annotated_types typing_inspection typing_extensions plotly"  # not in the device image

mode=${1:-gpu}
case $mode in
  --wheels)
    pins=$("$PYTHON" -c 'import sys; from importlib.metadata import version; print(" ".join(f"{n}=={version(n)}" for n in sys.argv[1:]))' $WHEELS) || exit 2
    exec "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $pins ;;
  --smoke | gpu) ;;
  *) echo "gpu_check: unknown argument $mode (none on the GPU machine; --smoke or --wheels here)"; exit 2 ;;
esac

if [[ $mode == gpu ]] && ! "$PYTHON" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "gpu_check: no CUDA device (torch.cuda.is_available() is not true in $PYTHON); run it on a GPU machine, or --smoke here"
  exit 2
fi
if [[ $mode == gpu ]] && compgen -G ".whl/*.whl" >/dev/null; then  # the device image's Python is 3.12
  site=${TMPDIR:-/tmp}/ebd2n-site
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl || exit 2
  export PYTHONPATH=$site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if ! missing=$("$PYTHON" -c 'import ebd2n.train, ebd2n.report.plotly_embed, plotly, pytest' 2>&1); then
  echo "gpu_check: $PYTHON cannot import what the checks need (${missing##*$'\n'}); run --wheels first and carry .whl"
  exit 2
fi

dir=${GPU_CHECK_DIR:-${OUT:-$(mktemp -d)}}
mkdir -p "$dir" && rm -f "$dir"/{gpu_check.log,pytest.xml,bench.jsonl,parts.tsv,table.md}
deadline=$((SECONDS + ${CHECK_SECONDS:-440}))

part() {  # part NAME LIMIT_SECONDS COMMAND...: run it under a time limit, its output into the log
  local name=$1 limit=$2 left=$((deadline - SECONDS)) started=$SECONDS rc
  shift 2
  ((left < limit)) && limit=$left
  if ((limit < 15)); then
    printf '%s\t-1\t0\t%s\n' "$name" "$limit" >>"$dir/parts.tsv"
    return
  fi
  echo "## part $name (limit $limit s): $*" | tee -a "$dir/gpu_check.log"
  timeout -k 10 "$limit" "$@" >>"$dir/gpu_check.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - started))" "$limit" >>"$dir/parts.tsv"
  echo "   exit $rc after $((SECONDS - started)) s" | tee -a "$dir/gpu_check.log"
}

bench=("$PYTHON" benchmarks/gpu_train.py --json "$dir/bench.jsonl")
if [[ $mode == gpu ]]; then
  bench+=(--preset 20m --device cuda --steps 20 --warmup 5)
  loss=(--loss-steps 50) core=(default/32 eager/32) modes=(reduce-overhead/32 default/16 max-autotune/32)
  packed=(--packed 4 8) packed_compiled=(--packed 4 8) validation=(--validation-batches 8)
  limits=(180 150 180 460)  # the last part gets what is left
else
  bench+=(--preset demo --device cpu --steps 2 --warmup 1 --compile-backend aot_eager)
  loss=(--loss-steps 3) core=(default/16 eager/16) modes=(default/8)
  packed=(--packed 2 4) packed_compiled=(--packed 2) validation=(--validation-batches 2)
  limits=(120 120 120 120)
fi

part pytest "${limits[0]}" "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$dir/pytest.xml" tests/test_gpu.py
part core "${limits[1]}" "${bench[@]}" --sections sync packed validation --variants "${core[@]}" "${loss[@]}" \
  "${packed[@]}" --packed-modes eager "${validation[@]}"
part packed-compiled "${limits[2]}" "${bench[@]}" --sections packed "${packed_compiled[@]}" --packed-modes compiled
part sync-modes "${limits[3]}" "${bench[@]}" --sections sync --variants "${modes[@]}" "${loss[@]}" \
  --loss-reference "$dir/bench.jsonl"

"$PYTHON" benchmarks/gpu_table.py "$dir" | tee "$dir/table.md"
echo "files: $dir"
