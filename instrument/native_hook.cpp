// streamcheck's native per-op hook: what instrument/dispatch.py's TorchDispatchMode does, without a Python mode.
//
// A Python TorchDispatchMode costs about 1.5x on a launch-bound training step before it does any work of its own:
// every op converts its arguments to Python objects, calls __torch_dispatch__, and parses them again to run. This
// hook is a boxed C++ fallback on one dispatch key that the watched threads put in their thread-local "included"
// set (the autograd engine's threads inherit it, like a mode). Per op it reads the operator's read/write plan
// (built once from the schema's alias annotations, the same rules as dispatch.py), turns the tensors into byte
// ranges, runs the op, and makes one Python call with plain integers. Ops that touch no CUDA or pinned memory
// never reach Python.
//
// The key, TESTING_ONLY_GenericMode, has no kernels and no fallback in PyTorch itself; it sits above autograd, so
// composite ops (linear, reshape) are seen once, before they decompose: streamcheck's own key is excluded while an
// op runs. A return the schema says aliases its input but that lives in another storage (reshape or contiguous
// that had to copy) counts as a read of the input and a fresh write.
#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

constexpr c10::DispatchKey kHookKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

enum class Kind : uint8_t { Skip, Access, Python };
enum class Role : uint8_t { None, Read, Write, View };

struct Plan {
  Kind kind = Kind::Skip;
  int index = -1;              // position in the names list Python reads
  std::vector<Role> roles;     // per argument
  std::vector<uint8_t> fresh;  // per return: a tensor the op newly wrote
  std::vector<int> view_of;    // per return: the argument it may alias (-1: none)
  bool has_views = false;
};

// In-place by schema, but only metadata (or the allocator's bookkeeping) changes. Same list as dispatch.py.
const std::unordered_set<std::string> kMetadataOnly = {
    "aten::set_", "aten::resize_", "aten::resize_as_", "aten::as_strided_", "aten::squeeze_",
    "aten::unsqueeze_", "aten::transpose_", "aten::t_", "aten::swapdims_", "aten::swapaxes_", "aten::detach_",
    "aten::is_pinned", "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset",
    "aten::size", "aten::stride", "aten::numel", "aten::dim", "aten::is_contiguous", "aten::is_same_size",
    "aten::_has_compatible_shallow_copy_type", "aten::is_nonzero_"};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool is_factory_like(const std::string& name) {
  if (!starts_with(name, "aten::")) return false;
  return (name.size() > 5 && name.compare(name.size() - 5, 5, "_like") == 0) || starts_with(name, "aten::new_");
}

bool holds_tensor(const c10::TypePtr& type) { return type->str().find("Tensor") != std::string::npos; }

struct State {
  std::mutex mutex;  // plans, names, pinned
  std::unordered_map<const c10::FunctionSchema*, Plan> plans;
  std::vector<std::pair<std::string, std::string>> names;  // (qualified name, overload)
  std::unordered_map<uintptr_t, bool> pinned;
  // Python callables; owned references that are never released (they must outlive interpreter teardown).
  PyObject* on_access = nullptr;   // (op, device, stream, reads, writes, fresh) -> None
  PyObject* on_special = nullptr;  // (op, args) -> state, before a c10d op or record_stream
  PyObject* after_special = nullptr;  // (state, outputs) -> None
  PyObject* on_error = nullptr;    // (message) -> None
  // Call sites (GIL held for all of these): see capture_site.
  PyObject* classify_code = nullptr;  // (code) -> bool: lies in torch or streamcheck (sites.SiteTable._classify)
  PyObject* intern_site = nullptr;    // ([(code, lasti), ...]) -> site id (sites.SiteTable.intern_chain)
  int site_depth = 8;
  std::unordered_map<PyCodeObject*, bool> internal_code;  // each code object held by a reference
  std::unordered_map<std::string, int64_t> site_ids;
  c10::DeleterFnPtr cpu_deleter = nullptr;
  c10::DeleterFnPtr pinned_deleter = nullptr;
  std::atomic<bool> active{false};
  bool cpu_as_device = false;  // tests: CPU tensors stand for device 0 tensors on the thread's test stream
};

State& state() {
  static State* s = new State();  // never destroyed: ops may run during interpreter shutdown
  return *s;
}

thread_local int op_depth = 0;           // > 0 while this thread runs an op under the hook
thread_local bool callbacks_held = false;  // Python held back a callback fired inside the current op
thread_local int64_t test_stream = 0;

Plan build_plan(const c10::FunctionSchema& schema) {
  Plan plan;
  const std::string& name = schema.name();
  if (name == "aten::record_stream" || starts_with(name, "c10d::")) {
    plan.kind = Kind::Python;
    return plan;
  }
  if (kMetadataOnly.count(name)) return plan;
  bool factory = is_factory_like(name);
  bool any = false;
  int first_view = -1;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& arg = schema.arguments()[i];
    Role role = Role::None;
    if (holds_tensor(arg.type())) {
      const auto* alias = arg.alias_info();
      if (alias != nullptr && alias->isWrite()) {
        role = Role::Write;
      } else if (alias != nullptr) {
        role = Role::View;
        if (first_view < 0) first_view = static_cast<int>(i);
      } else if (!factory) {
        role = Role::Read;
      }
    }
    if (role == Role::Read || role == Role::Write) any = true;
    plan.roles.push_back(role);
  }
  for (const auto& ret : schema.returns()) {
    bool tensor = holds_tensor(ret.type());
    const auto* alias = ret.alias_info();
    plan.fresh.push_back(tensor && alias == nullptr);
    int view = (tensor && alias != nullptr && !alias->isWrite()) ? first_view : -1;
    plan.view_of.push_back(view);
    if (plan.fresh.back()) any = true;
    if (view >= 0) plan.has_views = any = true;
  }
  plan.kind = any ? Kind::Access : Kind::Skip;
  return plan;
}

Plan& plan_for(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto found = s.plans.find(key);
  if (found != s.plans.end()) return found->second;
  Plan plan = build_plan(*key);
  plan.index = static_cast<int>(s.names.size());
  s.names.emplace_back(key->name(), key->overload_name());
  return s.plans.emplace(key, std::move(plan)).first->second;
}

struct Range {
  uintptr_t base;
  int64_t start, end;
  int64_t storage_bytes;
  int device;  // >= 0: a device tensor; -1: pinned host memory
};

// Pinned or pageable, told by the block's deleter where possible: the CPU allocator's is learnt from a tensor at
// install, the pinned host allocator's from the first pinned block the runtime confirms (making a pinned tensor at
// install would create a CUDA context before the program picked its device). Others are asked, per address.
bool is_pinned(const c10::Storage& storage, uintptr_t base, bool fresh) {
  State& s = state();
  c10::DeleterFnPtr deleter = storage.data_ptr().get_deleter();
  if (deleter != nullptr && deleter == s.cpu_deleter) return false;
  if (deleter != nullptr && deleter == s.pinned_deleter) return true;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto found = s.pinned.find(base);
    if (!fresh && found != s.pinned.end()) return found->second;
  }
  bool pinned = false;
  try {
    pinned = at::globalContext().isPinnedPtr(reinterpret_cast<void*>(base));
  } catch (const std::exception&) {
    pinned = false;
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.pinned.size() > (1u << 16)) s.pinned.clear();  // a bound: addresses of freed host memory pile up
  s.pinned[base] = pinned;
  // The first pinned block seen names the pinned allocator's deleter: later ones are told without asking.
  if (pinned && s.pinned_deleter == nullptr && deleter != nullptr && deleter != s.cpu_deleter) {
    s.pinned_deleter = deleter;
  }
  return pinned;
}

// The bytes a tensor can touch, as (storage base, start, end); false for tensors streamcheck does not track
// (empty, meta, sparse, pageable host memory, wrapper subclasses without storage).
bool range_of(const at::Tensor& t, bool fresh, Range& out) {
  if (!t.defined() || !t.has_storage() || t.unsafeGetTensorImpl()->is_wrapped_number()) return false;
  int64_t numel = t.numel();
  if (numel == 0) return false;
  const c10::Storage& storage = t.storage();
  const void* data = storage.data();
  if (data == nullptr) return false;
  auto base = reinterpret_cast<uintptr_t>(data);
  c10::DeviceType type = t.device().type();
  if (type == c10::DeviceType::CUDA) {
    out.device = t.device().index();
  } else if (type == c10::DeviceType::CPU) {
    if (state().cpu_as_device) {
      out.device = 0;
    } else if (is_pinned(storage, base, fresh)) {
      out.device = -1;
    } else {
      return false;
    }
  } else {
    return false;
  }
  int64_t size = t.element_size();
  int64_t start = t.storage_offset() * size;
  int64_t span = numel;
  if (!t.is_contiguous()) {
    span = 1;
    auto sizes = t.sizes();
    auto strides = t.strides();
    for (size_t d = 0; d < sizes.size(); ++d) span += (sizes[d] - 1) * strides[d];
  }
  out.base = base;
  out.start = start;
  out.end = start + span * size;
  out.storage_bytes = static_cast<int64_t>(storage.nbytes());
  return true;
}

template <typename F>
void for_each_tensor(const c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    f(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList().vec()) f(t);
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      if (item.isTensor()) f(item.toTensor());
    }
  }
}

struct OpAccesses {
  std::vector<Range> reads, writes, fresh;
  int device = -1;  // the first device tensor's device
  void add(std::vector<Range>& into, const Range& r) {
    if (r.device >= 0 && device < 0) device = r.device;
    into.push_back(r);
  }
};

py::list to_py(const std::vector<Range>& ranges) {
  py::list out(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    out[i] = py::make_tuple(static_cast<uint64_t>(r.base), r.start, r.end);
  }
  return out;
}

py::object fresh_to_py(const std::vector<Range>& ranges) {
  if (ranges.empty()) return py::none();
  py::list out(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    out[i] = py::make_tuple(static_cast<uint64_t>(r.base), r.start, r.end, r.storage_bytes, r.device >= 0);
  }
  return out;
}


#if PY_VERSION_HEX >= 0x030B0000
constexpr bool kSitesInCpp = true;

bool is_internal(PyCodeObject* code) {
  State& s = state();
  auto found = s.internal_code.find(code);
  if (found != s.internal_code.end()) return found->second;
  py::object answer = py::reinterpret_borrow<py::object>(s.classify_code)(py::handle(reinterpret_cast<PyObject*>(code)));
  bool internal = answer.cast<bool>();
  Py_INCREF(code);  // the pointer is the key: the object must not die and be replaced by another at that address
  s.internal_code.emplace(code, internal);
  return internal;
}

// The site of the running op, as sites.SiteTable.capture computes it: the first Python frame outside torch and
// streamcheck and `site_depth` frames from it up, keyed by (code object, bytecode offset) pairs. GIL held.
int64_t capture_site() {
  State& s = state();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed; null on a thread without Python frames (autograd engine)
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    bool internal = is_internal(code);
    Py_DECREF(code);
    if (!internal) break;
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  if (frame == nullptr) return -1;
  uintptr_t key[32];
  PyCodeObject* codes[16];
  int lastis[16];
  int n = 0;
  int depth = std::min(s.site_depth, 16);
  while (frame != nullptr && n < depth) {
    codes[n] = PyFrame_GetCode(frame);
    lastis[n] = PyFrame_GetLasti(frame);
    key[2 * n] = reinterpret_cast<uintptr_t>(codes[n]);
    key[2 * n + 1] = static_cast<uintptr_t>(lastis[n]);
    ++n;
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  std::string bytes(reinterpret_cast<const char*>(key), sizeof(uintptr_t) * 2 * n);
  int64_t site = -1;
  auto found = s.site_ids.find(bytes);
  if (found != s.site_ids.end()) {
    site = found->second;
  } else {
    py::list chain(n);
    for (int i = 0; i < n; ++i) {
      chain[i] = py::make_tuple(py::handle(reinterpret_cast<PyObject*>(codes[i])), lastis[i]);
    }
    site = py::reinterpret_borrow<py::object>(s.intern_site)(chain).cast<int64_t>();
    s.site_ids.emplace(std::move(bytes), site);  // the Python table keeps the code objects alive
  }
  for (int i = 0; i < n; ++i) Py_DECREF(codes[i]);
  return site;
}
#else
constexpr bool kSitesInCpp = false;
int64_t capture_site() { return -2; }
#endif

int64_t site_of_op() {  // -2: "capture it in Python" (no site table given, or Python < 3.11)
  if (!kSitesInCpp || state().intern_site == nullptr) return -2;
  return capture_site();
}

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

struct OpScope {  // marks "inside an op" for callbacks fired while it runs
  OpScope() { ++op_depth; }
  ~OpScope() { --op_depth; }
};

void run_special(const Plan& plan, const c10::OperatorHandle& op, c10::DispatchKeySet rest, torch::jit::Stack* stack) {
  State& s = state();
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

void hook(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);  // the op's inner ops, and our own Python, go unseen
  c10::DispatchKeySet rest = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kHookKey);
  State& s = state();
  if (!s.active.load(std::memory_order_relaxed)) {
    op.redispatchBoxed(rest, stack);
    return;
  }
  const Plan* plan = nullptr;
  OpAccesses acc;
  std::vector<std::pair<int, Range>> view_inputs;  // (argument, range) of arguments a return may alias
  try {
    plan = &plan_for(op);
    if (plan->kind == Kind::Python) {
      run_special(*plan, op, rest, stack);
      return;
    }
    if (plan->kind == Kind::Access) {
      size_t n = plan->roles.size();
      size_t first = stack->size() - n;
      for (size_t i = 0; i < n; ++i) {
        Role role = plan->roles[i];
        if (role == Role::None || (role == Role::View && !plan->has_views)) continue;
        for_each_tensor((*stack)[first + i], [&](const at::Tensor& t) {
          Range r;
          if (!range_of(t, false, r)) return;
          if (role == Role::Read) acc.add(acc.reads, r);
          else if (role == Role::Write) acc.add(acc.writes, r);
          else view_inputs.emplace_back(static_cast<int>(i), r);
        });
      }
    }
  } catch (const py::error_already_set&) {
    throw;  // a RaceError from fail-fast mode: the program sees it
  } catch (const std::exception& e) {
    report_error(std::string("native hook, before ") + op.schema().name() + ": " + e.what());
    plan = nullptr;
  }
  if (plan == nullptr || plan->kind == Kind::Python) {
    if (plan == nullptr) op.redispatchBoxed(rest, stack);
    return;
  }
  {
    OpScope in_op;
    try {
      op.redispatchBoxed(rest, stack);
    } catch (...) {
      if (callbacks_held) {  // the callbacks it fired before failing still happened
        callbacks_held = false;
        py::gil_scoped_acquire gil;
        py::reinterpret_borrow<py::object>(s.on_access)(plan->index, -1, 0, py::list(), py::list(), py::none(), -1);
      }
      throw;
    }
  }
  bool held = callbacks_held;
  callbacks_held = false;
  if (plan->kind == Kind::Skip && !held) return;
  try {
    if (plan->kind == Kind::Access) {
      size_t m = plan->fresh.size();
      size_t first = stack->size() - m;
      for (size_t i = 0; i < m; ++i) {
        int view = plan->view_of[i];
        if (!plan->fresh[i] && view < 0) continue;
        for_each_tensor((*stack)[first + i], [&](const at::Tensor& t) {
          Range r;
          if (!range_of(t, true, r)) return;
          if (view >= 0) {
            for (const auto& input : view_inputs) {
              if (input.first != view) continue;
              if (input.second.base == r.base) return;  // a real view: no data moved
              acc.add(acc.reads, input.second);  // it copied: read the input, wrote a new tensor
            }
          }
          acc.add(acc.fresh, r);
        });
      }
    }
    if (acc.reads.empty() && acc.writes.empty() && acc.fresh.empty() && !held) return;
    int64_t stream = acc.device >= 0 ? current_stream(acc.device) : 0;
    py::gil_scoped_acquire gil;
    int64_t site = (acc.reads.empty() && acc.writes.empty() && acc.fresh.empty()) ? -1 : site_of_op();
    py::reinterpret_borrow<py::object>(s.on_access)(
        plan->index, acc.device, stream, to_py(acc.reads), to_py(acc.writes), fresh_to_py(acc.fresh), site);
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::exception& e) {
    report_error(std::string("native hook, after ") + op.schema().name() + ": " + e.what());
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

}  // namespace

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hook>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "streamcheck's per-op hook (see native_hook.cpp)";
  m.def("install", &install, "Set the Python callbacks: on_access, on_special, after_special, on_error");
  m.def("set_active", [](bool active) { state().active = active; });
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
  }, "Capture sites in C++ into a sites.SiteTable: its _classify and intern_chain, and its depth (None: in Python)");
  m.def("sites_in_cpp", []() { return kSitesInCpp; });
  m.def("watch_this_thread", [](bool on) { c10::impl::tls_set_dispatch_key_included(kHookKey, on); },
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
    Plan plan = build_plan(handle->schema());
    const char* kinds[] = {"skip", "access", "python"};
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
  m.def("set_cpu_as_device", [](bool on) { state().cpu_as_device = on; }, "Tests: CPU tensors as device 0 tensors");
  m.def("set_test_stream", [](int64_t stream) { test_stream = stream; }, "Tests: this thread's current stream");
}
