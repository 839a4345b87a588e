// c10d collectives and record_stream decided in C++ while the fast path runs: instrument/collectives.py's model
// (and dispatch.py's report_record_stream) without converting the op's arguments to Python objects.
//
// A collective is an access by its group's NCCL stream ("nccl:<group>/<device>", named by Python once per group
// and device) launched from the calling thread's current stream; its argument roles come from op_table.py
// (`collective_roles`, the table collectives.py reads too). The Work it returns is keyed by the C++ Work object's
// address and held weakly here: `Work.wait()` (wrapped in Python) asks `take_work` for its key; a Work that died
// unwaited is forgotten by the detector at the next collective. The GPU trace's reports fired inside the
// collective (its stream's wait for the launching stream, the work's end event, a future's event) are held back
// (gpu_trace.h) and replayed after the collective's own event, a record or wait on a stream other than the
// launching one being the comm actor's, as collectives.py's `_on_comm_stream` ties it (the raw handle is aliased
// to the comm actor from then on).
//
// Python is entered for a group seen for the first time, a stream or thread seen for the first time, a site only
// Python can blame, and a race to deliver. The Python path (hook.cpp run_special) stays for a trace being written,
// the Python detector, a CUDA graph being captured, and a torch whose c10d headers this does not build against
// (STREAMCHECK_NO_CPP_COLLECTIVES).
#pragma once

#include <torch/extension.h>

#include <optional>
#include <unordered_map>
#include <vector>

// Needs the GPU trace's reports in C++ (gpu_trace.h holds them back inside the collective) and c10d's headers
#if !defined(STREAMCHECK_NO_CPP_COLLECTIVES) && !defined(STREAMCHECK_NO_MEMORY_REPORTS)
#define STREAMCHECK_CPP_COLLECTIVES 1
#include <torch/csrc/distributed/c10d/Work.hpp>
#endif

#include "fast_path.h"
#include "gpu_trace.h"
#include "memory.h"
#include "sites.h"
#include "state.h"

namespace streamcheck_native {

int64_t current_stream(int device);            // hook.cpp
void report_error(const std::string& message);  // hook.cpp: switches instrumentation off

#ifdef STREAMCHECK_CPP_COLLECTIVES
constexpr bool kCollectivesInCpp = true;
#else
constexpr bool kCollectivesInCpp = false;
#endif

struct CollectiveState {
  PyObject* comm_actor = nullptr;    // (group or None, device) -> comm actor; names it (NativeHooks.comm_actor)
  PyObject* alias_handle = nullptr;  // (handle, comm actor) -> None: Recorder.alias_stream of that handle
  PyObject* handle_actor = nullptr;  // (handle) -> actor: Recorder.stream_actor_of_handle
  PyObject* probe = nullptr;         // tests: called inside every collective, after the op ran (both paths)
  // (group object, device) -> comm actor; the group is held weakly: a dead group's address may come back
  struct Comm {
    std::optional<c10::weak_intrusive_ptr<c10::intrusive_ptr_target>> group;  // none: called without a group
    int actor;
  };
  std::unordered_map<uintptr_t, std::vector<std::pair<int, Comm>>> comms;
#ifdef STREAMCHECK_CPP_COLLECTIVES
  struct Pending {
    c10::weak_intrusive_ptr<torch::CustomClassHolder> work;  // the C++ Work (any custom class object it returns)
    int device;
  };
  std::unordered_map<uintptr_t, Pending> works;  // launched, not waited yet
#endif
};

inline CollectiveState& collective_state() {
  static CollectiveState* c = new CollectiveState();  // never destroyed, like state()
  return *c;
}


inline void reset_collectives() {  // GIL held: the fast path was attached or detached
  CollectiveState& c = collective_state();
  c.comms.clear();
#ifdef STREAMCHECK_CPP_COLLECTIVES
  c.works.clear();
#endif
}

inline void call_probe() {
  CollectiveState& c = collective_state();
  if (c.probe == nullptr) return;
  py::gil_scoped_acquire gil;
  py::reinterpret_borrow<py::object>(c.probe)();
}

// The tensors of one argument: a tensor, a list of them, a list of lists (allgather_'s outputs).
template <class F>
void for_each_nested_tensor(const c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    f(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) for_each_nested_tensor(item, f);
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) f(t);
  }
}

// GIL held. The actor of the calling thread's current stream on `device` (Python names a new one), -1: failed.
inline int stream_actor_id(FastPath& f, Detector* d, int device, int64_t handle) {
  auto key = std::make_pair(device, handle);
  auto found = f.stream_ids.find(key);
  if (found != f.stream_ids.end()) return found->second;
  std::string name = call_for_name(f.stream_actor, py::make_tuple(device, handle));
  if (name.empty()) return -1;
  int id = d->actor_id(name);
  f.stream_ids.emplace(key, id);
  if (handle != 0) f.stream_of_handle[handle] = id;
  return id;
}

// GIL held. A report fired inside the collective, replayed after its event (collectives.py _on_comm_stream).
inline void replay_report(FastPath& f, Detector* d, int thread, const TraceReport& r, int64_t launch_handle,
                          int launch_actor, int comm, const std::vector<int>& created) {
  CollectiveState& c = collective_state();
  auto named = [&](uint64_t handle) {  // the actor Python would name for a raw handle now
    int known = stream_of_handle(f, static_cast<uintptr_t>(handle));
    if (known >= 0) return known;
    return d->actor_id(call_for_name(c.handle_actor, py::make_tuple(handle)));
  };
  switch (r.kind) {
    case 'r':
    case 'w': {
      int actor;
      if (launch_actor >= 0 && static_cast<int64_t>(r.b) == launch_handle) {
        actor = launch_actor;
      } else {
        actor = named(r.b);
        if (comm >= 0 && actor != comm && d->actor_name(actor).rfind("cuda:", 0) == 0) {
          // the group's internal stream: its handle is the comm actor from now on, here and in Python
          py::reinterpret_borrow<py::object>(c.alias_handle)(r.b, d->actor_name(comm));
          int device = -1;
          for (const auto& entry : f.stream_ids) {
            if (entry.second == actor) device = entry.first.first;
          }
          if (r.b != 0) f.stream_of_handle[static_cast<int64_t>(r.b)] = comm;
          if (device >= 0) f.stream_ids[std::make_pair(device, static_cast<int64_t>(r.b))] = comm;
          actor = comm;
        }
      }
      if (r.kind == 'r') d->event_record(thread, r.a, actor);
      else d->event_wait(thread, r.a, actor);
      break;
    }
    case 'd': d->event_destroy(r.a); break;
    case 'e': d->sync_event(thread, r.a); break;
    case 's': d->sync_stream(thread, named(r.a)); break;
    case 'D': d->sync_device(thread, static_cast<int>(r.a)); break;
    case 'c': d->stream_created(thread, created.at(static_cast<size_t>(r.b))); break;
    default: break;
  }
}

// GIL held. Every report held back inside the collective, in order. Stream creations are named first, as Python
// names them when they fire (before this collective aliases any handle).
inline void replay_reports(FastPath& f, Detector* d, int thread, std::vector<TraceReport>& reports,
                           int64_t launch_handle, int launch_actor, int comm) {
  if (reports.empty()) return;
  CollectiveState& c = collective_state();
  std::vector<int> created;
  for (TraceReport& r : reports) {
    if (r.kind != 'c') continue;
    int known = stream_of_handle(f, static_cast<uintptr_t>(r.a));
    r.b = created.size();
    created.push_back(known >= 0 ? known : d->actor_id(call_for_name(c.handle_actor, py::make_tuple(r.a))));
  }
  for (const TraceReport& r : reports) replay_report(f, d, thread, r, launch_handle, launch_actor, comm, created);
}

struct ReportsHeldBack {  // the GPU trace's reports on this thread go to `reports` while it lives (gpu_trace.h)
  std::vector<TraceReport>* outer;
  explicit ReportsHeldBack(std::vector<TraceReport>* reports) : outer(held_reports) { held_reports = reports; }
  ~ReportsHeldBack() { held_reports = outer; }
};

inline bool collectives_in_cpp() {
  FastPath& f = fast_path();
  return kCollectivesInCpp && f.detector != nullptr && !capturing_graph && collective_state().comm_actor != nullptr;
}

#ifdef STREAMCHECK_CPP_COLLECTIVES
// GIL held. The comm actor of `group` (an IValue argument, or none) on `device`, named by Python the first time.
inline int comm_actor_id(Detector* d, const c10::IValue* group, int device) {
  CollectiveState& c = collective_state();
  c10::intrusive_ptr_target* target = nullptr;
  if (group != nullptr && group->isObject()) {
    const c10::IValue& slot = group->toObjectRef().getSlot(0);
    if (slot.isCapsule()) target = slot.toCapsule().get();
  }
  auto key = reinterpret_cast<uintptr_t>(target);
  auto& entries = c.comms[key];
  for (auto& entry : entries) {
    const auto& held = entry.second.group;
    if (entry.first == device && (!held.has_value() || !held->expired())) return entry.second.actor;
  }
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [device](const auto& e) { return e.first == device; }),
                entries.end());
  py::object py_group = group != nullptr ? torch::jit::toPyObject(*group) : py::object(py::none());
  std::string name = call_for_name(c.comm_actor, py::make_tuple(py_group, device));
  if (name.empty()) return -1;
  CollectiveState::Comm comm{std::nullopt, d->actor_id(name)};
  if (target != nullptr) {
    comm.group.emplace(c10::intrusive_ptr<c10::intrusive_ptr_target>::reclaim_copy(target));
  }
  entries.emplace_back(device, std::move(comm));
  return entries.back().second.actor;
}

// A Work's key: the address of its C++ object as a custom class holder (one address, from either side)
inline uintptr_t work_key(const torch::CustomClassHolder* work) { return reinterpret_cast<uintptr_t>(work); }

// GIL held. Works that died unwaited: nothing can wait for them any more, so their clocks go (collectives.py
// _dropped, told at the next collective as there).
inline void forget_dropped_works(Detector* d) {
  CollectiveState& c = collective_state();
  for (auto it = c.works.begin(); it != c.works.end();) {
    if (it->second.work.expired()) {
      d->forget_work(it->first);
      it = c.works.erase(it);
    } else {
      ++it;
    }
  }
}

// The collective the Python way would report (collectives.py before / after), decided here. GIL not held. An error
// of ours switches instrumentation off (report_error); the op's own exception and a RaceError reach the program.
inline void run_collective(const Plan& plan, const c10::OperatorHandle& op, c10::DispatchKeySet rest,
                           torch::jit::Stack* stack) {
  FastPath& f = fast_path();
  static thread_local std::vector<Range3> reads, writes;  // one collective at a time per thread
  reads.clear();
  writes.clear();
  int device = -1;
  bool async_op = true;
  c10::IValue group;
  bool has_group = false;
  int64_t site = -1;
  bool attached = false;
  try {
    size_t n = plan.roles.size();
    size_t first = stack->size() - n;
    for (size_t i = 0; i < n; ++i) {
      Role role = plan.roles[i];
      const c10::IValue& value = (*stack)[first + i];
      if (static_cast<int>(i) == plan.group_arg) {
        group = value;
        has_group = true;
      } else if (static_cast<int>(i) == plan.async_arg) {
        async_op = value.isBool() ? value.toBool() : value.isInt() ? value.toInt() != 0 : true;  // None: async
      } else if (role == Role::Read || role == Role::Write) {
        for_each_nested_tensor(value, [&](const at::Tensor& t) {
          Range r;
          if (!range_of(t, false, r)) return;
          if (r.device >= 0 && device < 0) device = r.device;
          (role == Role::Read ? reads : writes).push_back({static_cast<uint64_t>(r.base), r.start, r.end});
        });
      }
    }
    py::gil_scoped_acquire gil;
    py::object keep = py::reinterpret_borrow<py::object>(f.owner);
    attached = f.detector != nullptr;  // false: detached meanwhile (the watch stopped on another thread)
    if (attached) {
      forget_dropped_works(f.detector);
      site = site_of_op();
      if (f.in_backward && site < 0) site = f.backward_site;  // no frame of the program: the backward() call
      if (site == -2) site = py::reinterpret_borrow<py::object>(f.capture_site)().cast<int64_t>();
    }
  } catch (const std::exception& e) {
    report_error(std::string("native hook, before ") + op.schema().name() + ": " + e.what());
    attached = false;
  }
  if (!attached) {
    op.redispatchBoxed(rest, stack);
    return;
  }
  std::vector<TraceReport> reports;
  try {
    SpecialScope in_special;
    ReportsHeldBack held(&reports);
    STAGE_SCOPE(kSpecialOp);
    op.redispatchBoxed(rest, stack);
    call_probe();
  } catch (...) {
    // the collective failed: what it reported still happened (collectives.py replays it, streams unrenamed)
    try {
      py::gil_scoped_acquire gil;
      py::object keep = py::reinterpret_borrow<py::object>(f.owner);
      int thread = f.detector != nullptr ? current_thread_actor(f, f.detector) : -1;
      if (thread >= 0) replay_reports(f, f.detector, thread, reports, 0, -1, -1);
    } catch (...) {
    }
    throw;
  }
  try {
    int64_t launch_handle = device >= 0 ? current_stream(device) : 0;
    py::gil_scoped_acquire gil;
    py::object keep = py::reinterpret_borrow<py::object>(f.owner);
    Detector* d = f.detector;
    if (d == nullptr || !state().active.load(std::memory_order_relaxed)) return;
    int thread = current_thread_actor(f, d);
    if (thread < 0) return;
    int stream = -1, comm = -1;
    if (device >= 0) {
      stream = stream_actor_id(f, d, device, launch_handle);
      comm = comm_actor_id(d, has_group ? &group : nullptr, device);
      if (stream < 0 || comm < 0) return;
      const c10::IValue& out = stack->back();
      uintptr_t work = 0;
      if (out.isObject() && out.toObjectRef().slots().size() == 1 && out.toObjectRef().getSlot(0).isCapsule()) {
        c10::intrusive_ptr<torch::CustomClassHolder> held = out.toObjectRef().getSlot(0).toCapsule();
        work = work_key(held.get());
        CollectiveState& c = collective_state();
        if (c.works.size() >= kMaxPendingWorks) c.works.erase(c.works.begin());
        c.works.insert_or_assign(
            work, CollectiveState::Pending{c10::weak_intrusive_ptr<torch::CustomClassHolder>(held), device});
      }
      if (plan.index >= static_cast<int>(f.op_ids.size())) f.op_ids.resize(plan.index + 1, -1);
      int& op_id = f.op_ids[plan.index];
      if (op_id < 0) {
        std::string name;
        {
          std::lock_guard<std::mutex> lock(state().mutex);
          name = state().names.at(static_cast<size_t>(plan.index)).first;
        }
        op_id = d->op_id(name);
      }
      d->collective(thread, stream, comm, reads, writes, async_op, work != 0, work, site, op_id);
      // ProcessGroupNCCL keeps the collective's blocks from reuse until its stream is done with them
      std::vector<uint64_t> bases;
      for (const auto* ranges : {&reads, &writes}) {
        for (const Range3& r : *ranges) {
          if (std::find(bases.begin(), bases.end(), r.storage) == bases.end()) bases.push_back(r.storage);
        }
      }
      for (uint64_t base : bases) d->record_stream(base, comm);
    }
    replay_reports(f, d, thread, reports, launch_handle, stream, comm);
    if (!d->races.empty() && f.deliver != nullptr) py::reinterpret_borrow<py::object>(f.deliver)();
  } catch (const py::error_already_set&) {
    throw;  // a RaceError from fail-fast mode
  } catch (const std::exception& e) {
    report_error(std::string("native hook, after ") + op.schema().name() + ": " + e.what());
  }
}

// `tensor.record_stream(stream)` (dispatch.py report_record_stream), then the op. GIL not held.
inline void run_record_stream(const c10::OperatorHandle& op, c10::DispatchKeySet rest, torch::jit::Stack* stack) {
  FastPath& f = fast_path();
  try {
    const c10::IValue& tensor = (*stack)[stack->size() - 2];
    const c10::IValue& stream_arg = (*stack)[stack->size() - 1];
    Range r;
    if (tensor.isTensor() && stream_arg.isStream() && range_of(tensor.toTensor(), false, r) && r.device >= 0) {
      c10::Stream stream = stream_arg.toStream();
      bool cuda = stream.device_type() == c10::DeviceType::CUDA;
      // tests: a CPU stream stands for a stream of device 0, its id for the raw handle
      int64_t handle = cuda ? static_cast<int64_t>(reinterpret_cast<intptr_t>(stream.native_handle())) : stream.id();
      int device = cuda ? stream.device_index() : 0;
      py::gil_scoped_acquire gil;
      py::object keep = py::reinterpret_borrow<py::object>(f.owner);
      Detector* d = f.detector;
      if (d != nullptr) {
        int actor = stream_actor_id(f, d, device, handle);
        if (actor >= 0) d->record_stream(static_cast<uint64_t>(r.base), actor);
      }
    }
  } catch (const std::exception& e) {
    report_error(std::string("native hook, record_stream: ") + e.what());
  }
  op.redispatchBoxed(rest, stack);
}

// GIL held. `Work.wait()` in Python: (key, device) of a Work this launched and nobody waited yet (then forgotten
// here), else None.
inline py::object take_work(const py::handle& work) {
  c10d::Work* ptr = work.cast<c10d::Work*>();  // the Python Work wraps the C++ one the collective returned
  CollectiveState& c = collective_state();
  auto found = c.works.find(work_key(ptr));
  if (found == c.works.end() || found->second.work.expired()) return py::none();
  py::object out = py::make_tuple(static_cast<uint64_t>(found->first), found->second.device);
  c.works.erase(found);
  return out;
}
#else
inline void run_collective(const Plan&, const c10::OperatorHandle& op, c10::DispatchKeySet rest,
                           torch::jit::Stack* stack) {
  op.redispatchBoxed(rest, stack);
}
inline void run_record_stream(const c10::OperatorHandle& op, c10::DispatchKeySet rest, torch::jit::Stack* stack) {
  op.redispatchBoxed(rest, stack);
}
inline py::object take_work(const py::handle&) { return py::none(); }
#endif

inline void set_collective_callbacks(py::object comm_actor, py::object alias_handle, py::object handle_actor) {
  CollectiveState& c = collective_state();
  for (PyObject** slot : {&c.comm_actor, &c.alias_handle, &c.handle_actor}) {
    Py_XDECREF(*slot);
    *slot = nullptr;
  }
  reset_collectives();
  if (comm_actor.is_none()) return;
  c.comm_actor = comm_actor.release().ptr();
  c.alias_handle = alias_handle.release().ptr();
  c.handle_actor = handle_actor.release().ptr();
}

}  // namespace streamcheck_native
