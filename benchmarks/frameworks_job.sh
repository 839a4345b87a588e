#!/usr/bin/env bash
# One device-tool job for issue 15 (one GPU): the frameworks benchmark, then the GPU tests, logs under $OUT.
#   DEADLINE=$(( $(date +%s) + 570 )) bash benchmarks/frameworks_job.sh [PARTS] [SETUPS] [TEST_FILTER]
# PARTS: frameworks,tests (comma-separated). SETUPS: benchmarks/frameworks_gpu.py --setups (default all).
# TEST_FILTER: pytest -k expression for tests/gpu (default: all). TEST_BACKENDS (default "native mode").
# Expects .whl/ from ../shared/tools/gpu-wheels .whl 0.19.8 (DeepSpeed is not on the GPU machine).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/sc15-out}
PARTS=${1:-frameworks,tests}
SETUPS=${2:-all}
FILTER=${3:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
LOG="$OUT/job.log"
log() { echo "=== $(date +%H:%M:%S) $*" | tee -a "$LOG"; }
left() { echo $(( ${DEADLINE:-$(( $(date +%s) + 3600 ))} - $(date +%s) - 25 )); }
has() { case ",$PARTS," in *",$1,"*) return 0;; esac; return 1; }
rm -rf .scpkg && mkdir -p .scpkg && cp -r streamcheck .scpkg/ && cp -r instrument .scpkg/streamcheck/instrument \
  && cp -r rules .scpkg/streamcheck/rules && cp -r scanner .scpkg/streamcheck/scanner
python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/deps/*.whl \
  .whl/deepspeed-0.19.8/*.whl >>"$LOG" 2>&1 || log "install of deepspeed 0.19.8 failed"
export PYTHONPATH=$PWD/.scpkg:$PWD/.site
log "python $(python3 -c 'import sys,torch; print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), "GPUs")')"
log "native hook: $(timeout 300 python3 -P -c 'import time; t=time.time(); from streamcheck.instrument import native
try:
    native.load(); print(f"built and loaded in {time.time()-t:.1f} s")
except native.NativeUnavailable as e: print("UNAVAILABLE", e)' 2>&1 | tail -n 3)"
if has frameworks; then
  budget=$(left); [ -n "$FILTER$(has tests && echo t)" ] && budget=$(( budget * ${FRAMEWORKS_SHARE:-60} / 100 ))
  log "frameworks benchmark ($SETUPS), ${budget}s"
  timeout "$budget" python3 -P benchmarks/frameworks_gpu.py --setups "$SETUPS" --steps "${STEPS:-8}" \
    --timeout "${RUN_TIMEOUT:-100}" --parallel "${PARALLEL:-1}" --out /tmp/frameworks >"$OUT/frameworks.txt" 2>&1
  log "frameworks exit $?"; cat "$OUT/frameworks.txt" >>"$LOG"
  [ -f /tmp/frameworks/summary.txt ] || python3 - <<'PY' >>"$OUT/frameworks.txt" 2>&1
import json; d = json.load(open("/tmp/frameworks/summary.json")); print("\n".join(d["rows"] + d["report"]))
PY
  (cd /tmp/frameworks && tar czf "$OUT/frameworks-logs.tgz" .) 2>/dev/null
fi
if has tests; then
  backends=(${TEST_BACKENDS:-native mode})
  for backend in "${backends[@]}"; do
    limit=$(( $(left) / ${#backends[@]} )); [ "$backend" = "${backends[-1]}" ] && limit=$(left)
    [ "$limit" -lt 20 ] && { log "GPU tests ($backend) skipped: ${limit}s left"; continue; }
    log "GPU tests ($backend backend), limit ${limit}s"
    STREAMCHECK_BACKEND=$backend timeout "$limit" python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
      ${FILTER:+-k "$FILTER"} -rA --durations=0 >"$OUT/gpu-tests-$backend.log" 2>&1
    log "pytest ($backend backend) exit $?"; grep -E "^(FAILED|ERROR|PASSED)|passed|failed" "$OUT/gpu-tests-$backend.log" | tail -n 60 | tee -a "$LOG" >/dev/null
  done
fi
log "done"
