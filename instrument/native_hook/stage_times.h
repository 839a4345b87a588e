// Where the hook's time goes, per stage, in a build made for it (STREAMCHECK_NATIVE_CFLAGS=-DSTREAMCHECK_STAGE_TIMES,
// instrument/native.py): nanoseconds and counts summed over every thread, read by `stage_times()` (hook.cpp).
// In the normal build every macro here is empty: no clock is read.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace streamcheck_native {

#ifdef STREAMCHECK_STAGE_TIMES
constexpr bool kStageTimes = true;
// The stages, in the order stage_times() lists them.
// special: a collective or record_stream whole; special_op: the collective itself within it (NCCL's own launch,
// which a plain run pays too), decided in C++ (collectives.h)
enum Stage { kHookTotal, kOp, kSpecial, kSpecialOp, kGil, kSite, kDecide, kPythonOp, kFree, kAlloc, kTraceReport,
             kStages };
inline const char* const kStageNames[kStages] = {"hook_total", "op",        "special", "special_op",
                                                 "gil",        "site",      "decide",  "python_op",
                                                 "free",       "alloc",     "trace_report"};

struct StageTotals {
  std::atomic<uint64_t> ns[kStages];
  std::atomic<uint64_t> n[kStages];
};

inline StageTotals& stage_totals() {
  static StageTotals* t = new StageTotals();  // zero-initialized atomics: a new object is value-initialized
  return *t;
}

inline uint64_t stage_now() {
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

inline void stage_add(Stage stage, uint64_t since) {
  StageTotals& t = stage_totals();
  t.ns[stage].fetch_add(stage_now() - since, std::memory_order_relaxed);
  t.n[stage].fetch_add(1, std::memory_order_relaxed);
}

struct StageScope {
  Stage stage;
  uint64_t since;
  explicit StageScope(Stage s) : stage(s), since(stage_now()) {}
  ~StageScope() { stage_add(stage, since); }
};

#define STAGE_SCOPE(stage) ::streamcheck_native::StageScope stage_scope_##stage(::streamcheck_native::stage)
#define STAGE_START(var) uint64_t var = ::streamcheck_native::stage_now()
#define STAGE_ADD(stage, var) ::streamcheck_native::stage_add(::streamcheck_native::stage, var)
#else
constexpr bool kStageTimes = false;
#define STAGE_SCOPE(stage)
#define STAGE_START(var)
#define STAGE_ADD(stage, var)
#endif

}  // namespace streamcheck_native
