# One device call for issue 18 (run from the repository root on the GPU machine, $OUT set by the device tool):
# the per-layer profile and the 40-step window run on DeepSpeed 0.19.8 ZeRO-2 overlap_comm h=1024, overhead.py
# the GPU tests on both backends side by side, then overhead.py --gpus 1 (DeepSpeed 0.13.4 ZeRO-3, 9 layers h=4096)
# if time is left.
# Needs .whl carried (../shared/tools/gpu-wheels .whl 0.13.4 0.19.8). DEADLINE=<epoch seconds> bounds the tests.
set -u
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
DS="0.19.8 0.13.4" . benchmarks/device_setup.sh > "$OUT/setup.log" 2>&1
python3 -P -c 'from streamcheck.instrument import native; native.load(); print("memory reports in C++:", native.memory_reports_in_cpp)' >> "$OUT/setup.log" 2>&1
cat "$OUT/setup.log"
if [ "${PROFILE:-1}" = 1 ]; then
  timeout 200 python3 -P benchmarks/native_profile.py --steps "${STEPS:-6}" --window-run 40 ${SOAK:+--soak $SOAK} \
    --phases "${PHASES:-plain,passthrough,hook_noop,trace_callbacks,watch,watch_py_detector,window_closed,window,watch_mode,csan}" \
    --json "$OUT/profile.json" > "$OUT/profile.log" 2>&1
  echo "profile rc=$?"; grep -v "^\[\|Warning\|warn" "$OUT/profile.log" | tail -40
fi
if [ "${TESTS:-1}" = 1 ]; then
  left=$(( DEADLINE - $(date +%s) - ${OVERHEAD_RESERVE:-0} - 15 ))
  echo "GPU tests, both backends side by side, ${left}s"
  for b in native mode; do
    STREAMCHECK_BACKEND=$b timeout "$left" python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/gpu -rA \
      --basetemp=/tmp/gpu-tests-$b > "$OUT/gpu-tests-$b.log" 2>&1 &
  done
  wait
  for b in native mode; do echo "== $b"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu-tests-$b.log" | tail -n 25; done
fi
if [ "${OVERHEAD:-1}" = 1 ] && [ $(( DEADLINE - $(date +%s) )) -gt 120 ]; then  # last: only with time left
  PYTHONPATH=$PWD/.scpkg:$PWD/.site-0.13.4 timeout 170 python3 -P benchmarks/overhead.py --gpus 1 --steps 6 \
    --out /tmp/oh > "$OUT/overhead.log" 2>&1
  echo "overhead rc=$?"; cat "$OUT/overhead.log"
fi
