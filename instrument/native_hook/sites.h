// Call sites: the first Python frame outside torch and streamcheck, keyed as sites.SiteTable keys it.
#pragma once

#include <algorithm>

#include "state.h"

// 3.11 and 3.12: the frames are walked in the interpreter's own frame list (internal/pycore_frame.h, read-only),
// with the same steps PyEval_GetFrame and PyFrame_GetBack take (skip incomplete frames, follow `previous`), without
// making a frame object for each frame and without a reference count: the public walk costs most of a site's
// capture. Elsewhere (or built with STREAMCHECK_NO_FAST_FRAMES, which native.py falls back to when the internal
// header does not build) the public API.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(STREAMCHECK_NO_FAST_FRAMES)
#define STREAMCHECK_FAST_FRAMES 1
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif

namespace streamcheck_native {

#if PY_VERSION_HEX >= 0x030B0000
constexpr bool kSitesInCpp = true;

// In front of `internal_code`, a small direct-mapped table that stays in cache: every op asks for each frame it
// skips, and a probe into the whole table missed the caches on a training step. Safe by pointer: each code object
// here is one internal_code holds a reference to; set_site_table clears that table and bumps the generation.
struct InternalSlot {
  PyCodeObject* code;
  uint64_t generation;
  bool internal;
};
inline InternalSlot* const the_internal_slots = new InternalSlot[512]();  // GIL held for all its uses

inline bool is_internal(PyCodeObject* code) {
  State& s = state();
  InternalSlot& slot = the_internal_slots[(reinterpret_cast<uintptr_t>(code) >> 4) & 511];
  if (slot.code == code && slot.generation == s.site_generation) return slot.internal;
  bool internal;
  auto found = s.internal_code.find(code);
  if (found != s.internal_code.end()) {
    internal = found->second;
  } else {
    py::object answer =
        py::reinterpret_borrow<py::object>(s.classify_code)(py::handle(reinterpret_cast<PyObject*>(code)));
    internal = answer.cast<bool>();
    Py_INCREF(code);  // the pointer is the key: the object must not die and be replaced by another at that address
    s.internal_code.emplace(code, internal);
  }
  slot = {code, s.site_generation, internal};
  return internal;
}

// A cursor over the calling thread's Python frames, innermost first (GIL held; the frames cannot change meanwhile:
// this thread runs C++). `code()` is borrowed: the frame holds it.
#ifdef STREAMCHECK_FAST_FRAMES
struct FrameCursor {
  _PyInterpreterFrame* frame = nullptr;
  FrameCursor() {
    if (!tuning().fast_frames) {
      slow_ = true;
      slow_frame_ = PyEval_GetFrame();  // borrowed
      Py_XINCREF(slow_frame_);
      return;
    }
    frame = PyThreadState_Get()->cframe->current_frame;
    skip_incomplete();
  }
  ~FrameCursor() { Py_XDECREF(slow_frame_); }
  bool done() const { return slow_ ? slow_frame_ == nullptr : frame == nullptr; }
  PyCodeObject* code() const { return slow_ ? slow_code() : frame->f_code; }
  int lasti() const {
    if (slow_) return PyFrame_GetLasti(slow_frame_);
    int lasti = _PyInterpreterFrame_LASTI(frame);  // as PyFrame_GetLasti (and frame.f_lasti) compute it
    return lasti < 0 ? -1 : lasti * static_cast<int>(sizeof(_Py_CODEUNIT));
  }
  void next() {
    if (slow_) {
      PyFrameObject* back = PyFrame_GetBack(slow_frame_);
      Py_DECREF(slow_frame_);
      slow_frame_ = back;
      return;
    }
    frame = frame->previous;
    skip_incomplete();
  }

 private:
  bool slow_ = false;
  PyFrameObject* slow_frame_ = nullptr;
  void skip_incomplete() {
    while (frame != nullptr && _PyFrame_IsIncomplete(frame)) frame = frame->previous;
  }
  PyCodeObject* slow_code() const {
    PyCodeObject* code = PyFrame_GetCode(slow_frame_);
    Py_DECREF(code);  // borrowed from here on: the live frame holds it
    return code;
  }
};
#else
struct FrameCursor {  // the public API: a frame object per frame
  FrameCursor() : frame_(PyEval_GetFrame()) { Py_XINCREF(frame_); }
  ~FrameCursor() { Py_XDECREF(frame_); }
  bool done() const { return frame_ == nullptr; }
  PyCodeObject* code() const {
    PyCodeObject* code = PyFrame_GetCode(frame_);
    Py_DECREF(code);  // borrowed from here on: the live frame holds it
    return code;
  }
  int lasti() const { return PyFrame_GetLasti(frame_); }
  void next() {
    PyFrameObject* back = PyFrame_GetBack(frame_);
    Py_DECREF(frame_);
    frame_ = back;
  }

 private:
  PyFrameObject* frame_;
};
#endif

// The calling thread's innermost interpreter frame, read without the GIL: only this thread changes its own frames,
// and while it runs this C++ it runs no Python. Null: no Python frame on this thread. (Without the fast walk: null,
// and nothing compares it.)
inline const void* top_frame() {
#ifdef STREAMCHECK_FAST_FRAMES
  PyThreadState* ts = PyGILState_GetThisThreadState();
  return ts == nullptr ? nullptr : ts->cframe->current_frame;
#else
  return nullptr;
#endif
}

// The site of the running op, as sites.SiteTable.capture computes it: the first Python frame outside torch and
// streamcheck and `site_depth` frames from it up, keyed by (code object, bytecode offset) pairs. GIL held.
inline int64_t capture_site() {
  State& s = state();
  FrameCursor frame;  // no frame on a thread without Python frames (autograd engine)
  if (frame.done()) return -1;
  while (!frame.done() && is_internal(frame.code())) frame.next();
  if (frame.done()) return -2;  // every frame in torch/streamcheck: Python blames the innermost library frame
  uintptr_t key[32];
  PyCodeObject* codes[16];
  int lastis[16];
  int n = 0;
  int depth = std::min(s.site_depth, 16);
  for (; !frame.done() && n < depth; frame.next(), ++n) {
    codes[n] = frame.code();
    lastis[n] = frame.lasti();
    key[2 * n] = reinterpret_cast<uintptr_t>(codes[n]);
    key[2 * n + 1] = static_cast<uintptr_t>(lastis[n]);
  }
  static thread_local std::string bytes;  // its capacity stays: no allocation per op
  bytes.assign(reinterpret_cast<const char*>(key), sizeof(uintptr_t) * 2 * n);
  auto found = s.site_ids.find(bytes);
  if (found != s.site_ids.end()) return found->second;
  std::string owned = bytes;  // the Python call below may capture a site on this thread again (a free under GC)
  py::list chain(n);
  for (int i = 0; i < n; ++i) chain[i] = py::make_tuple(py::handle(reinterpret_cast<PyObject*>(codes[i])), lastis[i]);
  int64_t site = py::reinterpret_borrow<py::object>(s.intern_site)(chain).cast<int64_t>();
  s.site_ids.emplace(std::move(owned), site);  // the Python table keeps the code objects alive
  return site;
}
#else
constexpr bool kSitesInCpp = false;
inline int64_t capture_site() { return -2; }
#endif

inline int64_t site_of_op() {  // -2: "capture it in Python" (no site table given, or Python < 3.11)
  if (!kSitesInCpp || state().intern_site == nullptr) return -2;
  if (!tuning().sites) return -1;  // measurement switch (state.h: Tuning)
  return capture_site();
}

}  // namespace streamcheck_native
