// The C++ Detector (detector.h) as a Python class, `Core`: actors, ops and ranges as Python gives them (strings,
// (storage, start, end) sequences); races taken as plain tuples. instrument/native_detector.py wraps it in the
// Python Detector's interface.
#pragma once

#include <torch/extension.h>

#include <chrono>

#include "detector.h"

namespace streamcheck_native {

namespace py = pybind11;

// Event, work and storage ids as the detector keys them: any Python int that fits 64 bits, negative ones included
// (host hand-offs use negative event keys, instrument/handoffs.py), taken modulo 2^64; storages go back as signed.
inline uint64_t id_of(const py::handle& value) {
  unsigned long long id = PyLong_AsUnsignedLongLongMask(value.ptr());
  if (id == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<uint64_t>(id);
}

inline std::vector<Range3> ranges_of(const py::handle& ranges) {
  std::vector<Range3> out;
  if (ranges.is_none()) return out;
  for (const py::handle& item : ranges) {
    py::sequence r = py::reinterpret_borrow<py::sequence>(item);
    out.push_back({id_of(r[0]), r[1].cast<int64_t>(), r[2].cast<int64_t>()});
  }
  return out;
}

inline py::tuple access_tuple(const Detector& d, const Access& a) {
  return py::make_tuple(d.actor_name(a.actor), d.actor_name(a.thread), a.is_write, a.site, d.op_name(a.op), a.seq,
                        a.clock, a.stream >= 0 ? d.actor_name(a.stream) : std::string());
}

inline const char* kind_name(char kind) {
  switch (kind) {
    case 'R': return "RAW";
    case 'A': return "WAR";
    case 'W': return "WAW";
    case 'F': return "FREE";
    case 'P': return "PEER";
    default: return "HOST";
  }
}

inline py::object allocation_tuple(const Detector& d, const Allocation& a) {
  py::object recorded = py::none();
  if (a.has_recorded) {
    py::set names;
    for (int s : a.recorded) names.add(py::str(d.actor_name(s)));
    recorded = names;
  }
  return py::make_tuple(a.stream >= 0 ? py::object(py::str(d.actor_name(a.stream))) : py::object(py::none()), a.size,
                        a.site, recorded);
}

// (kind, storage, start, end, earlier, later, reuse or None, allocation or None) per race found since the last call
inline py::list take_races(Detector& d) {
  py::list out;
  for (const Race& r : d.races) {
    out.append(py::make_tuple(kind_name(r.kind), static_cast<int64_t>(r.storage), r.start, r.end, access_tuple(d, r.earlier),
                              access_tuple(d, r.later), r.has_reuse ? py::object(access_tuple(d, r.reuse)) : py::none(),
                              r.has_allocation ? allocation_tuple(d, r.allocation) : py::none()));
  }
  d.races.clear();
  return out;
}

// Benchmarks (benchmarks/detector_micro.py): n ops of a launch-bound step's usual shape into a fresh Detector, in
// C++ alone: each op on the compute stream reads a parameter and the previous op's output and writes its own output
// into a block the allocator just handed out (64 blocks in turn, each freed 32 ops after it was written). Returns
// the nanoseconds per op (alloc + kernel + free), after n / 4 ops of warm-up.
inline double bench_detector(int64_t n) {
  Detector d;
  int thread = d.actor_id("T1"), stream = d.actor_id("cuda:0/s1");
  int op = d.op_id("aten::mm");
  constexpr int kParams = 256, kBlocks = 64;
  constexpr int64_t kBytes = 1 << 20;
  std::vector<Range3> reads(2), writes(1);
  for (int p = 0; p < kParams; ++p) {
    writes[0] = {static_cast<uint64_t>(0x100000000ULL + p * kBytes), 0, kBytes};
    d.kernel(thread, stream, {}, writes, 1, op);
  }
  auto block = [](int64_t i) { return static_cast<uint64_t>(0x900000000ULL + (i % kBlocks) * kBytes); };
  auto run = [&](int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) {
      d.alloc(block(i), kBytes, stream, 2);
      reads[0] = {static_cast<uint64_t>(0x100000000ULL + (i % kParams) * kBytes), 0, kBytes};
      reads[1] = {block(i - 1), 0, kBytes};
      writes[0] = {block(i), 0, kBytes};
      d.kernel(thread, stream, reads, writes, 2 + (i % 7), op);
      d.free(thread, block(i + kBlocks / 2), -1);
    }
  };
  run(1, 1 + n / 4);
  auto started = std::chrono::steady_clock::now();
  run(1 + n / 4, 1 + n / 4 + n);
  std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - started;
  return took.count() / static_cast<double>(n);
}

inline void bind_detector(py::module& m) {
  m.def("bench_detector", &bench_detector, "Benchmarks: ns per op of a usual op (alloc, kernel, free) in C++ alone");
  using D = Detector;
  auto id = [](D& d, const std::string& name) { return d.actor_id(name); };
  py::class_<D>(m, "Core", "The race detector of instrument/detector.py in C++ (instrument/native_hook/detector.h)")
      .def(py::init<>())
      .def_readwrite("seq", &D::seq)
      .def("has_races", [](const D& d) { return !d.races.empty(); })
      .def("take_races", &take_races)
      .def("stream_created", [id](D& d, const std::string& t, const std::string& s) { d.stream_created(id(d, t), id(d, s)); })
      .def("event_record", [id](D& d, const std::string& t, py::handle e, const std::string& s) { d.event_record(id(d, t), id_of(e), id(d, s)); })
      .def("event_wait", [id](D& d, const std::string& t, py::handle e, const std::string& s) { d.event_wait(id(d, t), id_of(e), id(d, s)); })
      .def("event_destroy", [](D& d, py::handle e) { d.event_destroy(id_of(e)); })
      .def("sync_event", [id](D& d, const std::string& t, py::handle e) { d.sync_event(id(d, t), id_of(e)); })
      .def("sync_stream", [id](D& d, const std::string& t, const std::string& s) { d.sync_stream(id(d, t), id(d, s)); })
      .def("sync_device", [id](D& d, const std::string& t, int device) { d.sync_device(id(d, t), device); })
      .def("thread_start", [id](D& d, const std::string& p, const std::string& c) { d.thread_start(id(d, p), id(d, c)); })
      .def("thread_join", [id](D& d, const std::string& p, const std::string& c) { d.thread_join(id(d, p), id(d, c)); })
      .def("kernel", [id](D& d, const std::string& t, const std::string& s, py::handle reads, py::handle writes,
                          int64_t site, const std::string& op) {
        d.kernel(id(d, t), id(d, s), ranges_of(reads), ranges_of(writes), site, d.op_id(op));
      })
      .def("host_access", [id](D& d, const std::string& t, py::handle reads, py::handle writes, int64_t site,
                               const std::string& op) {
        d.host_access(id(d, t), ranges_of(reads), ranges_of(writes), site, d.op_id(op));
      })
      .def("hand_over", [id](D& d, const std::string& t, py::handle reads, py::handle events, int64_t site,
                             const std::string& op) {
        std::vector<uint64_t> keys;
        if (!events.is_none())
          for (const py::handle& e : events) keys.push_back(id_of(e));
        d.hand_over(id(d, t), ranges_of(reads), keys, site, d.op_id(op));
      })
      .def("collective", [id](D& d, const std::string& t, const std::string& s, const std::string& comm,
                              py::handle reads, py::handle writes, bool async_op, py::object work, int64_t site,
                              const std::string& op) {
        bool has_work = !work.is_none();
        d.collective(id(d, t), id(d, s), id(d, comm), ranges_of(reads), ranges_of(writes), async_op, has_work,
                     has_work ? id_of(work) : 0, site, d.op_id(op));
      })
      .def("work_wait", [id](D& d, const std::string& t, const std::string& s, py::handle w, bool blocking) {
        d.work_wait(id(d, t), id(d, s), id_of(w), blocking);
      })
      .def("forget_accesses", &D::forget_accesses)
      .def("forget_work", [](D& d, py::handle w) { d.forget_work(id_of(w)); })
      .def("alloc", [id](D& d, py::handle storage, int64_t size, const std::string& s, int64_t site) {
        d.alloc(id_of(storage), size, id(d, s), site);
      })
      .def("record_stream", [id](D& d, py::handle storage, const std::string& s) {
        d.record_stream(id_of(storage), id(d, s));
      })
      .def("free", [id](D& d, const std::string& t, py::handle storage, int64_t site) {
        d.free(id(d, t), id_of(storage), site);
      })
      .def("free_can_race", [](const D& d, py::handle storage) { return d.free_can_race(id_of(storage)); })
      .def("allocation", [](const D& d, py::handle storage) -> py::object {
        const Allocation* a = d.allocation(id_of(storage));
        return a == nullptr ? py::none() : allocation_tuple(d, *a);
      })
      .def("storages", [](const D& d) {
        py::list out;
        for (uint64_t storage : d.storages()) out.append(static_cast<int64_t>(storage));
        return out;
      })
      .def("shadow", [](const D& d, py::handle storage) -> py::object {
        const StorageShadow* s = d.shadow(id_of(storage));
        if (s == nullptr) return py::none();
        py::list segments;
        for (const Segment& g : s->segs) segments.append(py::make_tuple(g.start, g.end));
        return py::make_tuple(s->actor == kMixed ? py::object(py::none()) : py::object(py::str(d.actor_name(s->actor))),
                              segments);
      }, "(the one actor of its history or None, [(start, end) of each segment]) or None")
      .def("sizes", [](const D& d) {
        D::Sizes z = d.sizes();
        py::dict out;
        out["storages"] = z.storages;
        out["segments"] = z.segments;
        out["accesses"] = z.accesses;
        out["actors"] = z.actors;
        out["events"] = z.events;
        out["works"] = z.works;
        out["allocations"] = z.allocations;
        out["pending_frees"] = z.pending_frees;
        out["bytes"] = z.bytes;
        return out;
      });
}

}  // namespace streamcheck_native
