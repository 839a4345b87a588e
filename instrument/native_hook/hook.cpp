// streamcheck's native per-op hook: what instrument/dispatch.py's TorchDispatchMode does, without a Python mode.
// One translation unit: this file (the hook, its registration and the Python module) and the headers beside it
// (state.h, plans.h, memory.h, sites.h), built by instrument/native.py.
//
// A Python TorchDispatchMode costs about 1.5x on a launch-bound training step before it does any work of its own:
// every op converts its arguments to Python objects, calls __torch_dispatch__, and parses them again to run. This
// hook is a boxed C++ fallback on one dispatch key that the watched threads put in their thread-local "included"
// set (the autograd engine's threads inherit it, like a mode). Per op it reads the operator's read/write plan
// (built once per operator from the one table in op_table.py, which dispatch.py reads too), turns the tensors into byte
// ranges, runs the op, and makes one Python call with plain integers. Ops that touch no CUDA or pinned memory
// never reach Python.
//
// The key, TESTING_ONLY_GenericMode, has no kernels and no fallback in PyTorch itself; it sits above autograd, so
// composite ops (linear, reshape) are seen once, before they decompose: streamcheck's own key is excluded while an
// op runs. A return the schema says aliases its input but that lives in another storage (reshape or contiguous
// that had to copy) counts as a read of the input and a fresh write.
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/GPUTrace.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include "collectives.h"
#include "detector_py.h"
#include "fast_path.h"
#include "gpu_trace.h"
#include "memory.h"
#include "plans.h"
#include "sites.h"
#include "state.h"

namespace streamcheck_native {

int64_t current_stream(int device) {
  if (state().cpu_as_device) return test_stream;
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  c10::Stream stream = impl->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(stream.native_handle()));
}

void report_error(const std::string& message) {
  State& s = state();
  s.active = false;
  if (s.on_error == nullptr) return;
  py::gil_scoped_acquire gil;
  try {
    py::reinterpret_borrow<py::object>(s.on_error)(message);
  } catch (py::error_already_set& e) {
    e.restore();
    PyErr_Clear();
  }
}

// A return the schema calls fresh but that lives in the storage of an argument the op reads: the op handed back
// its input or a view of it, so that storage was neither read nor written. Drops those reads (as dispatch.py does).
bool returned_an_input(std::vector<Range>& reads, uintptr_t base) {
  size_t before = reads.size();
  reads.erase(std::remove_if(reads.begin(), reads.end(), [base](const Range& r) { return r.base == base; }),
              reads.end());
  return reads.size() != before;
}

struct OpScope {  // marks "inside an op" for callbacks fired while it runs
  OpScope() {
    ++op_depth;
    op_frame = top_frame();
  }
  ~OpScope() { --op_depth; }
};

struct FreesAfterOp {  // frees reported while the op ran reach the detector after its access (gpu_trace.h)
  ~FreesAfterOp() {
    if (frees_in_op.empty()) return;
    try {
      py::gil_scoped_acquire gil;
      flush_frees_in_op();
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_Clear();
    } catch (...) {
    }
  }
};

void run_special(const Plan& plan, const c10::OperatorHandle& op, c10::DispatchKeySet rest, torch::jit::Stack* stack) {
  State& s = state();
  SpecialScope in_special;
  size_t n = op.schema().arguments().size();
  py::object token;
  {
    py::gil_scoped_acquire gil;
    py::tuple args(n);
    for (size_t i = 0; i < n; ++i) args[i] = torch::jit::toPyObject((*stack)[stack->size() - n + i]);
    token = py::reinterpret_borrow<py::object>(s.on_special)(plan.index, args);
  }
  try {
    op.redispatchBoxed(rest, stack);
    if (plan.kind == Kind::Collective) call_probe();
  } catch (...) {
    py::gil_scoped_acquire gil;
    py::reinterpret_borrow<py::object>(s.after_special)(token, py::none());
    token = py::object();
    throw;
  }
  py::gil_scoped_acquire gil;
  size_t m = op.schema().returns().size();
  py::tuple outs(m);
  for (size_t i = 0; i < m; ++i) outs[i] = torch::jit::toPyObject((*stack)[stack->size() - m + i]);
  py::reinterpret_borrow<py::object>(s.after_special)(token, outs);
  token = py::object();
}

// An argument a return may alias. Its extent (range_of's second half) is taken only if the return turns out to
// live in another storage (a reshape that copied), which most views never do: before the op where the argument may
// be gone after it (boxed: the stack gives up its arguments), else after it (the caller holds them).
struct ViewInput {
  int arg;
  const at::Tensor* tensor;  // null once the extent is in `range`
  Range range;
};

// Reused per thread (no allocation per op): the hook never runs inside itself on one thread (no_hook below). At
// namespace scope, not in watched(): a function template's statics are one set per instantiation, 90 of them,
// which made the module's thread-local block 10.5 kB (too large for the static TLS surplus) and gave each op
// its own cold buffers.
static thread_local OpAccesses acc_buffer;
static thread_local std::vector<ViewInput> views_buffer;

// One watched op, however its arguments arrive (boxed on a stack: hook() below; unboxed: unboxed.h): the plan's
// byte ranges of the arguments, the op run, the ranges of its returns, then the C++ detector or one Python call.
// for_args(f) / for_rets(f) call f(index, tensor) for every tensor of every argument / return; run() runs the op.
// kArgsOutlive: the tensors for_args gives stay alive (and unchanged where a return is no view of them) past run().
template <bool kArgsOutlive = false, class ForArgs, class Run, class ForRets>
void watched(const c10::OperatorHandle& op, const Plan& plan, ForArgs&& for_args, Run&& run, ForRets&& for_rets) {
  State& s = state();
  OpAccesses& acc = acc_buffer;
  acc.reads.clear();
  acc.writes.clear();
  acc.fresh.clear();
  acc.device = -1;
  std::vector<ViewInput>& view_inputs = views_buffer;  // the arguments a return may alias
  view_inputs.clear();
  if (plan.kind == Kind::Access) {
    try {
      size_t n = plan.roles.size();
      for_args([&](size_t i, const at::Tensor& t) {
        if (i >= n) return;
        Role role = plan.roles[i];
        if (role == Role::None || (role == Role::View && !plan.has_views)) return;
        Range r;
        if (role == Role::View) {
          if (!locate(t, false, r)) return;
          if (kArgsOutlive) {
            view_inputs.push_back({static_cast<int>(i), &t, r});
          } else {
            extent(t, r);
            view_inputs.push_back({static_cast<int>(i), nullptr, r});
          }
          return;
        }
        if (!range_of(t, false, r)) return;
        if (role == Role::Read) acc.add(acc.reads, r);
        else acc.add(acc.writes, r);
      });
    } catch (const py::error_already_set&) {
      throw;  // a RaceError from fail-fast mode: the program sees it
    } catch (const std::exception& e) {
      report_error(std::string("native hook, before ") + op.schema().name() + ": " + e.what());
      run();
      return;
    }
  }
  FreesAfterOp frees_after;
  {
    OpScope in_op;
    STAGE_SCOPE(kOp);
    try {
      run();
    } catch (...) {
      if (callbacks_held) {  // the callbacks it fired before failing still happened
        callbacks_held = false;
        py::gil_scoped_acquire gil;
        py::reinterpret_borrow<py::object>(s.on_access)(plan.index, -1, 0, py::list(), py::list(), py::none(), -1);
      }
      throw;
    }
  }
  bool held = callbacks_held;
  callbacks_held = false;
  if (plan.kind == Kind::Skip && !held) return;
  try {
    if (plan.kind == Kind::Access) {
      size_t m = plan.fresh.size();
      for_rets([&](size_t i, const at::Tensor& t) {
        if (i >= m) return;
        int view = plan.view_of[i];
        if (!plan.fresh[i] && view < 0) return;
        Range r;
        if (!locate(t, true, r)) return;
        if (view >= 0) {
          for (auto& input : view_inputs) {
            if (input.arg != view) continue;
            if (input.range.base == r.base) return;  // a real view: no data moved
            if (input.tensor != nullptr) {
              extent(*input.tensor, input.range);
              input.tensor = nullptr;
            }
            acc.add(acc.reads, input.range);  // it copied: read the input, wrote a new tensor
          }
        } else if (returned_an_input(acc.reads, r.base)) {
          return;  // a "fresh" return in a read argument's storage (type_as to the same dtype, _unsafe_view)
        }
        extent(t, r);
        acc.add(acc.fresh, r);
      });
    }
    if (acc.reads.empty() && acc.writes.empty() && acc.fresh.empty() && !held) return;
    int64_t stream = acc.device >= 0 ? current_stream(acc.device) : 0;
    if (!tuning().gil && !held) return;  // measurement switch (state.h: Tuning)
    STAGE_START(gil_since);
    py::gil_scoped_acquire gil;
    STAGE_ADD(kGil, gil_since);
    STAGE_START(site_since);
    bool accessed = !(acc.reads.empty() && acc.writes.empty() && acc.fresh.empty());
    int64_t site = accessed ? site_of_op() : -1;
    STAGE_ADD(kSite, site_since);
    resolve_frees_in_op(accessed ? site : kSiteLater);  // before the op's access, as if taken when they came
    {
      STAGE_SCOPE(kDecide);
      if (!held && decide_in_cpp(plan, acc, stream, site)) {  // fast_path.h: no Python call for this op
        flush_frees_in_op();  // now, under this GIL (FreesAfterOp would take it again)
        return;
      }
    }
    STAGE_SCOPE(kPythonOp);
    py::reinterpret_borrow<py::object>(s.on_access)(
        plan.index, acc.device, stream, to_py(acc.reads), to_py(acc.writes), fresh_to_py(acc.fresh), site);
    flush_frees_in_op();
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::exception& e) {
    report_error(std::string("native hook, after ") + op.schema().name() + ": " + e.what());
  }
}

// The plan of an op, or nullptr when the table cannot give one (reported; the op then runs unwatched).
inline const Plan* plan_or_report(const c10::OperatorHandle& op) {
  try {
    return &plan_for(op);
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::exception& e) {
    report_error(std::string("native hook, before ") + op.schema().name() + ": " + e.what());
    return nullptr;
  }
}

// The boxed fallback: every op on the hook's key without an unboxed kernel of its own (unboxed.h).
void hook(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);  // the op's inner ops, and our own Python, go unseen
  c10::DispatchKeySet rest = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kHookKey);
  State& s = state();
  if (!s.active.load(std::memory_order_relaxed)) {
    op.redispatchBoxed(rest, stack);
    return;
  }
  STAGE_SCOPE(kHookTotal);
  const Plan* plan = plan_or_report(op);
  if (plan == nullptr) {
    op.redispatchBoxed(rest, stack);
    return;
  }
  if (tuning().count_ops) count_op(plan->index, true);
  if (plan->kind == Kind::Python || plan->kind == Kind::Collective || plan->kind == Kind::RecordStream) {
    bool in_cpp = false;
    if (plan->kind != Kind::Python) {
      py::gil_scoped_acquire gil;
      in_cpp = collectives_in_cpp();
    }
    STAGE_SCOPE(kSpecial);
    if (!in_cpp) run_special(*plan, op, rest, stack);
    else if (plan->kind == Kind::Collective) run_collective(*plan, op, rest, stack);
    else run_record_stream(op, rest, stack);
    return;
  }
  size_t n = plan->roles.size(), m = plan->fresh.size();
  size_t first_arg = stack->size() - n;
  watched(
      op, *plan,
      [&](auto&& f) {
        for (size_t i = 0; i < n; ++i) {
          Role role = plan->roles[i];
          if (role == Role::None || (role == Role::View && !plan->has_views)) continue;
          for_each_tensor((*stack)[first_arg + i], [&](const at::Tensor& t) { f(i, t); });
        }
      },
      [&]() { op.redispatchBoxed(rest, stack); },
      [&](auto&& f) {
        size_t first = stack->size() - m;
        for (size_t i = 0; i < m; ++i) {
          if (!plan->fresh[i] && plan->view_of[i] < 0) continue;
          for_each_tensor((*stack)[first + i], [&](const at::Tensor& t) { f(i, t); });
        }
      });
}

// Off (a step window closed, the watch stopping, an internal error): the calling thread's ops skip the hook
// altogether (they are not even boxed; autograd's engine threads inherit that at the next backward()), and torch's
// GPU trace, which calls into Python at every allocation and free once activated, is paused (it cannot be
// deactivated: `haveState` is what its callers test). On: both come back. Other watched threads (user threads)
// keep the hook, which returns at its first check.
void set_active(bool active) {
  State& s = state();
  s.active = active;
  if (!active && c10::impl::tls_is_dispatch_key_included(kHookKey)) {
    c10::impl::tls_set_dispatch_key_included(kHookKey, false);
    parked = true;
  } else if (active && parked) {
    c10::impl::tls_set_dispatch_key_included(kHookKey, true);
    parked = false;
  }
  if (c10::impl::GPUTrace::gpuTraceState.load() != nullptr && s.gpu_trace_paused == active) {
    c10::impl::GPUTrace::haveState = active;
    s.gpu_trace_paused = !active;
  }
}

void restore_gpu_trace() {
  State& s = state();
  if (s.gpu_trace_paused) {
    c10::impl::GPUTrace::haveState = true;
    s.gpu_trace_paused = false;
  }
}

void install(py::object on_access, py::object on_special, py::object after_special, py::object on_error) {
  State& s = state();
  for (PyObject** slot : {&s.on_access, &s.on_special, &s.after_special, &s.on_error}) Py_XDECREF(*slot);
  s.on_access = on_access.release().ptr();
  s.on_special = on_special.release().ptr();
  s.after_special = after_special.release().ptr();
  s.on_error = on_error.release().ptr();
}

// Tests (tests/instrument/native/test_fast_path_frees.py): two CPU ops whose kernels report to the GPU trace while
// they run, as the caching allocator reports inside a CUDA op, with no Python frame of their own:
// fresh_like(x) returns a copy of x in a block it reports as just allocated; free_during(x, block) adds 1 to x in
// place and reports `block` freed. Defined on demand, never by the watch.
void report_memory(bool allocated, int64_t block) {
  const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace();
  if (trace == nullptr) return;
  auto ptr = static_cast<uintptr_t>(block);
  if (allocated) (*trace)->trace_gpu_memory_allocation(c10::DeviceType::CUDA, ptr);
  else (*trace)->trace_gpu_memory_deallocation(c10::DeviceType::CUDA, ptr);
}

void register_test_ops() {
  static torch::Library* defs = nullptr;
  if (defs != nullptr) return;
  defs = new torch::Library(torch::Library::DEF, "streamcheck_test", std::nullopt, __FILE__, __LINE__);
  defs->def("fresh_like(Tensor x) -> Tensor");
  defs->def("free_during(Tensor(a!) x, int block) -> Tensor(a!)");
  auto* impls = new torch::Library(torch::Library::IMPL, "streamcheck_test", c10::DispatchKey::CPU, __FILE__, __LINE__);
  impls->impl("fresh_like", [](const at::Tensor& x) {
    at::Tensor out = at::empty_like(x);
    report_memory(true, reinterpret_cast<int64_t>(out.storage().data()));
    out.copy_(x);
    return out;
  });
  impls->impl("free_during", [](at::Tensor& x, int64_t block) -> at::Tensor& {
    x.add_(1.0);
    report_memory(false, block);
    return x;
  });
}

}  // namespace streamcheck_native

#include "unboxed.h"  // after hook() and watched(), which its kernels call

using namespace streamcheck_native;

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&streamcheck_native::hook>());
}

#ifndef STREAMCHECK_NATIVE_SOURCES
#define STREAMCHECK_NATIVE_SOURCES unknown
#endif
#define STREAMCHECK_STRINGIFY_(x) #x
#define STREAMCHECK_STRINGIFY(x) STREAMCHECK_STRINGIFY_(x)

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "streamcheck's per-op hook (see instrument/native_hook/hook.cpp)";
  // the digest of the sources this build was made from (native.py compares it: a module left by an older build
  // must not be taken for this one)
  m.attr("source_digest") = STREAMCHECK_STRINGIFY(STREAMCHECK_NATIVE_SOURCES);
  bind_detector(m);
  m.def("install", &install, "Set the Python callbacks: on_access, on_special, after_special, on_error");
  m.def("set_active", &set_active, "Instrumentation on or off (off: no hook on this thread, GPU trace paused)");
  m.def("restore_gpu_trace", &restore_gpu_trace, "Undo set_active(False)'s pause of torch's GPU trace");
  m.def("gpu_trace_running", []() { return c10::impl::GPUTrace::haveState; },
        "Whether torch's GPU trace reports (activated and not paused)");
  m.def("set_plan_source", [](py::object source) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    Py_XDECREF(s.plan_source);
    s.plan_source = source.release().ptr();
    s.plans_generation.fetch_add(1);  // the threads' caches forget them (plans.h)
    s.plans.clear();  // plans come from the table: a new table, new plans (set once, before any op is watched)
  }, "The operator table: (qualified name, overload) -> (kind, argument roles, return roles)");
  m.def("set_site_table", [](py::object classify, py::object intern, int depth) {
    State& s = state();
    Py_XDECREF(s.classify_code);
    Py_XDECREF(s.intern_site);
    s.classify_code = classify.is_none() ? nullptr : classify.release().ptr();
    s.intern_site = intern.is_none() ? nullptr : intern.release().ptr();
    s.site_depth = depth;
    s.site_ids.clear();  // ids belong to the table they came from, and so does what counts as internal
    for (auto& entry : s.internal_code) Py_DECREF(reinterpret_cast<PyObject*>(entry.first));
    s.internal_code.clear();
    ++s.site_generation;
  }, "Capture sites in C++ into a sites.SiteTable: its _classify and intern_chain, and its depth (None: in Python)");
  m.def("sites_in_cpp", []() { return kSitesInCpp; });
  m.def("fast_frames_built", []() {
#ifdef STREAMCHECK_FAST_FRAMES
    return true;
#else
    return false;
#endif
  }, "Whether sites.h walks the interpreter's frames (3.11, 3.12), not frame objects");
  m.def("unboxed_built", []() {
#ifdef STREAMCHECK_NO_UNBOXED
    return false;
#else
    return true;
#endif
  }, "Whether unboxed.h's kernels were built (the common ops reach the hook unboxed)");
  m.def("tls_offset", []() -> py::object {
#if defined(__x86_64__)
    uintptr_t tp;
    asm("mov %%fs:0, %0" : "=r"(tp));  // the thread pointer: static TLS blocks lie just below it (variant II)
    return py::int_(static_cast<int64_t>(tp) - static_cast<int64_t>(reinterpret_cast<uintptr_t>(&op_depth)));
#else
    return py::none();
#endif
  }, "Diagnostics: thread pointer minus one of the hook's thread-locals (a few kB: in static TLS, read without a "
     "call in a -mtls-dialect=gnu2 build; far: a dynamic block); None off x86-64");
  m.def("set_tuning", [](const std::string& name, bool on) {
    Tuning& t = tuning();
    if (name == "fast_frames") t.fast_frames = on;
    else if (name == "lazy_frees") t.lazy_frees = on;
    else if (name == "plan_cache") t.plan_cache = on;
    else if (name == "recycle_shadows") t.recycle_shadows = on;
    else if (name == "unboxed") t.unboxed = on;
    else if (name == "unboxed_zero2") t.unboxed_zero2 = on;
    else if (name == "memory_reports") t.memory_reports = on;
    else if (name == "sites") t.sites = on;
    else if (name == "detector") t.detector = on;
    else if (name == "gil") t.gil = on;
    else if (name == "count_ops") t.count_ops = on;
    else if (name == "gpu_trace") {  // measurement: torch's GPU trace stops reporting (on: reports again)
      if (c10::impl::GPUTrace::gpuTraceState.load() != nullptr) c10::impl::GPUTrace::haveState = on;
    } else throw std::invalid_argument("set_tuning: unknown switch " + name);
  }, "Measurements: switch one of the hook's cheaper ways off (False) or on (state.h: Tuning)");
  m.def("op_counts", []() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    py::dict out;
    for (size_t i = 0; i < s.op_counts.size() && i < s.names.size(); ++i) {
      auto& count = s.op_counts[i];
      if (count.first == 0 && count.second == 0) continue;
      const auto& name = s.names[i];
      out[py::str(name.first + (name.second.empty() ? "" : "." + name.second))] =
          py::make_tuple(count.first, count.second);
    }
    s.op_counts.clear();
    return out;
  }, "Measurement: {op: (boxed, unboxed)} reaching the hook while set_tuning('count_ops', True), then zeroed");
  m.def("stage_times", []() -> py::object {
#ifdef STREAMCHECK_STAGE_TIMES
    py::dict out;
    StageTotals& t = stage_totals();
    for (int i = 0; i < kStages; ++i) {
      out[kStageNames[i]] = py::make_tuple(t.n[i].exchange(0), t.ns[i].exchange(0));
    }
    return out;
#else
    return py::none();
#endif
  }, "A stage-times build (stage_times.h): {stage: (count, ns)} since the last call (then zeroed); else None");
  m.def("watch_this_thread", [](bool on) {
          parked = false;
          c10::impl::tls_set_dispatch_key_included(kHookKey, on);
        },
        "Put the hook's dispatch key in (or out of) this thread's included set");
  m.def("this_thread_watched", []() { return c10::impl::tls_is_dispatch_key_included(kHookKey); });
  m.def("hold_callback", []() {
    if (op_depth == 0) return false;
    callbacks_held = true;
    return true;
  }, "Inside an op: note that Python holds back a callback until the op's own event, and say so");
  m.def("op_name", [](int index) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto& entry = s.names.at(static_cast<size_t>(index));
    return py::make_tuple(entry.first, entry.second);
  });
  m.def("learn_allocators", [](const at::Tensor& pageable) {
    state().cpu_deleter = pageable.storage().data_ptr().get_deleter();
  }, "Learn the CPU allocator's deleter from a pageable host tensor");
  m.def("forget_pinned", []() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.pinned.clear();
  });
  m.def("plan_of", [](const std::string& name, const std::string& overload) -> py::object {
    auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!handle.has_value()) return py::none();
    Plan plan = build_plan(handle->schema());  // the GIL is held: a pybind function
    const char* kinds[] = {"skip", "access", "python", "python", "python"};  // collectives: not plain accesses
    py::list reads, writes, views, fresh;
    for (size_t i = 0; i < plan.roles.size(); ++i) {
      if (plan.roles[i] == Role::Read) reads.append(i);
      if (plan.roles[i] == Role::Write) writes.append(i);
    }
    for (size_t i = 0; i < plan.fresh.size(); ++i) {
      if (plan.fresh[i]) fresh.append(i);
      if (plan.view_of[i] >= 0) views.append(py::make_tuple(i, plan.view_of[i]));
    }
    return py::make_tuple(kinds[static_cast<int>(plan.kind)], reads, writes, fresh, views);
  }, "Tests: the plan of an operator, (kind, read args, written args, fresh returns, (return, aliased arg))");
  m.def("attach_fast_path", &attach_fast_path,
        "Decide ops in the C++ detector: (Core or None, deliver, thread_actor, stream_actor, capture_site, "
        "the Recorder's fresh_blocks where the allocator's reports go to Python, else None)");
  m.def("set_backward", [](py::object site) {
    FastPath& f = fast_path();
    f.in_backward = !site.is_none();
    f.backward_site = site.is_none() ? -1 : site.cast<int64_t>();
    if (!f.in_backward) f.generation.fetch_add(1);  // the Recorder forgets the engine threads' names after it
  }, "A backward() call began (its site) or ended (None)");
  m.def("take_memory_reports", &take_memory_reports,
        "Allocations and frees from torch's GPU trace handled in C++ (True) or by torch's Python callbacks (False); "
        "False when the trace is not active");
  m.def("take_fresh_block", [](uint64_t ptr) { return fresh_blocks().take(ptr); },
        "Whether the allocator gave out this block and no op wrote it yet (then forget it)");
  m.def("forget_streams", []() {
    FastPath& f = fast_path();
    f.stream_ids.clear();
    f.stream_of_handle.clear();
  }, "The Recorder renamed a stream (a group's NCCL stream): ask it for every stream's name again");
  m.def("emit_gpu_trace", [](const std::string& kind, uint64_t a, uint64_t b) {
    const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace();
    if (trace == nullptr) return false;
    py::gil_scoped_release no_gil;  // as torch's CUDA code reports: without the GIL
    const auto cuda = c10::DeviceType::CUDA;
    if (kind == "record") (*trace)->trace_gpu_event_record(cuda, a, b);
    else if (kind == "wait") (*trace)->trace_gpu_event_wait(cuda, a, b);
    else if (kind == "destroy") (*trace)->trace_gpu_event_deletion(cuda, a);
    else if (kind == "create") (*trace)->trace_gpu_event_creation(cuda, a);
    else if (kind == "sync_event") (*trace)->trace_gpu_event_synchronization(cuda, a);
    else if (kind == "sync_stream") (*trace)->trace_gpu_stream_synchronization(cuda, a);
    else if (kind == "sync_device") (*trace)->trace_gpu_device_synchronization(cuda);
    else if (kind == "alloc") (*trace)->trace_gpu_memory_allocation(cuda, a);
    else if (kind == "free") (*trace)->trace_gpu_memory_deallocation(cuda, a);
    else throw std::invalid_argument("emit_gpu_trace: unknown report " + kind);
    return true;
  }, "Tests: report (kind, event or stream, stream) to the active GPU trace as torch's CUDA code does: record, wait, "
     "destroy, create (a: event, b: stream), sync_event (a: event), sync_stream (a: stream), sync_device, "
     "alloc and free (a: block), as the caching allocator does");
  m.def("register_test_ops", &register_test_ops,
        "Tests: define streamcheck_test::fresh_like and ::free_during (CPU), which report an allocation or a free to "
        "the GPU trace from inside the op, as the caching allocator does inside a CUDA op");
  m.def("set_collective_callbacks", &set_collective_callbacks,
        "Collectives and record_stream in C++ while the fast path runs (collectives.h): (comm_actor, alias_handle, "
        "handle_actor), or (None, None, None) to keep them in Python");
  m.def("collectives_in_cpp", []() { return kCollectivesInCpp; });
  m.def("take_work", &take_work, "Work.wait(): (key, device) of a Work launched through collectives.h, else None");
  m.def("set_collective_probe", [](py::object probe) {
    CollectiveState& c = collective_state();
    Py_XDECREF(c.probe);
    c.probe = probe.is_none() ? nullptr : probe.release().ptr();
  }, "Tests: call this inside every collective after the op ran, where NCCL's GPU-trace reports fire");
  m.def("set_capturing_graph", [](bool on) { capturing_graph = on; }, "This thread captures a CUDA graph");
  m.def("set_cpu_as_device", [](bool on) { state().cpu_as_device = on; }, "Tests: CPU tensors as device 0 tensors");
  m.def("set_test_stream", [](int64_t stream) { test_stream = stream; }, "Tests: this thread's current stream");
}
