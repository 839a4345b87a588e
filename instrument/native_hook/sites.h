// Call sites: the first Python frame outside torch and streamcheck, keyed as sites.SiteTable keys it.
#pragma once

#include <algorithm>

#include "state.h"

namespace streamcheck_native {

#if PY_VERSION_HEX >= 0x030B0000
constexpr bool kSitesInCpp = true;

inline bool is_internal(PyCodeObject* code) {
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
inline int64_t capture_site() {
  State& s = state();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed; null on a thread without Python frames (autograd engine)
  if (frame == nullptr) return -1;
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
  if (frame == nullptr) return -2;  // every frame in torch/streamcheck: Python blames the innermost library frame
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
  static thread_local std::string bytes;  // its capacity stays: no allocation per op
  bytes.assign(reinterpret_cast<const char*>(key), sizeof(uintptr_t) * 2 * n);
  int64_t site = -1;
  auto found = s.site_ids.find(bytes);
  if (found != s.site_ids.end()) {
    site = found->second;
  } else {
    std::string owned = bytes;  // the Python call below may capture a site on this thread again (a free under GC)
    py::list chain(n);
    for (int i = 0; i < n; ++i) {
      chain[i] = py::make_tuple(py::handle(reinterpret_cast<PyObject*>(codes[i])), lastis[i]);
    }
    site = py::reinterpret_borrow<py::object>(s.intern_site)(chain).cast<int64_t>();
    s.site_ids.emplace(std::move(owned), site);  // the Python table keeps the code objects alive
  }
  for (int i = 0; i < n; ++i) Py_DECREF(codes[i]);
  return site;
}
#else
constexpr bool kSitesInCpp = false;
inline int64_t capture_site() { return -2; }
#endif

inline int64_t site_of_op() {  // -2: "capture it in Python" (no site table given, or Python < 3.11)
  if (!kSitesInCpp || state().intern_site == nullptr) return -2;
  return capture_site();
}

}  // namespace streamcheck_native
