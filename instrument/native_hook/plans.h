// Operator plans: which arguments an op reads and writes, read once per operator.
//
// The roles come from Python (instrument/op_table.py, `roles_of_name`), the one table the dispatch mode reads too:
// schema alias annotations plus the arguments that give only metadata (view_as's other, *_like inputs, queries).
// C++ only turns them into a Plan and adds what the hook alone needs: which argument an aliasing return may alias
// (a reshape that had to copy is a read and a fresh write).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>

#include "state.h"

namespace streamcheck_native {

inline bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// GIL held. Throws std::runtime_error when the table cannot answer (the hook then reports it and switches off).
inline Plan build_plan(const c10::FunctionSchema& schema) {
  State& s = state();
  Plan plan;
  if (s.plan_source == nullptr) throw std::runtime_error("no operator table (native.load() sets it)");
  py::tuple answer;
  try {
    answer = py::reinterpret_borrow<py::object>(s.plan_source)(schema.name(), schema.overload_name());
  } catch (py::error_already_set& e) {  // never into the program: only a RaceError may reach it
    std::string what = e.what();
    e.restore();
    PyErr_Clear();
    throw std::runtime_error("operator table, " + schema.name() + ": " + what);
  }
  std::string kind = answer[0].cast<std::string>();
  py::sequence args = answer[1].cast<py::sequence>();
  if (kind == "record_stream") {
    plan.kind = Kind::RecordStream;
    return plan;
  }
  if (kind == "collective") {  // argument roles from op_table.collective_roles (collectives.h)
    plan.kind = Kind::Collective;
    for (size_t i = 0; i < args.size(); ++i) {
      std::string role = args[i].cast<std::string>();
      plan.roles.push_back(role == "read" ? Role::Read : role == "write" ? Role::Write : Role::None);
      if (role == "group") plan.group_arg = static_cast<int>(i);
      if (role == "async") plan.async_arg = static_cast<int>(i);
    }
    return plan;
  }
  py::sequence returns = answer[2].cast<py::sequence>();
  bool any = false;
  int first_view = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string role = args[i].cast<std::string>();
    Role r = role == "read" ? Role::Read : role == "write" ? Role::Write : role == "view" ? Role::View : Role::None;
    if (r == Role::View && first_view < 0) first_view = static_cast<int>(i);
    if (r == Role::Read || r == Role::Write) any = true;
    plan.roles.push_back(r);
  }
  for (size_t i = 0; i < returns.size(); ++i) {
    std::string role = returns[i].cast<std::string>();
    plan.fresh.push_back(role == "fresh");
    int view = role == "view" ? first_view : -1;
    plan.view_of.push_back(view);
    if (plan.fresh.back()) any = true;
    if (view >= 0) plan.has_views = any = true;
  }
  plan.kind = any ? Kind::Access : Kind::Skip;
  return plan;
}

inline Plan& table_plan(const c10::FunctionSchema* key) {  // the table itself: under the mutex
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto found = s.plans.find(key);
    if (found != s.plans.end()) return found->second;
  }
  Plan plan;
  {
    py::gil_scoped_acquire gil;  // before the mutex, never inside it: a thread holding the GIL may want the mutex
    plan = build_plan(*key);
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  auto found = s.plans.find(key);
  if (found != s.plans.end()) return found->second;  // another thread built it meanwhile
  plan.index = static_cast<int>(s.names.size());
  s.names.emplace_back(key->name(), key->overload_name());
  return s.plans.emplace(key, std::move(plan)).first->second;
}

// Every op asks: a direct-mapped cache per thread in front of the table (no lock, no hash). A plan's address stays
// while the table keeps it (an unordered_map's values do not move); a new table bumps `plans_generation`.
struct CachedPlan {
  const c10::FunctionSchema* key;
  Plan* plan;
  uint64_t generation;
};
// On the heap, not in the thread-local block itself: that block stays small enough for the static TLS surplus,
// where a TLS-descriptor build (native.py: -mtls-dialect=gnu2) reads every thread-local without a call.
static thread_local std::unique_ptr<CachedPlan[]> plan_cache;

inline Plan& plan_for(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  State& s = state();
  uint64_t generation = s.plans_generation.load(std::memory_order_acquire);
  CachedPlan* cache = plan_cache.get();
  if (cache == nullptr) {
    plan_cache.reset(new CachedPlan[256]());  // value-initialized: no key matches
    cache = plan_cache.get();
  }
  CachedPlan& slot = cache[(reinterpret_cast<uintptr_t>(key) >> 4) & 255];
  if (slot.key == key && slot.generation == generation && tuning().plan_cache) return *slot.plan;
  Plan& plan = table_plan(key);
  slot = {key, &plan, generation};
  return plan;
}

}  // namespace streamcheck_native
