# Device calls for issues 17/18 (run from the repository root on the GPU machine; $OUT set by the device tool).
#   PART=timing bash benchmarks/issue18_job.sh   # overhead.py --gpus 1 before/after alternated, then the ZeRO-2 profile
#   PART=tests  bash benchmarks/issue18_job.sh   # tests/gpu on both backends || same losses || the 1000-step soak
#                                                # (SPLIT=1: two processes per backend; LOSSES=0, SOAK=0: without those;
#                                                # EXTRA_EXAMPLES="name ...": streamcheck run on their twins, both backends)
#   PART=final  bash benchmarks/issue18_job.sh   # the ZeRO-2 profile in rounds + window + cProfile, overhead.py (main),
#                                                # then the tests part (MODE_FILTER on the mode); OVERHEAD=0, TESTS=0;
#                                                # PAIRED_ROUNDS=N first: plain/watch/watch_before in N short rounds
#   PART=stages bash benchmarks/issue18_job.sh   # the ZeRO-2 ratio, then the hook's stages on a stage-times build
#   PART=sources bash benchmarks/issue18_job.sh  # per-op cost of each source (watch_no_* phases) on op-loop and
#                                                # ZeRO-2 in rotated rounds, then both on a stage-times build
#   PART=compare bash benchmarks/issue18_job.sh  # before (.before) and after in turn, plain/watch rounds each, on
#                                                # COMPARE_SETUPS; then the stage times; TESTS=1: GPU tests too
#   PART=paired bash benchmarks/issue18_job.sh   # the CPU tests of the hook on this Python (GPU hidden), then the
#                                                # ZeRO-2 phases with the hook's switches (TUNED in native_profile.py)
#                                                # in ROUNDS rotated rounds, then the same on a stage-times build
#   PART=window bash benchmarks/issue18_job.sh   # ZeRO-2 phases in rounds, the 40-step window run in rounds with its
#                                                # parts, the ops reaching the hook boxed/unboxed; TESTS=1: then the
#                                                # tests block (XDIST=N: each backend one pytest of N workers)
# Needs .whl carried (../shared/tools/gpu-wheels .whl 0.13.4 0.19.8) and, for the timing part's "before", .before
# carried: the package at cc16f13 (git archive cc16f13 streamcheck instrument rules examples/deepspeed_hpz/train.py
# examples/deepspeed_hpz/shims.py benchmarks/overhead.py | tar -x -C .before). Each tree builds its native hook
# into its own TORCH_EXTENSIONS_DIR (both are named streamcheck_native_hook: one folder would rebuild at every
# switch). DEADLINE=<epoch seconds> bounds the whole call (default: 560 s from now). Logs: a few files in $OUT.
set -u
ROOT=$PWD
DEADLINE=${DEADLINE:-$(( $(date +%s) + 560 ))}
left() { echo $(( DEADLINE - $(date +%s) - ${1:-15} )); }
log() { echo "=== $(date +%H:%M:%S) $*"; }
export TORCH_EXTENSIONS_DIR=/tmp/ext-after
if { [ "${PART:-timing}" = timing ] || [ "${PART:-timing}" = compare ]; } && [ -d .before ]; then
  # the before tree, built while the after one builds
  rm -rf .bpkg && mkdir -p .bpkg && cp -r .before/streamcheck .bpkg/ && cp -r .before/instrument \
    .bpkg/streamcheck/instrument && cp -r .before/rules .bpkg/streamcheck/rules
  [ -d .before/scanner ] && cp -r .before/scanner .bpkg/streamcheck/scanner
  (cd /tmp && TORCH_EXTENSIONS_DIR=/tmp/ext-before PYTHONPATH=$ROOT/.bpkg python3 -P -c 'import time; t=time.time()
from streamcheck.instrument import native; native.load(); print(f"before: native hook built in {time.time()-t:.1f} s")') \
    > "$OUT/setup-before.log" 2>&1 &
fi
if [ "${PART:-timing}" = compare ]; then  # stage-times builds of both trees, beside the normal builds
  (TORCH_EXTENSIONS_DIR=/tmp/ext-stages-before STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES \
    PYTHONPATH=$ROOT/.bpkg python3 -P -c 'from streamcheck.instrument import native; native.load()
print("before: stage-times build ready")' > /tmp/stage-build-before.log 2>&1 &
   until [ -f .scpkg/streamcheck/scanner/__init__.py ]; do sleep 1; done; sleep 2
   TORCH_EXTENSIONS_DIR=/tmp/ext-stages-after STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES \
    PYTHONPATH=$ROOT/.scpkg python3 -P -c 'from streamcheck.instrument import native; native.load()
print("after: stage-times build ready")' > /tmp/stage-build-after.log 2>&1; wait) &
fi
DS="0.19.8 0.13.4" . benchmarks/device_setup.sh > "$OUT/setup.log" 2>&1
python3 -P -c 'from streamcheck.instrument import native; m = native.load(); print("memory reports in C++:", native.memory_reports_in_cpp, "unboxed kernels:", m.unboxed_built(), "TLS descriptors:", native.tls_descriptors, "TLS offset:", m.tls_offset())' >> "$OUT/setup.log" 2>&1
wait
cat "$OUT/setup.log" "$OUT/setup-before.log" 2>/dev/null; rm -f "$OUT/setup-before.log"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader

if [ "${PART:-timing}" = timing ]; then
  # overhead.py --gpus 1 (DeepSpeed 0.13.4 ZeRO-3, 9 layers h=4096): before, after, before, after, each a torchrun
  # job running plain, pass-through, streamcheck (native), streamcheck_mode, CSAN in one process.
  for round in ${ROUNDS:-1 2}; do
    for tree in before after; do
      [ "$(left 100)" -gt 0 ] || { log "overhead $tree round $round skipped (deadline)"; continue; }
      if [ $tree = before ]; then dir=.before; pkg=$ROOT/.bpkg; ext=/tmp/ext-before; else dir=.; pkg=$ROOT/.scpkg; ext=/tmp/ext-after; fi
      log "overhead.py --gpus 1, $tree (round $round)"
      started=$(date +%s)
      (cd $dir && TORCH_EXTENSIONS_DIR=$ext PYTHONPATH=$pkg:$ROOT/.site-0.13.4 timeout "$(cap=$(left 60); echo $(( cap < 150 ? cap : 150 )))" \
        python3 -P benchmarks/overhead.py --gpus 1 --steps "${OH_STEPS:-6}" --out /tmp/oh-$tree-$round) \
        > /tmp/overhead-$tree-$round.log 2>&1
      echo "rc=$? wall $(( $(date +%s) - started )) s"; cat /tmp/overhead-$tree-$round.log
    done
  done 2>&1 | tee "$OUT/overhead.log"
  log "native_profile.py on DeepSpeed 0.19.8 ZeRO-2 overlap_comm h=1024, then the 40-step window run"
  timeout "$(left 5)" python3 -P benchmarks/native_profile.py --steps "${STEPS:-8}" --window-run 40 \
    --phases "${PHASES:-plain,passthrough,watch,watch_mode,window_closed,window,csan}" \
    --json "$OUT/profile.json" > "$OUT/profile.log" 2>&1
  echo "profile rc=$?"; grep -v "^\[\|Warning\|warn" "$OUT/profile.log" | tail -45
  tar czf "$OUT/timing-logs.tgz" -C /tmp $(cd /tmp && ls -d oh-* overhead-*.log 2>/dev/null) 2>/dev/null
fi

if [ "${PART:-timing}" = stages ]; then
  # the ZeRO-2 ratio on the normal build (plain, pass-through, watch in rounds), then the same watch on a stage-times
  # build of the hook (stage_times.h; built in the background while the first part runs): where its µs per op go
  (STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES TORCH_EXTENSIONS_DIR=/tmp/ext-stages python3 -P -c \
    'from streamcheck.instrument import native; native.load(); print("stage-times build ready")') \
    > /tmp/stage-build.log 2>&1 &
  log "native_profile.py plain,passthrough,watch x ${ROUNDS:-3} rounds (normal build)"
  timeout "$(left 90)" python3 -P benchmarks/native_profile.py --steps "${STEPS:-8}" --rounds "${ROUNDS:-3}" \
    --phases plain,passthrough,watch > "$OUT/profile.log" 2>&1
  echo "profile rc=$?"; sed -n '/^setup/,$p' "$OUT/profile.log"
  wait; cat /tmp/stage-build.log
  log "the same on the stage-times build"
  STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES TORCH_EXTENSIONS_DIR=/tmp/ext-stages timeout "$(left 5)" \
    python3 -P benchmarks/native_profile.py --steps "${STEPS:-8}" --phases plain,passthrough,watch \
    > "$OUT/stages.log" 2>&1
  echo "stages rc=$?"; grep -v "^\[plain\]\|^\[passthrough\] median" "$OUT/stages.log" | grep -v "Warning\|warn"
fi
if [ "${PART:-timing}" = paired ]; then
  (STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES TORCH_EXTENSIONS_DIR=/tmp/ext-stages python3 -P -c \
    'from streamcheck.instrument import native; native.load(); print("stage-times build ready")') \
    > /tmp/stage-build.log 2>&1 &
  log "tests/instrument/native on this machine's Python, the GPU hidden (as CI runs them)"
  CUDA_VISIBLE_DEVICES= timeout "$(left 300)" python3 -P -m pytest -q -p no:cacheprovider tests/instrument/native \
    -x > "$OUT/cpu-tests.log" 2>&1
  echo "cpu tests rc=$?"; tail -3 "$OUT/cpu-tests.log"
  python3 -P -c 'from streamcheck.instrument import native
print("fast frames built:", native.load().fast_frames_built())'
  wait; cat /tmp/stage-build.log
  phases=${PHASES:-plain,passthrough,watch,watch_before,watch_slow_frames,watch_eager_frees}
  # PINS: "none" and/or a CPU count: the process on the first N CPUs it may use (taskset), which takes the
  # scheduler's moves between cores (and their caches) out of the step times
  pin_cmd=()
  for pin in ${PINS:-none}; do
    cpus=$(python3 -c "import os; print(','.join(map(str, sorted(os.sched_getaffinity(0))[:${pin/none/0}])))")
    pin_cmd=(); [ "$pin" = none ] || pin_cmd=(taskset -c "$cpus")
    log "native_profile.py $phases x ${ROUNDS:-12} rotated rounds (normal build), pinned: $pin ${pin_cmd[*]}"
    timeout "$(left 100)" "${pin_cmd[@]}" python3 -P benchmarks/native_profile.py --steps "${STEPS:-8}" \
      --rounds "${ROUNDS:-12}" --phases "$phases" --json "$OUT/paired-$pin.json" > "$OUT/paired-$pin.log" 2>&1
    echo "paired rc=$?"; sed -n '/^setup/,$p' "$OUT/paired-$pin.log"
  done
  log "stage-times build: plain,passthrough,watch,watch_before x ${STAGE_ROUNDS:-2}, pinned: ${pin_cmd[*]}"
  STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES TORCH_EXTENSIONS_DIR=/tmp/ext-stages timeout "$(left 5)" \
    "${pin_cmd[@]}" python3 -P benchmarks/native_profile.py --steps "${STEPS:-8}" --rounds "${STAGE_ROUNDS:-2}" \
    --phases plain,passthrough,watch,watch_before > "$OUT/stages.log" 2>&1
  echo "stages rc=$?"; grep -v "^\[plain\]\|^\[passthrough\] median" "$OUT/stages.log" | grep -v "Warning\|warn"
fi
if [ "${PART:-timing}" = sources ]; then
  # where the per-op time goes (session 8): the watch beside the watch_no_* phases (native_profile.py: one source of
  # per-op cost taken away each), on a loop of small ops (op-loop), then on the ZeRO-2 workload, in rotated rounds;
  # then the ZeRO-2 watch on a stage-times build (built in the background meanwhile)
  (STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES TORCH_EXTENSIONS_DIR=/tmp/ext-stages python3 -P -c \
    'from streamcheck.instrument import native; native.load(); print("stage-times build ready")') \
    > /tmp/stage-build.log 2>&1 &
  phases=${SOURCE_PHASES:-plain,passthrough,hook_boxing,watch,watch_no_memory,watch_no_gpu_trace,watch_no_sites,watch_no_detector,watch_no_gil}
  for setup in ${SOURCE_SETUPS:-op-loop deepspeed-zero2-overlap}; do
    rounds=${SOURCE_ROUNDS:-16}; [ "$setup" = op-loop ] && rounds=${LOOP_ROUNDS:-10}
    log "native_profile.py --setup $setup $phases x $rounds rounds of ${PAIRED_STEPS:-4} steps"
    timeout "$(left 120)" python3 -P benchmarks/native_profile.py --setup "$setup" --steps "${PAIRED_STEPS:-4}" \
      --rounds "$rounds" --phases "$phases" --json "$OUT/sources-$setup.json" > "$OUT/sources-$setup.log" 2>&1
    echo "sources rc=$?"; sed -n '/^setup/,$p' "$OUT/sources-$setup.log"
  done
  wait; cat /tmp/stage-build.log
  log "stage-times build: plain,passthrough,watch on ZeRO-2 x ${STAGE_ROUNDS:-1}, and on op-loop"
  for setup in deepspeed-zero2-overlap op-loop; do
    STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES TORCH_EXTENSIONS_DIR=/tmp/ext-stages timeout "$(left 5)" \
      python3 -P benchmarks/native_profile.py --setup $setup --steps "${STEPS:-8}" --rounds "${STAGE_ROUNDS:-1}" \
      --phases plain,passthrough,watch > "$OUT/stages-$setup.log" 2>&1
    echo "stages rc=$?"; grep -v "^\[plain\]\|^\[passthrough\] median" "$OUT/stages-$setup.log" | grep -v "Warning\|warn"
  done
fi
if [ "${PART:-timing}" = compare ]; then
  # before (.before: the package at an earlier commit) and after, each a process of plain/watch rounds, in turn;
  # then both trees' stage times (stage-times builds made during the setup); TESTS=1: then the GPU tests
  wait; cat /tmp/stage-build-*.log
  for setup in ${COMPARE_SETUPS:-op-loop deepspeed-zero2-overlap}; do
    for turn in ${COMPARE_TURNS:-before after before after}; do
      [ "$(left ${COMPARE_RESERVE:-200})" -gt 0 ] || { log "compare $setup $turn skipped (deadline)"; continue; }
      if [ $turn = before ]; then pkg=$ROOT/.bpkg; ext=/tmp/ext-before; else pkg=$ROOT/.scpkg; ext=/tmp/ext-after; fi
      log "compare: $setup, $turn, plain,watch x ${COMPARE_ROUNDS:-8} rounds of ${PAIRED_STEPS:-4} steps"
      TORCH_EXTENSIONS_DIR=$ext PYTHONPATH=$pkg:$ROOT/.site-0.19.8 timeout 150 python3 -P benchmarks/native_profile.py \
        --setup "$setup" --steps "${PAIRED_STEPS:-4}" --rounds "${COMPARE_ROUNDS:-8}" --phases plain,watch \
        > /tmp/compare.log 2>&1
      echo "rc=$?"; sed -n '/^setup/,$p' /tmp/compare.log | grep -v "^setup\|^phase"
    done
  done 2>&1 | tee "$OUT/compare.log"
  for setup in deepspeed-zero2-overlap op-loop; do
    for turn in before after; do
      [ "$(left ${STAGES_RESERVE:-60})" -gt 0 ] || continue
      if [ $turn = before ]; then pkg=$ROOT/.bpkg; else pkg=$ROOT/.scpkg; fi
      log "stage-times build ($turn): plain,passthrough,watch on $setup"
      STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES TORCH_EXTENSIONS_DIR=/tmp/ext-stages-$turn \
        PYTHONPATH=$pkg:$ROOT/.site-0.19.8 timeout 100 python3 -P benchmarks/native_profile.py --setup $setup \
        --steps "${STEPS:-8}" --phases plain,passthrough,watch > "$OUT/stages-$setup-$turn.log" 2>&1
      echo "stages rc=$?"; grep -v "^\[plain\]\|^\[passthrough\] median\|^setup\|^phase\|^plain" \
        "$OUT/stages-$setup-$turn.log" | grep -v "Warning\|warn"
    done
  done
fi
if [ "${PAIRED_ROUNDS:-0}" -gt 0 ] && { [ "${PART:-timing}" = final ] || [ "${PART:-timing}" = tests ]; }; then
  # the per-op figure first, on a quiet machine: many short rotated rounds (PAIRED_PHASES)
  phases=${PAIRED_PHASES:-plain,passthrough,watch,watch_before}
  log "native_profile.py $phases x $PAIRED_ROUNDS rounds of ${PAIRED_STEPS:-4} steps"
  # (what is left before the reserve; a DEADLINE shorter than the reserve would give timeout a negative limit,
  # which it refuses: session 22 lost its 40 rounds so. Then the rounds get half of what is left instead.)
  cap=$(left ${PAIRED_RESERVE:-400}); [ "$cap" -gt 30 ] || cap=$(( $(left 0) / 2 ))
  timeout "$cap" python3 -P benchmarks/native_profile.py --steps "${PAIRED_STEPS:-4}" --rounds "$PAIRED_ROUNDS" \
    --phases "$phases" --count-ops "${COUNT_OPS:-0}" --json "$OUT/paired.json" > "$OUT/paired.log" 2>&1
  echo "paired rc=$?"; sed -n '/^setup/,$p' "$OUT/paired.log"
fi
if [ "${PART:-timing}" = final ]; then
  # the last call: the ZeRO-2 profile in rounds (phases in turn) with the window run and a cProfile of watched
  # steps, overhead.py --gpus 1 on main; then the tests block below
  log "native_profile.py, ${ROUNDS:-3} rounds, then the 40-step window run and ${CPROFILE:-4} steps under cProfile"
  reserve=330; [ "${TESTS:-1}" = 1 ] || { reserve=10; [ "${OVERHEAD:-1}" = 1 ] && reserve=175; }  # what follows
  reserve=${PROFILE_RESERVE:-$reserve}
  timeout "$(left $reserve)" python3 -P benchmarks/native_profile.py --steps "${STEPS:-8}" --rounds "${ROUNDS:-3}" \
    --window-run 40 --window-rounds "${WINDOW_ROUNDS:-0}" --profile "${CPROFILE:-4}" \
    --phases "${PHASES:-plain,passthrough,watch,watch_mode,window_closed,window,csan}" \
    --json "$OUT/profile.json" > "$OUT/profile.log" 2>&1
  echo "profile rc=$?"; grep -v "^\[\|Warning\|warn" "$OUT/profile.log" | grep -vE "^ +[0-9/]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ " | tail -45
  # the window run's lines too (CSAN's long report after them can push them out of the tail above)
  grep -A4 "steps per run" "$OUT/profile.log"; grep -A6 "^window run - plain" "$OUT/profile.log"
  grep "one injected race per step" "$OUT/profile.log"
  if [ "${OVERHEAD:-1}" = 1 ] && [ "$(left 160)" -gt 0 ]; then
    log "overhead.py --gpus 1 (main)"
    PYTHONPATH=$ROOT/.scpkg:$ROOT/.site-0.13.4 timeout 150 python3 -P benchmarks/overhead.py --gpus 1 --steps 6 \
      --out /tmp/oh-final > "$OUT/overhead.log" 2>&1
    echo "overhead rc=$?"; cat "$OUT/overhead.log"
  fi
fi
if [ "${PART:-timing}" = window ]; then
  # session 9: the ZeRO-2 phases in rotated rounds (PHASES), the 40-step window run in rounds (its parts: the
  # watch's start, the steps outside the window, the window's steps, the stop), then the ops reaching the hook
  # boxed and unboxed (COUNT_OPS steps); TESTS=1: then the tests block below
  log "native_profile.py ${PHASES:=plain,passthrough,watch,window_closed} x ${ROUNDS:=6} rounds of ${STEPS:=4} steps," \
    "the ${WINDOW_STEPS:=40}-step window run x ${WINDOW_ROUNDS:=5}, ${COUNT_OPS:=4} steps counting ops"
  timeout "$(left ${WINDOW_RESERVE:-15})" python3 -P benchmarks/native_profile.py --steps "$STEPS" --rounds "$ROUNDS" \
    --phases "$PHASES" --window-run "$WINDOW_STEPS" --window-rounds "$WINDOW_ROUNDS" --count-ops "$COUNT_OPS" \
    --json "$OUT/window.json" > "$OUT/window.log" 2>&1
  echo "profile rc=$?"; sed -n '/^setup/,$p' "$OUT/window.log" | grep -v "Warning\|warn"
fi
# tests/gpu (PART=tests: both backends in full; PART=final: MODE_FILTER's tests on the mode, default the two newest
# examples) beside the loss check and the soak, which need no quiet machine
[ "${PART:-timing}" = final ] && : "${MODE_FILTER=handle_travels or handoff_without_record_stream}"
if [ "${PART:-timing}" = tests ] || { [ "${PART:-timing}" = final ] && [ "${TESTS:-1}" = 1 ]; } || \
   { [ "${PART:-timing}" = compare ] && [ "${TESTS:-0}" = 1 ]; } || \
   { [ "${PART:-timing}" = window ] && [ "${TESTS:-0}" = 1 ]; }; then
  limit=$(left 20)
  log "GPU tests on both backends side by side (limit ${limit}s each); beside them: same losses, the soak"
  # SPLIT=1: each backend's tests in two processes side by side (the racy examples, the rest): half the wall time
  for b in ${TEST_BACKENDS:-native mode}; do
    filter=""; [ "$b" = mode ] && [ -n "${MODE_FILTER:-}" ] && filter="$MODE_FILTER"
    if [ "${SPLIT:-0}" = 1 ]; then parts=("racy" "not racy"); else parts=(""); fi
    # XDIST=N (a backend: N): the backend's tests in one pytest of N workers (pytest-xdist; each test runs its
    # example in a process of its own, on free ports and its own tmp_path), where the image has xdist
    workers=${XDIST:-0}; [ "$b" = mode ] && workers=${XDIST_MODE:-$workers}
    xdist=(); if [ "$workers" != 0 ] && python3 -c 'import xdist' 2>/dev/null; then xdist=(-n "$workers"); parts=(""); fi
    for i in "${!parts[@]}"; do
      log_name=gpu-tests-$b; [ -n "${parts[$i]}" ] && log_name=gpu-tests-$b-$i
      # one -k (pytest keeps only the last): the filter and the part together
      expr=""; [ -n "$filter" ] && expr="($filter)"; [ -n "${parts[$i]}" ] && expr="${expr:+$expr and }(${parts[$i]})"
      select=(); [ -n "$expr" ] && select=(-k "$expr")
      STREAMCHECK_BACKEND=$b timeout "$limit" python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/gpu -rA \
        --durations=5 "${select[@]}" "${xdist[@]}" --basetemp=/tmp/gpu-tests-$b-$i > "$OUT/$log_name.log" 2>&1 &
    done
  done
  if [ "${LOSSES:-1}" = 1 ]; then  # plain, native, mode: each a fresh process, same seeds, 8 steps
    ( for run in plain:native streamcheck:native streamcheck:mode; do
        timeout 150 python3 -P benchmarks/frameworks_gpu.py --run deepspeed-zero2-overlap --mode ${run%%:*} \
          --backend ${run##*:} --steps 8 --result /tmp/loss-${run/:/-}.json > /tmp/loss-${run/:/-}.log 2>&1
        echo "$run rc=$?"
      done
      python3 - <<'PY'
import json
runs = {name: json.load(open(f"/tmp/loss-{name}.json")) for name in ("plain-native", "streamcheck-native", "streamcheck-mode")}
plain = runs["plain-native"]["losses"]
print("DeepSpeed 0.19.8 ZeRO-2 overlap_comm h=1024, 8 steps, one fresh process per run, same seeds")
for name, run in runs.items():
    same = "bit-identical to plain" if run["losses"] == plain else "DIFFERENT from plain"
    print(f"{name:<20} {run.get('backend', '-'):<7} {same}; findings {len(run.get('findings', []))}; "
          f"losses {[float.fromhex(v) for v in run['losses']]}")
PY
    ) > "$OUT/losses.log" 2>&1 &
  fi
  if [ "${SOAK:-1000}" != 0 ]; then
    timeout "$limit" python3 -P benchmarks/native_profile.py --phases plain --steps 2 --soak "${SOAK:-1000}" \
      > "$OUT/soak.log" 2>&1 &
  fi
  if [ -n "${EXTRA_EXAMPLES:-}" ]; then  # examples the GPU tests do not run: what the runtime reports on them
    ( for name in $EXTRA_EXAMPLES; do for twin in racy fixed; do for b in native mode; do
        echo "== examples/$name/$twin.py, backend $b"
        (cd /tmp && timeout 120 python3 -P -m streamcheck.cli run --backend $b --out /tmp/extra-$name-$twin-$b \
          --format text -- python3 "$ROOT/examples/$name/$twin.py" 2>&1 | grep -v "Warning\|warn" | tail -n 30
         echo "rc=${PIPESTATUS[0]}")
      done; done; done ) > "$OUT/examples-extra.log" 2>&1 &
  fi
  wait
  for log_file in "$OUT"/gpu-tests-*.log; do
    echo "== ${log_file##*/}"; grep -E "^(FAILED|ERROR)|passed|failed" "$log_file" | tail -n 25
    grep -E "^(PASSED|FAILED).*(${SHOW_TESTS:-handle_travels|handoff_without_record_stream})" "$log_file"
  done
  echo "== losses"; cat "$OUT/losses.log" 2>/dev/null
  echo "== soak"; grep -v "^\[\|Warning\|warn" "$OUT/soak.log" 2>/dev/null | tail -15
  [ -n "${EXTRA_EXAMPLES:-}" ] && { echo "== extra examples"; cat "$OUT/examples-extra.log"; }
fi
# at most 8 files come back from $OUT, first by name: every log in one archive named to come first
(cd "$OUT" && tar czf 0-logs.tgz --exclude=0-logs.tgz . 2>/dev/null)
log done
