// State shared by the hook's parts: operator plans, byte ranges, the Python callbacks, thread flags.
#pragma once

#include <torch/extension.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/util/flat_hash_map.h>

#include "stage_times.h"

namespace streamcheck_native {

namespace py = pybind11;

constexpr c10::DispatchKey kHookKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// Python: run_special (hook.cpp); Collective / RecordStream: collectives.h where it applies, else run_special
enum class Kind : uint8_t { Skip, Access, Python, Collective, RecordStream };
enum class Role : uint8_t { None, Read, Write, View };

struct Plan {
  Kind kind = Kind::Skip;
  int index = -1;              // position in the names list Python reads
  std::vector<Role> roles;     // per argument
  std::vector<uint8_t> fresh;  // per return: a tensor the op newly wrote
  std::vector<int> view_of;    // per return: the argument it may alias (-1: none)
  bool has_views = false;
  int group_arg = -1;  // collectives: the process group argument, the async_op argument (-1: none)
  int async_arg = -1;
};

struct Range {
  uintptr_t base;
  int64_t start, end;
  int64_t storage_bytes;
  int device;  // >= 0: a device tensor; -1: pinned host memory
};

// A site's key is (code object, bytecode offset) pairs as bytes (sites.h): hashed a word at a time, not byte by byte
struct SiteKeyHash {
  size_t operator()(const std::string& key) const {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ key.size();
    size_t words = key.size() / sizeof(uint64_t);
    for (size_t i = 0; i < words; ++i) {
      uint64_t w;
      std::memcpy(&w, key.data() + i * sizeof(uint64_t), sizeof(w));
      h = (h ^ w) * 0xff51afd7ed558ccdULL;
      h ^= h >> 32;
    }
    return static_cast<size_t>(h);
  }
};

struct State {
  std::mutex mutex;  // plans, names, pinned
  std::unordered_map<const c10::FunctionSchema*, Plan> plans;
  std::atomic<uint64_t> plans_generation{1};  // bumped when `plans` is cleared (plans.h: the threads' caches)
  std::vector<std::pair<std::string, std::string>> names;  // (qualified name, overload)
  std::unordered_map<uintptr_t, bool> pinned;
  // Python callables; owned references that are never released (they must outlive interpreter teardown).
  PyObject* on_access = nullptr;   // (op, device, stream, reads, writes, fresh) -> None
  PyObject* on_special = nullptr;  // (op, args) -> state, before a c10d op or record_stream
  PyObject* after_special = nullptr;  // (state, outputs) -> None
  PyObject* on_error = nullptr;    // (message) -> None
  PyObject* plan_source = nullptr;  // (qualified name, overload) -> (kind, arg roles, return roles): op_table.py
  // Call sites (GIL held for all of these): see capture_site.
  PyObject* classify_code = nullptr;  // (code) -> bool: lies in torch or streamcheck (sites.SiteTable._classify)
  PyObject* intern_site = nullptr;    // ([(code, lasti), ...]) -> site id (sites.SiteTable.intern_chain)
  int site_depth = 8;
  // Flat tables (no node per entry; one probe): every op with an access asks them once per frame it walks
  ska::flat_hash_map<PyCodeObject*, bool> internal_code;  // each code object held by a reference
  ska::flat_hash_map<std::string, int64_t, SiteKeyHash> site_ids;
  uint64_t site_generation = 1;  // bumped with each new site table (sites.h: the cache in front of internal_code)
  c10::DeleterFnPtr cpu_deleter = nullptr;
  c10::DeleterFnPtr pinned_deleter = nullptr;
  std::atomic<bool> active{false};
  bool gpu_trace_paused = false;  // set_active(false) paused torch's GPU trace (hook.cpp)
  bool cpu_as_device = false;  // tests: CPU tensors stand for device 0 tensors on the thread's test stream
  std::vector<std::pair<uint64_t, uint64_t>> op_counts;  // per plan index: (boxed, unboxed), under `mutex`
};

// Never destroyed: ops may run during interpreter shutdown. A namespace-scope pointer, made when the module loads:
// every op asks for it several times, and a function's static would be tested for its first use each time.
inline State* const the_state = new State();
inline State& state() { return *the_state; }

// Switches for the hook's cheaper ways, each on by default; off gives the way before it, for the side-by-side
// measurement in one process (benchmarks/native_profile.py) and as a fallback. set_tuning (hook.cpp) sets them.
struct Tuning {
  bool fast_frames = true;   // sites.h: walk the interpreter's frames, not frame objects
  bool lazy_frees = true;    // gpu_trace.h: a free inside an op is queued without the GIL, its site taken after
  bool plan_cache = true;    // plans.h: a per-thread cache of plans in front of the locked table
  bool recycle_shadows = true;  // detector.h: a freed block's shadow keeps its vectors for the next block's history
  bool unboxed = true;       // unboxed.h: the listed ops reach the hook unboxed (off: boxed, as every other op)
  bool unboxed_zero2 = true;  // unboxed.h: the ops added from the ZeRO-2 count too (off: those boxed again)
  // Measurement only (benchmarks/native_profile.py's watch_no_* phases): off takes one source of per-op cost away,
  // and with it what the watch finds. memory_reports: the allocator's allocation and free reports dropped on arrival;
  // sites: no call site taken (-1); detector: the GIL and the site taken, the op then dropped before the detector
  // (frees dropped before the GIL); gil: the op dropped once its byte ranges are read, before the GIL (frees too).
  bool memory_reports = true;
  bool sites = true;
  bool detector = true;
  bool gil = true;
  // Measurement (native_profile.py --count-ops): count the ops that reach the hook, boxed and unboxed (count_op)
  bool count_ops = false;
};

inline Tuning& tuning() {
  static Tuning t;
  return t;
}

// One watched op reached the hook (Tuning::count_ops only): which ops are boxed is what decides unboxed.h's list
inline void count_op(int index, bool boxed) {
  if (index < 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.op_counts.size() <= static_cast<size_t>(index)) s.op_counts.resize(index + 1);
  auto& count = s.op_counts[index];
  (boxed ? count.first : count.second) += 1;
}

static thread_local int op_depth = 0;           // > 0 while this thread runs an op under the hook
static thread_local const void* op_frame = nullptr;  // the innermost Python frame when that op began (sites.h)
static thread_local bool callbacks_held = false;  // Python held back a callback fired inside the current op
// > 0 while a collective or record_stream runs the Python way (hook.cpp run_special): the GPU trace's reports from
// inside it go to Python, which ties them to the collective (collectives.py)
static thread_local int special_depth = 0;

struct SpecialScope {  // marks "inside a collective or record_stream" for the GPU trace's reports (gpu_trace.h)
  SpecialScope() { ++special_depth; }
  ~SpecialScope() { --special_depth; }
};

// A GPU-trace report held back inside a collective decided in C++ (collectives.h replays it after the collective):
// kind 'r' event record (a: event, b: stream), 'w' event wait, 'd' event destroy (a), 'e' event synchronization
// (a), 's' stream synchronization (a: stream), 'D' device synchronization (a: device), 'c' stream creation (a).
struct TraceReport {
  char kind;
  uint64_t a, b;
};
static thread_local std::vector<TraceReport>* held_reports = nullptr;  // set while this thread runs such a one
static thread_local int64_t test_stream = 0;
static thread_local bool parked = false;  // set_active(false) took the hook's key out of this thread's set

}  // namespace streamcheck_native
