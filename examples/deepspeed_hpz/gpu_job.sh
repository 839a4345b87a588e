#!/usr/bin/env bash
# Everything this project runs on a 2-GPU machine, in one job (the device tool's $OUT gets the logs back).
#   examples/deepspeed_hpz/gpu_job.sh [STEPS_SMOKE] [STEPS_FULL] [PARTS]
# PARTS: any of tests,trace,smoke,full,gate,overhead,sc135,soak (comma-separated). Expects .whl/ from
# ../shared/tools/gpu-wheels. gate: the pytest gate example; overhead: benchmarks/overhead.py on 0.13.4 (CSAN in
# report-and-continue form); sc135: 0.13.5 under `streamcheck run`, STEPS_SMOKE steps; soak: SOAK_STEPS (default
# 1000) steps of a small model (2 layers, h=1024) on 0.13.4 under `streamcheck run`, figures every 100 steps.
# NPROC (world size, default 2) and HPZ (zero_hpz_partition_size, default 2) come from the environment;
# TEST_BACKENDS (default "native mode") the watch backends the GPU tests run on, one after the other.
# Every step has its own timeout; a failing step is logged and the job goes on to the next.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/streamcheck-gpu-out}
SMOKE_STEPS=${1:-3}
FULL_STEPS=${2:-10}
PARTS=${3:-tests,trace,smoke}
NPROC=${NPROC:-2}
HPZ=${HPZ:-2}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
LOG="$OUT/job.log"
log() { echo "=== $(date +%H:%M:%S) $*" | tee -a "$LOG"; }
# limited SECONDS CMD...: CMD in its own process group, the whole group ended after SECONDS (torchrun's workers
# too, which `timeout` alone would leave holding the GPUs); returns CMD's exit status (143/137 when ended).
limited() {
  local limit=$1; shift
  setsid "$@" & local pid=$!
  ( sleep "$limit"; kill -TERM -- -"$pid" 2>/dev/null; sleep 10; kill -KILL -- -"$pid" 2>/dev/null ) &
  local watchdog=$!
  wait "$pid"; local rc=$?
  kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
  return $rc
}
# budget N: N seconds, or less when DEADLINE (epoch seconds) leaves less (30 s kept for the archive at the end)
budget() {
  local n=$1
  if [ -n "${DEADLINE:-}" ]; then local left=$((DEADLINE - $(date +%s) - 30)); [ "$left" -lt "$n" ] && n=$left; fi
  [ "$n" -lt 1 ] && n=1
  echo "$n"
}
has() { case ",$PARTS," in *",$1,"*) return 0;; esac; return 1; }

# The package as installed: streamcheck/ with instrument/ and rules/ inside (pyproject's package-dir mapping).
rm -rf .scpkg && mkdir -p .scpkg && cp -r streamcheck .scpkg/ && cp -r instrument .scpkg/streamcheck/instrument \
  && cp -r rules .scpkg/streamcheck/rules
export PYTHONPATH=$PWD/.scpkg
log "python $(python3 -c 'import sys,torch; print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), "GPUs")')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$LOG"
# The native hook is compiled on first use; once here, so that no timed run or test pays for it.
log "native hook: $(timeout 300 python3 -P -c 'import time; t=time.time(); from streamcheck.instrument import native
try:
    native.load(); print(f"built and loaded in {time.time()-t:.1f} s")
except native.NativeUnavailable as e: print("UNAVAILABLE", e)' 2>&1 | tail -n 3)"


if has trace && [ -f examples/hpz_race/racy.py ]; then
  log "hpz_race: record the trace"
  rm -rf /tmp/hpz && timeout 60 python3 -P -m streamcheck.cli run --out /tmp/hpz --trace "$OUT/hpz_race.jsonl" \
    -- python3 examples/hpz_race/racy.py >>"$LOG" 2>&1
  log "hpz_race exit $?; trace $(wc -l <"$OUT/hpz_race.jsonl") lines"
  timeout 60 python3 -P -m streamcheck.cli analyze "$OUT/hpz_race.jsonl" >>"$LOG" 2>&1; log "analyze exit $?"
fi

for v in 0.13.4 0.13.5; do
  python3 -m pip install -q --no-index --no-deps --no-compile --target ".site$v" .whl/deps/*.whl \
    .whl/deepspeed-$v/*.whl >>"$LOG" 2>&1 || log "install of deepspeed $v failed"
done

seed() {  # seed VERSION STEPS MODE(plain|sc) LIMIT
  local v=$1 steps=$2 mode=$3 limit=$4 tag="$3-$1-$2steps"
  local cmd=(python3 -m torch.distributed.run --nproc_per_node "$NPROC" --master_port $((29500 + RANDOM % 1000))
             examples/deepspeed_hpz/train.py --steps "$steps" --hpz "$HPZ" --result "/tmp/seed-$tag.json")
  log "seed $tag"
  if [ "$mode" = sc ]; then
    cmd=(python3 -P -m streamcheck.cli run --out "/tmp/sc-$tag" -- "${cmd[@]}")
  fi
  PYTHONPATH=$PWD/.site$v:$PYTHONPATH limited "$limit" "${cmd[@]}" >"/tmp/seed-$tag.log" 2>&1
  local rc=$?
  grep -E "^(\[[a-z]+\] )?step |RESULT|streamcheck|Traceback|Error|error:" "/tmp/seed-$tag.log" | grep -v "^\s*$" | tail -n 60 >>"$LOG"
  log "seed $tag exit $rc"
  cp "/tmp/seed-$tag.log" "$OUT/seed-logs/" 2>/dev/null || true
}
mkdir -p "$OUT/seed-logs"

if has gate; then
  log "pytest gate (expected: 1 failed, 1 passed)"
  timeout 90 python3 -P -m pytest -p no:cacheprovider -rA --streamcheck --streamcheck-out /tmp/sc -p no:streamcheck \
    -p streamcheck.instrument.pytest_plugin examples/pytest_gate/test_streams.py >"$OUT/gate.log" 2>&1
  log "gate exit $?"; tail -n 5 "$OUT/gate.log" | tee -a "$LOG"
fi
if has overhead; then
  log "benchmarks/overhead.py --gpus $NPROC on 0.13.4 (${OVERHEAD_STEPS:-8} steps per mode)"
  PYTHONPATH=$PWD/.site0.13.4:$PYTHONPATH limited "$(budget "${OVERHEAD_LIMIT:-240}")" python3 -P benchmarks/overhead.py \
    --gpus "$NPROC" --steps "${OVERHEAD_STEPS:-8}" --warmup 1 --csan-continue --out /tmp/overhead \
    >/tmp/overhead.txt 2>&1
  log "overhead exit $?"
  # a job ended by the limit still leaves the result of every finished mode: report it
  [ -s /tmp/overhead/overhead-result.json ] && ! grep -q "^mode" /tmp/overhead.txt && python3 -P -c \
    "import sys,json,argparse; sys.path.insert(0,'benchmarks'); import overhead as o; a=argparse.Namespace(phases=list(o.PHASES), steps=${OVERHEAD_STEPS:-8}, csan_continue=True); print(o.report(json.load(open('/tmp/overhead/overhead-result.json')), a))" >>/tmp/overhead.txt 2>&1
  cp /tmp/overhead.txt "$OUT/overhead.txt"; cat /tmp/overhead.txt >>"$LOG"
  cp /tmp/overhead/overhead-job.log "$OUT/seed-logs/" 2>/dev/null  # its RESULT line holds the result JSON
fi
if has sc135; then
  seed 0.13.5 "$SMOKE_STEPS" sc "$(budget "${SC135_LIMIT:-120}")"
fi
if has soak; then
  log "soak: ${SOAK_STEPS:-1000} steps, 2 layers h=1024, 0.13.4 under streamcheck run"
  PYTHONPATH=$PWD/.site0.13.4:$PYTHONPATH limited "$(budget "${SOAK_LIMIT:-200}")" python3 -P -m streamcheck.cli run \
    --out /tmp/sc-soak -- python3 -m torch.distributed.run --nproc_per_node "$NPROC" \
    --master_port $((29500 + RANDOM % 1000)) examples/deepspeed_hpz/train.py --steps "${SOAK_STEPS:-1000}" \
    --hpz "$HPZ" --layers 2 --hidden 1024 --intermediate 2752 --heads 8 --seq 128 --soak-every 100 \
    >/tmp/soak.log 2>&1
  log "soak exit $?"
  grep -E "SOAK|streamcheck|Error|RESULT" /tmp/soak.log | grep -v '"step_ms"' | cut -c1-600 >"$OUT/soak.log"
  tail -n 30 "$OUT/soak.log" | tee -a "$LOG"
fi

if has smoke; then
  seed 0.13.4 "$SMOKE_STEPS" sc 150
  seed 0.13.5 "$SMOKE_STEPS" sc 150
fi
if has full; then
  seed 0.13.4 "$FULL_STEPS" plain 80
  seed 0.13.4 "$FULL_STEPS" sc 100
  seed 0.13.5 "$FULL_STEPS" plain 80
  seed 0.13.5 "$FULL_STEPS" sc 100
fi
if has tests; then  # last of the parts: with DEADLINE set, it gets what time is left
  limit=$(budget "${TESTS_LIMIT:-200}")
  if [ "$limit" -ge 30 ]; then
    log "GPU tests (scenarios 20-27), limit ${limit}s"
    backends=(${TEST_BACKENDS:-native mode})  # the same GPU tests on each backend of the watch
    for backend in "${backends[@]}"; do
      STREAMCHECK_BACKEND=$backend timeout "$((limit / ${#backends[@]}))" python3 -P -m pytest -q -p no:cacheprovider -m gpu \
        tests/gpu -rA --durations=0 >"$OUT/gpu-tests-$backend.log" 2>&1
      log "pytest ($backend backend) exit $?"; tail -n 40 "$OUT/gpu-tests-$backend.log" | tee -a "$LOG"
    done
  else
    log "GPU tests skipped: ${limit}s left"
  fi
fi

# findings of every instrumented run, as one small archive
tar czf "$OUT/seed-logs/findings.tgz" /tmp/sc-* /tmp/overhead/sc-findings* 2>/dev/null
(cd "$OUT/seed-logs" && tar czf ../seed-logs.tgz . ) && rm -rf "$OUT/seed-logs"
if has smoke || has full || has sc135; then
  python3 examples/deepspeed_hpz/summarize.py /tmp "$OUT" 2>&1 | tee -a "$LOG"
fi
log "done"
