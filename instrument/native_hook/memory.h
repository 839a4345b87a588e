// Tensors as byte ranges of their storage; pinned or pageable host memory; ranges handed to Python.
#pragma once

#include <ATen/Context.h>

#include "state.h"

namespace streamcheck_native {

// Pinned or pageable, told by the block's deleter where possible: the CPU allocator's is learnt from a tensor at
// install, the pinned host allocator's from the first pinned block the runtime confirms (making a pinned tensor at
// install would create a CUDA context before the program picked its device). Others are asked, per address.
inline bool is_pinned(const c10::Storage& storage, uintptr_t base, bool fresh) {
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

// Where a tensor lives (storage base, device) or false for tensors streamcheck does not track (empty, meta, sparse,
// pageable host memory, wrapper subclasses without storage): range_of's first half, all a view's return needs when
// it shares its input's storage (hook.cpp).
inline bool locate(const at::Tensor& t, bool fresh, Range& out) {
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
  out.base = base;
  return true;
}

// range_of's second half, after locate(t, ...) said true: the bytes the tensor can touch in its storage.
inline void extent(const at::Tensor& t, Range& out) {
  int64_t numel = t.numel();
  int64_t size = t.element_size();
  int64_t start = t.storage_offset() * size;
  int64_t span = numel;
  if (!t.is_contiguous()) {
    span = 1;
    auto sizes = t.sizes();
    auto strides = t.strides();
    for (size_t d = 0; d < sizes.size(); ++d) span += (sizes[d] - 1) * strides[d];
  }
  out.start = start;
  out.end = start + span * size;
  out.storage_bytes = static_cast<int64_t>(t.storage().nbytes());
}

// The bytes a tensor can touch, as (storage base, start, end); false for tensors streamcheck does not track.
inline bool range_of(const at::Tensor& t, bool fresh, Range& out) {
  if (!locate(t, fresh, out)) return false;
  extent(t, out);
  return true;
}

template <typename F>
inline void for_each_tensor(const c10::IValue& value, F&& f) {
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

inline py::list to_py(const std::vector<Range>& ranges) {
  py::list out(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    out[i] = py::make_tuple(static_cast<uint64_t>(r.base), r.start, r.end);
  }
  return out;
}

inline py::object fresh_to_py(const std::vector<Range>& ranges) {
  if (ranges.empty()) return py::none();
  py::list out(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    out[i] = py::make_tuple(static_cast<uint64_t>(r.base), r.start, r.end, r.storage_bytes, r.device >= 0);
  }
  return out;
}

}  // namespace streamcheck_native
