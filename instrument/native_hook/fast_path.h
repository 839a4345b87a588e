// The per-op fast path: an op's accesses go straight into the C++ detector (detector.h), without a Python call.
//
// Attached by instrument/native.py when the watch's sink is the C++ detector alone (no trace file to write). Python
// is entered only for what needs it: a thread or stream seen for the first time (the Recorder names it and links
// autograd's engine threads), a site not seen before (sites.h), a race found (the Recorder delivers it: findings,
// fail-fast), and the ops that keep the Python path: callbacks held back inside the op, a CUDA graph being
// captured, a site only Python can blame. The GPU trace's reports (allocations, frees, event records and waits,
// synchronizations) come here too while it is attached (gpu_trace.h).
#pragma once

#include <torch/extension.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include <c10/util/flat_hash_map.h>

#include "detector.h"
#include "memory.h"
#include "state.h"

namespace streamcheck_native {

struct FastPath {
  Detector* detector = nullptr;      // owned by the Python object below
  PyObject* owner = nullptr;         // the Core object (a reference, so the detector outlives every op)
  PyObject* deliver = nullptr;       // () -> None: Recorder.deliver_races (may raise RaceError into the program)
  PyObject* thread_actor = nullptr;  // () -> str: Recorder.thread_actor, for the calling thread ("": it failed)
  PyObject* stream_actor = nullptr;  // (device, handle) -> str: Recorder.stream_actor ("": it failed)
  PyObject* capture_site = nullptr;  // () -> site: sites.SiteTable.capture, where only Python can blame (sites.h: -2)
  // Recorder.fresh_blocks ({block: True}) where the allocator's reports still go to Python (gpu_trace.h could not
  // take them); nullptr: they come to FreshBlocks below
  PyObject* fresh_in_python = nullptr;
  std::atomic<uint64_t> generation{1};  // bumped when thread names are forgotten (after backward())
  int64_t backward_site = -1;
  bool in_backward = false;
  std::map<std::pair<int, int64_t>, int> stream_ids;  // (device, raw handle) -> actor (handle 0 on every device)
  // raw handle (not 0) -> actor: the GPU trace reports a handle without its device (Recorder.stream_actor_of_handle)
  std::unordered_map<int64_t, int> stream_of_handle;
  std::vector<int> op_ids;                      // plan index -> the detector's op id (-1: not asked yet)
};

inline FastPath& fast_path() {
  static FastPath* f = new FastPath();  // never destroyed, like state()
  return *f;
}

// Blocks the allocator handed out that no op wrote yet: the next op output there is that block's allocation.
// Filled by gpu_trace.h; the allocator reports from any thread, GIL or not: a mutex of its own. A flat set: every
// allocation and free reports here, and a node allocated and freed per block was most of what a report cost.
struct FreshBlocks {
  std::mutex mutex;
  ska::flat_hash_set<uint64_t> blocks;
  void add(uint64_t ptr) {
    std::lock_guard<std::mutex> lock(mutex);
    if (blocks.size() > (1u << 20)) blocks.clear();  // a bound: blocks freed before any op wrote them pile up
    blocks.insert(ptr);
  }
  bool take(uint64_t ptr) {
    std::lock_guard<std::mutex> lock(mutex);
    return blocks.erase(ptr) != 0;
  }
};

inline FreshBlocks& fresh_blocks() {
  static FreshBlocks* f = new FreshBlocks();
  return *f;
}

// A reference held for a scope, GIL held: Py_XINCREF / Py_XDECREF themselves, as py::object would do them less
// the GIL check pybind11 makes at each (about 100 instructions a pair, paid at every op decided here)
struct Hold {
  PyObject* object;
  explicit Hold(PyObject* o) : object(o) { Py_XINCREF(o); }
  ~Hold() { Py_XDECREF(object); }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
};

static thread_local int thread_actor_id = -1;
static thread_local uint64_t thread_actor_generation = 0;
static thread_local bool capturing_graph = false;

inline int current_cuda_device() {  // what torch.cuda.current_device() says (tests: device 0)
  if (state().cpu_as_device) return 0;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index();
}

inline std::string call_for_name(PyObject* fn, py::tuple args) {  // "" once the fast path was detached
  if (fn == nullptr) return std::string();
  return py::reinterpret_borrow<py::object>(fn)(*args).cast<std::string>();
}

// GIL held. The calling thread's actor, named by the Recorder the first time (-1: it failed and switched off).
inline int current_thread_actor(FastPath& f, Detector* d) {
  uint64_t generation = f.generation.load(std::memory_order_relaxed);
  if (thread_actor_id < 0 || thread_actor_generation != generation) {
    std::string name = call_for_name(f.thread_actor, py::make_tuple());
    if (name.empty()) return -1;
    thread_actor_id = d->actor_id(name);
    thread_actor_generation = generation;
  }
  return thread_actor_id;
}

// GIL held. False: the op goes the Python way (on_access) instead.
inline bool decide_in_cpp(const Plan& plan, const OpAccesses& acc, int64_t stream_handle, int64_t site) {
  FastPath& f = fast_path();
  Detector* d = f.detector;
  if (d == nullptr || capturing_graph || site == -2) return false;
  if (!tuning().detector) return true;  // measurement switch (state.h: Tuning)
  // Python calls below may let another thread run and stop the watch (attach_fast_path(None)): hold the detector
  Hold keep(f.owner);
  int thread = current_thread_actor(f, d);
  if (thread < 0) return true;  // the Recorder failed (and switched itself off): drop the op
  int actor = thread;
  if (acc.device >= 0) {
    auto key = std::make_pair(acc.device, stream_handle);
    auto found = f.stream_ids.find(key);
    if (found == f.stream_ids.end()) {
      std::string name = call_for_name(f.stream_actor, py::make_tuple(acc.device, stream_handle));
      if (name.empty()) return true;
      found = f.stream_ids.emplace(key, d->actor_id(name)).first;
      if (stream_handle != 0) f.stream_of_handle[stream_handle] = found->second;
    }
    actor = found->second;
  }
  if (site < 0 && f.in_backward) site = f.backward_site;  // no Python frame: blamed on the backward() call
  if (plan.index >= static_cast<int>(f.op_ids.size())) f.op_ids.resize(plan.index + 1, -1);
  int& op = f.op_ids[plan.index];
  if (op < 0) {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(state().mutex);  // no thread waits for the GIL while holding it
      name = state().names.at(static_cast<size_t>(plan.index)).first;
    }
    op = d->op_id(name);
  }
  // One op at a time per thread (the hook's own key is excluded while it runs): the buffers are reused, no allocation
  static thread_local std::vector<Range3> reads_buffer, writes_buffer;
  std::vector<Range3>& reads = reads_buffer;
  std::vector<Range3>& writes = writes_buffer;
  reads.clear();
  writes.clear();
  for (const Range& r : acc.reads) reads.push_back({static_cast<uint64_t>(r.base), r.start, r.end});
  for (const Range& r : acc.writes) writes.push_back({static_cast<uint64_t>(r.base), r.start, r.end});
  for (const Range& r : acc.fresh) {
    bool on_device = r.device >= 0;
    // pinned host outputs are always new blocks; device ones when the allocator just gave the block out
    bool allocated = !on_device;
    if (on_device && f.fresh_in_python != nullptr) {
      py::int_ key(static_cast<uint64_t>(r.base));
      allocated = PyDict_GetItem(f.fresh_in_python, key.ptr()) != nullptr;  // borrowed; no error raised
      if (allocated) PyDict_DelItem(f.fresh_in_python, key.ptr());
    } else if (on_device) {
      allocated = fresh_blocks().take(static_cast<uint64_t>(r.base));
    }
    if (allocated) d->alloc(static_cast<uint64_t>(r.base), r.storage_bytes, on_device ? actor : thread, site);
    writes.push_back({static_cast<uint64_t>(r.base), r.start, r.end});
  }
  if (reads.empty() && writes.empty()) return true;
  if (actor == thread) d->host_access(thread, reads, writes, site, op);
  else d->kernel(thread, actor, reads, writes, site, op);
  if (!d->races.empty() && f.deliver != nullptr) py::reinterpret_borrow<py::object>(f.deliver)();
  return true;
}

inline void attach_fast_path(py::object core, py::object deliver, py::object thread_actor, py::object stream_actor,
                             py::object capture_site, py::object fresh_in_python) {
  FastPath& f = fast_path();
  f.detector = nullptr;
  for (PyObject** slot : {&f.owner, &f.deliver, &f.thread_actor, &f.stream_actor, &f.capture_site,
                          &f.fresh_in_python}) {
    Py_XDECREF(*slot);
    *slot = nullptr;
  }
  f.stream_ids.clear();
  f.stream_of_handle.clear();
  f.op_ids.clear();
  f.in_backward = false;
  f.backward_site = -1;
  f.generation.fetch_add(1);
  if (core.is_none()) return;
  f.detector = core.cast<Detector*>();
  f.detector->recycle_shadows = tuning().recycle_shadows;
  f.owner = core.release().ptr();
  f.deliver = deliver.release().ptr();
  f.thread_actor = thread_actor.release().ptr();
  f.stream_actor = stream_actor.release().ptr();
  f.capture_site = capture_site.release().ptr();
  f.fresh_in_python = fresh_in_python.is_none() ? nullptr : fresh_in_python.release().ptr();
}

}  // namespace streamcheck_native
