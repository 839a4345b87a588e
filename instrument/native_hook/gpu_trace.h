// torch's GPU trace (allocations, frees, events, synchronizations), taken in C++ while the fast path runs
// (fast_path.h).
//
// Once `torch._C._activate_gpu_trace()` ran, the CUDA caching allocator reports every block it hands out and takes
// back, and the CUDA wrappers every event created, recorded, waited, destroyed and every synchronization, through the
// interpreter in `GPUTrace::gpuTraceState`; torch's interpreter turns each report into a Python call (GIL, a module
// lookup, the callback registry, cuda_trace.py's handler, the Recorder): about one allocation and one free per op,
// several µs each, the largest single cost of the watch before this file. `TraceInterpreter` takes that
// interpreter's place. With the fast path attached, the memory reports are handled here (a fresh-block set; the C++
// detector's free), and so are event records / waits / destroys and stream, event and device synchronizations, as
// cuda_trace.py's handlers would feed them, when they come from outside an op (inside one they must wait for the
// op's own access, inside a collective be tied to it: the Python path holds them back), outside a graph capture, and on a stream the fast path
// already named; event creations need nothing. The rest (stream creations, a stream not seen by an op yet), every
// report without the fast path, and every other method go on to torch's own interpreter unchanged. While attached,
// other Python GPU-trace callbacks (CSAN's) do not see what is handled here.
#pragma once

#include <c10/core/impl/GPUTrace.h>
#include <c10/core/impl/PyInterpreter.h>

#include "fast_path.h"
#include "sites.h"
#include "state.h"

namespace streamcheck_native {

static thread_local std::vector<std::pair<uint64_t, int64_t>> frees_in_op;  // (block, site) freed inside an op
constexpr int64_t kSiteLater = -3;  // a free queued inside an op: whether it can race, and its site, come after it
#ifdef STREAMCHECK_FAST_FRAMES
constexpr bool kLazyFrees = true;  // top_frame() tells whether the op ran Python code meanwhile
#else
constexpr bool kLazyFrees = false;
#endif

// GIL held. A free reaches the detector; inside an op it waits for the op's own access (recorder.py: order).
inline void free_now(uint64_t ptr, int64_t site) {
  FastPath& f = fast_path();
  Detector* d = f.detector;
  if (d == nullptr) return;
  Hold keep(f.owner);  // as in decide_in_cpp
  int thread = current_thread_actor(f, d);
  if (thread < 0) return;
  d->free(thread, ptr, site);
}

// GIL held. The site a free is blamed on: the running code's, as the op's own (sites.h; -2: only Python can blame)
inline int64_t site_of_free(FastPath& f) {
  int64_t site = site_of_op();
  if (site == -2 && f.capture_site != nullptr)
    site = py::reinterpret_borrow<py::object>(f.capture_site)().cast<int64_t>();
  return site;
}

// GIL held, after the op ran and before its access reaches the detector: the sites of the frees queued while it ran
// (kSiteLater), as on_free takes them at once. The detector has seen nothing of this thread since those frees, and
// the Python frames are the op's own: the same answer, one frame walk for all of them. `op_site`: the op's site
// when the hook took it already (kSiteLater: not taken).
inline void resolve_frees_in_op(int64_t op_site = kSiteLater) {
  if (frees_in_op.empty()) return;
  FastPath& f = fast_path();
  Detector* d = f.detector;
  if (d == nullptr) return;  // free_now drops them
  Hold keep(f.owner);  // as in decide_in_cpp
  int64_t site = op_site == -2 ? kSiteLater : op_site;  // -2: Python's capture, which site_of_free makes
  for (auto& entry : frees_in_op) {
    if (entry.second != kSiteLater) continue;
    if (!d->free_can_race(entry.first)) {
      entry.second = -1;
      continue;
    }
    if (site == kSiteLater) site = site_of_free(f);
    entry.second = site;
  }
}

inline void flush_frees_in_op() {  // GIL held
  if (frees_in_op.empty()) return;
  resolve_frees_in_op();
  std::vector<std::pair<uint64_t, int64_t>> frees;
  frees.swap(frees_in_op);
  for (const auto& entry : frees) free_now(entry.first, entry.second);
  frees.clear();
  if (frees_in_op.empty()) frees_in_op.swap(frees);  // the buffer back with its capacity: no allocation per op
}

inline void on_free(uint64_t ptr) {
  STAGE_SCOPE(kFree);
  fresh_blocks().take(ptr);
  if (!state().active.load(std::memory_order_relaxed)) return;
  if (!tuning().gil || !tuning().detector) return;  // measurement switches (state.h: Tuning)
  // No GIL: the hook takes the free after the op (resolve_frees_in_op), where the frames are the same; a free under
  // Python code the op ran (a Python kernel) is blamed on that code, now, as below.
  if (kLazyFrees && op_depth > 0 && tuning().lazy_frees && top_frame() == op_frame) {
    frees_in_op.emplace_back(ptr, kSiteLater);
    return;
  }
  py::gil_scoped_acquire gil;
  FastPath& f = fast_path();
  Detector* d = f.detector;
  if (d == nullptr) return;
  Hold keep(f.owner);  // as in decide_in_cpp
  // Most blocks were only used by their allocation stream: such a free races with nothing and needs no site.
  int64_t site = d->free_can_race(ptr) ? site_of_free(f) : -1;
  if (op_depth > 0) {
    frees_in_op.emplace_back(ptr, site);
    return;
  }
  free_now(ptr, site);
}

// The actor the fast path gave a raw stream handle, as Recorder.stream_actor_of_handle names it (handle 0: the
// current device's default stream); -1: not known here (Python names it).
inline int stream_of_handle(FastPath& f, uintptr_t handle) {
  if (handle == 0) {
    auto found = f.stream_ids.find(std::make_pair(current_cuda_device(), static_cast<int64_t>(0)));
    return found == f.stream_ids.end() ? -1 : found->second;
  }
  auto found = f.stream_of_handle.find(static_cast<int64_t>(handle));
  return found == f.stream_of_handle.end() ? -1 : found->second;
}

// One GPU-trace report into the C++ detector: `body(f, d)` (GIL held) feeds it and says whether it could. False:
// torch's interpreter takes the report (cuda_trace.py, the Python path). Never throws into the CUDA code reporting.
template <class Body>
bool trace_in_cpp(Body&& body) {
  if (!state().active.load(std::memory_order_relaxed) || op_depth > 0 || special_depth > 0 || capturing_graph)
    return false;
  STAGE_SCOPE(kTraceReport);
  try {
    py::gil_scoped_acquire gil;
    FastPath& f = fast_path();
    if (f.detector == nullptr) return false;
    Hold keep(f.owner);  // as in decide_in_cpp
    return body(f, f.detector);
  } catch (...) {
    return false;  // a Python error while naming (the Recorder switched off): the Python path decides
  }
}

// Inside a collective decided in C++ (collectives.h), this thread's reports wait for the collective's own event
inline bool held_back(char kind, uint64_t a, uint64_t b = 0) {
  if (held_reports == nullptr) return false;
  held_reports->push_back({kind, a, b});
  return true;
}

// thread -> stream reports (cuda_trace.py: _event_recorded, _event_waited, _stream_synchronized)
template <class Feed>
bool stream_report_in_cpp(uintptr_t handle, Feed&& feed) {
  return trace_in_cpp([&](FastPath& f, Detector* d) {
    int stream = stream_of_handle(f, handle);
    if (stream < 0) return false;
    int thread = current_thread_actor(f, d);
    if (thread >= 0) feed(d, thread, stream);
    return true;  // thread < 0: the Recorder failed and is off; Python would drop it too
  });
}

#ifndef STREAMCHECK_NO_MEMORY_REPORTS
// Every method of torch's interpreter table is overridden (it has no defaults): a torch whose table differs fails to
// compile this, and native.py builds again with STREAMCHECK_NO_MEMORY_REPORTS (the reports then go to Python).
struct TraceInterpreter final : c10::impl::PyInterpreterVTable {
  const c10::impl::PyInterpreter* torch_own = nullptr;
  std::atomic<bool> memory_here{false};  // the fast path is attached: the memory reports are ours

  const c10::impl::PyInterpreterVTable& own() const { return **torch_own; }

  std::string name() const override { return own().name(); }
  void incref(PyObject* o) const override { own().incref(o); }
  void decref(PyObject* o) const override { own().decref(o); }
  bool try_incref(const c10::impl::PyObjectSlot& slot) const override { return own().try_incref(slot); }
  size_t refcnt(PyObject* o) const override { return own().refcnt(o); }
  c10::intrusive_ptr<c10::TensorImpl> detach(const c10::TensorImpl* self) const override { return own().detach(self); }
  void dispatch(const c10::OperatorHandle& op, torch::jit::Stack* stack) const override { own().dispatch(op, stack); }
  void reportErrorCallback(PyObject* callback, c10::DispatchKey key) const override {
    own().reportErrorCallback(callback, key);
  }
  void python_op_registration_trampoline(const c10::OperatorHandle& op, c10::DispatchKey key,
                                         c10::DispatchKeySet keyset, torch::jit::Stack* stack, bool with_keyset,
                                         bool with_op) const override {
    own().python_op_registration_trampoline(op, key, keyset, stack, with_keyset, with_op);
  }
  void throw_abstract_impl_not_imported_error(std::string opname, const char* pymodule,
                                              const char* context) const override {
    own().throw_abstract_impl_not_imported_error(std::move(opname), pymodule, context);
  }
  void python_dispatcher(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack) const override {
    own().python_dispatcher(op, keys, stack);
  }
  bool is_contiguous(const c10::TensorImpl* self, at::MemoryFormat f) const override { return own().is_contiguous(self, f); }
  c10::SymBool sym_is_contiguous(const c10::TensorImpl* self, at::MemoryFormat f) const override {
    return own().sym_is_contiguous(self, f);
  }
  bool is_strides_like(const c10::TensorImpl* self, at::MemoryFormat f) const override {
    return own().is_strides_like(self, f);
  }
  bool is_non_overlapping_and_dense(const c10::TensorImpl* self) const override {
    return own().is_non_overlapping_and_dense(self);
  }
  c10::Device device(const c10::TensorImpl* self) const override { return own().device(self); }
  int64_t dim(const c10::TensorImpl* self) const override { return own().dim(self); }
  c10::IntArrayRef strides(const c10::TensorImpl* self) const override { return own().strides(self); }
  c10::IntArrayRef sizes(const c10::TensorImpl* self) const override { return own().sizes(self); }
  c10::SymIntArrayRef sym_sizes(const c10::TensorImpl* self) const override { return own().sym_sizes(self); }
  c10::Layout layout(const c10::TensorImpl* self) const override { return own().layout(self); }
  int64_t numel(const c10::TensorImpl* self) const override { return own().numel(self); }
  c10::SymInt sym_numel(const c10::TensorImpl* self) const override { return own().sym_numel(self); }
  c10::SymIntArrayRef sym_strides(const c10::TensorImpl* self) const override { return own().sym_strides(self); }
  c10::SymInt sym_storage_offset(const c10::TensorImpl* self) const override { return own().sym_storage_offset(self); }
  void trace_gpu_event_creation(c10::DeviceType t, uintptr_t e) const override {
    if (!memory_here.load(std::memory_order_relaxed)) own().trace_gpu_event_creation(t, e);  // the watch needs none
  }
  void trace_gpu_event_deletion(c10::DeviceType t, uintptr_t e) const override {
    if (held_back('d', e)) return;
    if (memory_here.load(std::memory_order_relaxed) && trace_in_cpp([e](FastPath&, Detector* d) {
          d->event_destroy(e);
          return true;
        }))
      return;
    own().trace_gpu_event_deletion(t, e);
  }
  void trace_gpu_event_record(c10::DeviceType t, uintptr_t e, uintptr_t s) const override {
    if (held_back('r', e, s)) return;
    if (memory_here.load(std::memory_order_relaxed) &&
        stream_report_in_cpp(s, [e](Detector* d, int thread, int stream) { d->event_record(thread, e, stream); }))
      return;
    own().trace_gpu_event_record(t, e, s);
  }
  void trace_gpu_event_wait(c10::DeviceType t, uintptr_t e, uintptr_t s) const override {
    if (held_back('w', e, s)) return;
    if (memory_here.load(std::memory_order_relaxed) &&
        stream_report_in_cpp(s, [e](Detector* d, int thread, int stream) { d->event_wait(thread, e, stream); }))
      return;
    own().trace_gpu_event_wait(t, e, s);
  }
  void trace_gpu_memory_allocation(c10::DeviceType t, uintptr_t ptr) const override {
    if (!memory_here.load(std::memory_order_relaxed)) return own().trace_gpu_memory_allocation(t, ptr);
    if (!tuning().memory_reports) return;  // measurement switch (state.h: Tuning)
    STAGE_SCOPE(kAlloc);
    if (state().active.load(std::memory_order_relaxed)) fresh_blocks().add(ptr);
  }
  void trace_gpu_memory_deallocation(c10::DeviceType t, uintptr_t ptr) const override {
    if (!memory_here.load(std::memory_order_relaxed)) return own().trace_gpu_memory_deallocation(t, ptr);
    if (!tuning().memory_reports) return;  // measurement switch (state.h: Tuning)
    on_free(ptr);
  }
  void trace_gpu_stream_creation(c10::DeviceType t, uintptr_t s) const override {
    if (held_back('c', s)) return;
    own().trace_gpu_stream_creation(t, s);
  }
  void trace_gpu_device_synchronization(c10::DeviceType t) const override {
    if (held_back('D', static_cast<uint64_t>(current_cuda_device()))) return;
    if (memory_here.load(std::memory_order_relaxed) && trace_in_cpp([](FastPath& f, Detector* d) {
          int thread = current_thread_actor(f, d);
          if (thread >= 0) d->sync_device(thread, current_cuda_device());
          return true;
        }))
      return;
    own().trace_gpu_device_synchronization(t);
  }
  void trace_gpu_stream_synchronization(c10::DeviceType t, uintptr_t s) const override {
    if (held_back('s', s)) return;
    if (memory_here.load(std::memory_order_relaxed) &&
        stream_report_in_cpp(s, [](Detector* d, int thread, int stream) { d->sync_stream(thread, stream); }))
      return;
    own().trace_gpu_stream_synchronization(t, s);
  }
  void trace_gpu_event_synchronization(c10::DeviceType t, uintptr_t e) const override {
    if (held_back('e', e)) return;
    if (memory_here.load(std::memory_order_relaxed) && trace_in_cpp([e](FastPath& f, Detector* d) {
          int thread = current_thread_actor(f, d);
          if (thread >= 0) d->sync_event(thread, e);
          return true;
        }))
      return;
    own().trace_gpu_event_synchronization(t, e);
  }
  void reset_backward_hooks(const c10::TensorImpl* self) const override { own().reset_backward_hooks(self); }
};

inline TraceInterpreter& trace_interpreter() {
  static TraceInterpreter* t = new TraceInterpreter();  // never destroyed: the allocator may report at exit
  return *t;
}

// Put TraceInterpreter in front of torch's once its GPU trace is active; false when it is not (no CUDA, or not yet).
inline bool take_memory_reports(bool on) {
  TraceInterpreter& t = trace_interpreter();
  static c10::impl::PyInterpreter* ours = nullptr;
  const c10::impl::PyInterpreter* current = c10::impl::GPUTrace::gpuTraceState.load();
  if (current == nullptr) return false;
  if (ours == nullptr) ours = new c10::impl::PyInterpreter(&t);
  if (current != ours) {
    t.torch_own = current;
    c10::impl::GPUTrace::gpuTraceState.store(ours);
  }
  t.memory_here = on;
  return true;
}
#else
inline bool take_memory_reports(bool) { return false; }
#endif

}  // namespace streamcheck_native
