// Operator plans: which arguments an op reads and writes, read once per operator from its schema.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <unordered_set>

#include "state.h"

namespace streamcheck_native {

// In-place by schema, but only metadata (or the allocator's bookkeeping) changes. Same list as dispatch.py.
inline const std::unordered_set<std::string> kMetadataOnly = {
    "aten::set_", "aten::resize_", "aten::resize_as_", "aten::as_strided_", "aten::squeeze_",
    "aten::unsqueeze_", "aten::transpose_", "aten::t_", "aten::swapdims_", "aten::swapaxes_", "aten::detach_",
    "aten::is_pinned", "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset",
    "aten::size", "aten::stride", "aten::numel", "aten::dim", "aten::is_contiguous", "aten::is_same_size",
    "aten::_has_compatible_shallow_copy_type", "aten::is_nonzero_"};

inline bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

inline bool is_factory_like(const std::string& name) {
  if (!starts_with(name, "aten::")) return false;
  return (name.size() > 5 && name.compare(name.size() - 5, 5, "_like") == 0) || starts_with(name, "aten::new_");
}

inline bool holds_tensor(const c10::TypePtr& type) { return type->str().find("Tensor") != std::string::npos; }

inline Plan build_plan(const c10::FunctionSchema& schema) {
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

inline Plan& plan_for(const c10::OperatorHandle& op) {
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

}  // namespace streamcheck_native
