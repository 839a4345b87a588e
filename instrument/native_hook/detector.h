// The race detector in C++: instrument/detector.py (+ clocks.py, shadow.py) line for line, for the per-op path.
//
// The Python Detector stays the readable reference and the test oracle (tests/instrument/native/test_native_detector.py
// runs both on random programs and compares every race). This one exists so that the hook can decide an op without
// entering Python: actors and op names are small integers, clocks are dense vectors, accesses are kept by value.
// What Python needs (a race to report) is queued in `races` and taken by the caller.
//
// Differences that are not semantic: a full clock join where Python shortcuts to one entry (the same result: the
// thread's clock changed only in its own entry since the last join), and accesses compared by (seq, is_write)
// where Python compares object identity (each event makes at most one read and one write Access).
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

namespace streamcheck_native {

using Time = int64_t;
constexpr int kMixed = -1;  // StorageShadow::actor once a second actor touched the storage
constexpr size_t kMaxPendingFrees = 4096;
constexpr size_t kMaxPendingWorks = 1 << 16;

struct Clock {  // entry a: actor a's time (0: nothing of it seen)
  std::vector<Time> t;
  Time get(int a) const { return a >= 0 && a < static_cast<int>(t.size()) ? t[a] : 0; }
  Time& at(int a) {
    if (a >= static_cast<int>(t.size())) t.resize(a + 1, 0);
    return t[a];
  }
  void join(const Clock& other) {
    if (other.t.size() > t.size()) t.resize(other.t.size(), 0);
    for (size_t i = 0; i < other.t.size(); ++i)
      if (t[i] < other.t[i]) t[i] = other.t[i];
  }
};

struct Access {
  int actor = -1, thread = -1;
  int stream = -1;  // collectives: the stream they were launched from
  bool is_write = false;
  int op = -1;
  int64_t site = -1, seq = 0;
  Time clock = 0;
  bool same(const Access& o) const { return seq == o.seq && is_write == o.is_write && actor == o.actor; }
};

struct Found {
  Access earlier;
  int64_t start, end;
};

struct Cell {
  bool has_write = false;
  Access write;
  // the latest read of each actor since the write, in the order actors first read; mostly one: kept inline
  c10::SmallVector<Access, 1> reads;
  void add_read(const Access& a) {
    for (auto& r : reads)
      if (r.actor == a.actor) {
        r = a;
        return;
      }
    reads.push_back(a);
  }
};

inline void check_cell(const Cell& cell, const Access& access, const Clock& clock, int64_t start, int64_t end,
                       std::vector<Found>& found) {
  int actor = access.actor;
  if (cell.has_write && cell.write.actor != actor && clock.get(cell.write.actor) < cell.write.clock)
    found.push_back({cell.write, start, end});
  if (access.is_write)
    for (const auto& read : cell.reads)
      if (read.actor != actor && clock.get(read.actor) < read.clock) found.push_back({read, start, end});
}

struct Segment {  // bytes [start, end) of a storage and their history
  int64_t start, end;
  Cell cell;
};

// shadow.py's StorageShadow: sorted disjoint segments, each with its cell, in one array (a storage touched as one
// tensor, the usual case, is one segment: one cache line or two to read, where separate arrays of starts, ends and
// cells, and a heap block per cell's reads, were four)
struct StorageShadow {
  std::vector<Segment> segs;
  int actor = kMixed;

  static StorageShadow first_access(const Access& a, int64_t start, int64_t end) {
    StorageShadow s;
    s.actor = a.actor;
    Segment g{start, end, Cell()};
    if (a.is_write) {
      g.cell.has_write = true;
      g.cell.write = a;
    } else {
      g.cell.reads.push_back(a);
    }
    s.segs.push_back(std::move(g));
    return s;
  }

  static void record(Cell& cell, const Access& a) {
    if (a.is_write) {
      cell.has_write = true;
      cell.write = a;
      cell.reads.clear();
    } else {
      cell.add_read(a);
    }
  }

  size_t first_ending_after(int64_t offset) const {  // the first segment whose end is past offset
    return std::upper_bound(segs.begin(), segs.end(), offset,
                            [](int64_t v, const Segment& g) { return v < g.end; }) - segs.begin();
  }
  size_t first_starting_at(int64_t offset) const {  // the first segment that starts at offset or later
    return std::lower_bound(segs.begin(), segs.end(), offset,
                            [](const Segment& g, int64_t v) { return g.start < v; }) - segs.begin();
  }

  void split_at(int64_t offset) {
    size_t k = first_ending_after(offset);
    if (k < segs.size() && segs[k].start < offset) {
      Segment right = segs[k];
      right.start = offset;
      segs[k].end = offset;
      segs.insert(segs.begin() + k + 1, std::move(right));
    }
  }

  void access(const Access& a, const Clock& clock, int64_t start, int64_t end, std::vector<Found>& found) {
    size_t i = first_ending_after(start);
    size_t n = segs.size();
    if (i < n && segs[i].start == start && segs[i].end == end) {  // the same tensor (or view) as last time
      if (actor != a.actor) check_cell(segs[i].cell, a, clock, start, end, found);
      record(segs[i].cell, a);
      return;
    }
    if (i < n && segs[i].start <= start && end <= segs[i].end) {  // inside one segment: one check, at most three pieces
      check_cell(segs[i].cell, a, clock, start, end, found);
      // in place: the segment keeps its left piece (if any); the middle and the right piece are inserted after it
      bool left = segs[i].start < start, right = end < segs[i].end;
      int64_t old_end = segs[i].end;
      Cell middle;
      if (a.is_write) {
        middle.has_write = true;
        middle.write = a;
      } else {
        middle = segs[i].cell;
        middle.add_read(a);
      }
      if (right) {
        Segment piece{end, old_end, segs[i].cell};
        segs.insert(segs.begin() + i + 1, std::move(piece));
      }
      if (left) {
        segs[i].end = start;
        Segment piece{start, end, std::move(middle)};
        segs.insert(segs.begin() + i + 1, std::move(piece));
      } else {
        segs[i].end = end;
        segs[i].cell = std::move(middle);
      }
      return;
    }
    split_at(start);
    split_at(end);
    size_t first = first_starting_at(start);
    size_t last = first_starting_at(end);
    if (a.is_write) {
      for (size_t k = first; k < last; ++k) check_cell(segs[k].cell, a, clock, segs[k].start, segs[k].end, found);
      Cell c;
      c.has_write = true;
      c.write = a;
      if (first < last) {  // in place: the first covered segment becomes [start, end), the others go
        segs[first].start = start;
        segs[first].end = end;
        segs[first].cell = std::move(c);
        segs.erase(segs.begin() + first + 1, segs.begin() + last);
      } else {
        Segment piece{start, end, std::move(c)};
        segs.insert(segs.begin() + first, std::move(piece));
      }
      return;
    }
    std::vector<Segment> pieces;
    int64_t pos = start;
    Cell fresh;
    fresh.reads.push_back(a);
    for (size_t k = first; k < last; ++k) {
      if (pos < segs[k].start) pieces.push_back({pos, segs[k].start, fresh});  // untouched bytes: a first history
      check_cell(segs[k].cell, a, clock, segs[k].start, segs[k].end, found);
      Cell c = segs[k].cell;
      c.add_read(a);
      pieces.push_back({segs[k].start, segs[k].end, std::move(c)});
      pos = segs[k].end;
    }
    if (pos < end) pieces.push_back({pos, end, fresh});
    segs.erase(segs.begin() + first, segs.begin() + last);
    segs.insert(segs.begin() + first, std::make_move_iterator(pieces.begin()), std::make_move_iterator(pieces.end()));
  }

  void check_range(const Access& a, const Clock& clock, int64_t start, int64_t end, std::vector<Found>& found) const {
    for (size_t k = first_ending_after(start); k < segs.size() && segs[k].start < end; ++k)
      check_cell(segs[k].cell, a, clock, std::max(start, segs[k].start), std::min(end, segs[k].end), found);
  }

  void check_all(const Access& a, const Clock& clock, std::vector<Found>& found) const {
    for (const auto& g : segs) check_cell(g.cell, a, clock, g.start, g.end, found);
  }

  size_t bytes() const {
    size_t total = sizeof(*this) + segs.capacity() * sizeof(Segment);
    for (const auto& g : segs)
      if (g.cell.reads.capacity() > 1) total += g.cell.reads.capacity() * sizeof(Access);  // off the inline slot
    return total;
  }
};

struct Allocation {
  int stream = -1;  // -1: unknown (a record_stream before any allocation was seen)
  int64_t size = 0, site = -1;
  bool has_recorded = false;
  std::vector<int> recorded;  // streams given to record_stream
};

// What the detector keeps per storage block: its accesses' history and its allocation, in one slot of one flat table
// (an op's output block is allocated, written and freed: one probe each, no node allocated or freed; the detector's
// hash lookups were most of its cost on a training step, where they miss the caches)
struct Block {
  StorageShadow shadow;
  Allocation allocation;
  bool has_shadow = false, has_allocation = false;
};

struct Race {
  char kind;  // 'R' RAW, 'A' WAR, 'W' WAW, 'F' FREE, 'H' HOST, 'P' PEER
  uint64_t storage;
  int64_t start, end;
  Access earlier, later;
  bool has_reuse = false;
  Access reuse;
  bool has_allocation = false;  // the storage's allocation when reported (FREE: the freed block's)
  Allocation allocation;
};

struct PendingFree {
  uint64_t storage;
  StorageShadow shadow;
  Clock held;
  Access free;
  Allocation allocation;
};

struct Range3 {
  uint64_t storage;
  int64_t start, end;
};

class Detector {
 public:
  std::vector<Race> races;  // found, not yet taken by the caller
  int64_t seq = 0;
  int free_op;  // the op id of "free" (race_kind: a later access that is a free)
  bool recycle_shadows = true;  // keep freed blocks' shadows for reuse (spare_); off only to measure what it saves

  Detector() { free_op = op_id("free"); }

  // ---- names -------------------------------------------------------------------------------------------------
  int actor_id(const std::string& name) {
    auto found = actor_ids_.find(name);
    if (found != actor_ids_.end()) return found->second;
    int id = static_cast<int>(actor_names_.size());
    actor_names_.push_back(name);
    actor_ids_.emplace(name, id);
    clocks_.emplace_back();
    has_clock_.push_back(false);
    device_of_.push_back(device_of(name));
    return id;
  }
  const std::string& actor_name(int id) const { return actor_names_.at(id); }
  int op_id(const std::string& name) {
    auto found = op_ids_.find(name);
    if (found != op_ids_.end()) return found->second;
    int id = static_cast<int>(op_names_.size());
    op_names_.push_back(name);
    op_ids_.emplace(name, id);
    return id;
  }
  const std::string& op_name(int id) const { return op_names_.at(id); }

  // ---- streams, events, synchronization (detector.py's methods, same names) ----------------------------------
  void stream_created(int thread, int stream) {
    ++seq;
    send(thread, stream);
  }
  void event_record(int thread, uint64_t event, int stream) {
    ++seq;
    send(thread, stream);
    Clock& vc = clock(stream);
    events_[event] = vc;
    vc.at(stream) += 1;
  }
  void event_wait(int thread, uint64_t event, int stream) {
    ++seq;
    send(thread, stream);
    wait_event(stream, event);
  }
  void event_destroy(uint64_t event) {
    ++seq;
    events_.erase(event);
  }
  void sync_event(int thread, uint64_t event) {
    ++seq;
    wait_event(thread, event);
  }
  void sync_stream(int thread, int stream) {
    ++seq;
    send(stream, thread);
  }
  void sync_device(int thread, int device) {
    ++seq;
    auto found = streams_of_device_.find(device);
    if (found == streams_of_device_.end()) return;
    std::vector<int> streams = found->second;  // send() may not add to it (both clocks exist), but stay safe
    for (int stream : streams) send(stream, thread);
  }
  void thread_start(int parent, int child) {
    ++seq;
    send(parent, child);
  }
  void thread_join(int parent, int child) {
    ++seq;
    send(child, parent);
  }

  // ---- accesses ----------------------------------------------------------------------------------------------
  void kernel(int thread, int stream, const std::vector<Range3>& reads, const std::vector<Range3>& writes,
              int64_t site, int op) {
    int64_t at = seq++;
    clock(stream);
    clock(thread);
    Clock& sent = clocks_[thread];
    clocks_[stream].join(sent);
    sent.at(thread) += 1;
    if (!pending_frees_.empty() && pending_frees_.count(stream)) check_frees(stream, thread, clocks_[stream], site, op, at);
    Clock& now = clocks_[stream];
    if (!reads.empty()) access_all(make(stream, thread, false, site, op, at, now.get(stream)), now, reads);
    if (!writes.empty()) access_all(make(stream, thread, true, site, op, at, now.get(stream)), now, writes);
  }
  void host_access(int thread, const std::vector<Range3>& reads, const std::vector<Range3>& writes, int64_t site,
                   int op) {
    int64_t at = seq++;
    clock(thread);
    Clock& c = clocks_[thread];
    if (!reads.empty()) access_all(make(thread, thread, false, site, op, at, c.get(thread)), c, reads);
    if (!writes.empty()) access_all(make(thread, thread, true, site, op, at, c.get(thread)), c, writes);
  }
  void collective(int thread, int stream, int comm, const std::vector<Range3>& reads,
                  const std::vector<Range3>& writes, bool async_op, bool has_work, uint64_t work, int64_t site,
                  int op) {
    int64_t at = seq++;
    send(thread, stream);
    if (!pending_frees_.empty() && pending_frees_.count(stream)) check_frees(stream, thread, clocks_[stream], site, op, at);
    send(stream, comm);
    Clock now = clocks_[comm];  // a copy: access_all may not grow clocks_, but the comm's clock must stay as sent
    Access r = make(comm, thread, false, site, op, at, now.get(comm));
    r.stream = stream;
    Access w = r;
    w.is_write = true;
    if (!reads.empty()) access_all(r, now, reads);
    if (!writes.empty()) access_all(w, now, writes);
    if (has_work) finish_work(work, comm);
    if (!async_op) send(comm, stream);
  }
  void work_wait(int thread, int stream, uint64_t work, bool blocking) {
    ++seq;
    send(thread, stream);
    wait_work(stream, work);
    if (blocking) wait_work(thread, work);
  }
  // detector.py's hand_over: other processes read `reads` from now on, after `thread` and `events` only
  void hand_over(int thread, const std::vector<Range3>& reads, const std::vector<uint64_t>& events, int64_t site,
                 int op) {
    int64_t at = seq++;
    Clock peers = clock(thread);
    for (uint64_t event : events) {
      auto found = events_.find(event);
      if (found != events_.end()) peers.join(found->second);
    }
    Access handing = make(thread, thread, false, site, op, at, peers.get(thread));
    std::vector<Found> found, unjudged;
    for (const auto& r : reads) {
      auto last = handed_at_.find(r.storage);
      int64_t judged_until = last == handed_at_.end() ? -1 : last->second;
      handed_at_[r.storage] = at;
      const StorageShadow* s = shadow(r.storage);
      if (s == nullptr || r.start >= r.end) continue;
      found.clear();
      s->check_range(handing, peers, r.start, r.end, found);
      unjudged.clear();
      for (const auto& f : found)
        if (f.earlier.seq > judged_until) unjudged.push_back(f);
      if (!unjudged.empty()) report(r.storage, handing, unjudged, nullptr, nullptr, 'P');
    }
  }
  void forget_accesses() {
    blocks_.clear();
    pending_frees_.clear();
    handed_at_.clear();
  }
  void forget_work(uint64_t work) {
    auto found = works_.find(work);
    if (found == works_.end()) return;
    work_order_.erase(found->second.second);
    works_.erase(found);
  }

  // ---- memory ------------------------------------------------------------------------------------------------
  void alloc(uint64_t storage, int64_t size, int stream, int64_t site) {
    ++seq;
    if (!handed_at_.empty()) handed_at_.erase(storage);
    Block& b = blocks_[storage];
    if (b.has_shadow) {
      recycle(std::move(b.shadow));
      b.shadow = StorageShadow();
      b.has_shadow = false;
    }
    Allocation a;
    a.stream = stream;
    a.size = size;
    a.site = site;
    b.allocation = std::move(a);
    b.has_allocation = true;
  }
  void record_stream(uint64_t storage, int stream) {
    ++seq;
    Block& b = blocks_[storage];
    if (!b.has_allocation) {
      b.allocation = Allocation();
      b.has_allocation = true;
    }
    Allocation& a = b.allocation;
    a.has_recorded = true;
    for (int s : a.recorded)
      if (s == stream) return;
    a.recorded.push_back(stream);
  }
  void free(int thread, uint64_t storage, int64_t site) {
    int64_t at = seq++;
    auto found = blocks_.find(storage);
    if (found == blocks_.end()) return;
    bool have_allocation = found->second.has_allocation, have_shadow = found->second.has_shadow;
    Allocation allocation;
    StorageShadow shadow;
    if (have_allocation) allocation = std::move(found->second.allocation);
    if (have_shadow) shadow = std::move(found->second.shadow);
    blocks_.erase(found);
    if (!have_allocation || allocation.stream < 0 || !have_shadow) return recycle(std::move(shadow));
    int stream = allocation.stream;
    // the allocation stream's own history: its next work is ordered after it
    if (shadow.actor == stream) return recycle(std::move(shadow));
    PendingFree pending;
    pending.storage = storage;
    for (int recorded : allocation.recorded) pending.held.join(clock(recorded));
    pending.shadow = std::move(shadow);
    pending.free = make(stream, thread, true, site, free_op, at, 0);
    pending.allocation = std::move(allocation);
    auto& frees = pending_frees_[stream];
    frees.push_back(std::move(pending));
    if (frees.size() > kMaxPendingFrees) frees.erase(frees.begin());
  }
  bool free_can_race(uint64_t storage) const {
    auto found = blocks_.find(storage);
    if (found == blocks_.end()) return false;
    const Block& b = found->second;
    return b.has_allocation && b.allocation.stream >= 0 && b.has_shadow && b.shadow.actor != b.allocation.stream;
  }
  const StorageShadow* shadow(uint64_t storage) const {
    auto found = blocks_.find(storage);
    return found == blocks_.end() || !found->second.has_shadow ? nullptr : &found->second.shadow;
  }
  std::vector<uint64_t> storages() const {
    std::vector<uint64_t> out;
    for (const auto& entry : blocks_)
      if (entry.second.has_shadow) out.push_back(entry.first);
    return out;
  }
  const Allocation* allocation(uint64_t storage) const {
    auto found = blocks_.find(storage);
    return found == blocks_.end() || !found->second.has_allocation ? nullptr : &found->second.allocation;
  }

  // ---- sizes (memory.py's shadow_state_size) --------------------------------------------------------------------
  struct Sizes {
    size_t storages, segments, accesses, actors, events, works, allocations, pending_frees, bytes;
  };
  Sizes sizes() const {
    Sizes z{};
    // accesses counted once however many cells keep them, as shadow_size.py counts the Python objects
    std::set<std::tuple<int64_t, bool, int>> distinct;
    auto count = [&distinct](const Cell& c) {
      if (c.has_write) distinct.emplace(c.write.seq, true, c.write.actor);
      for (const auto& r : c.reads) distinct.emplace(r.seq, false, r.actor);
    };
    z.bytes = sizeof(*this);
    for (const auto& entry : blocks_) {
      if (entry.second.has_allocation) ++z.allocations;
      if (!entry.second.has_shadow) continue;
      const StorageShadow& shadow = entry.second.shadow;
      ++z.storages;
      z.segments += shadow.segs.size();
      for (const auto& g : shadow.segs) count(g.cell);
      z.bytes += shadow.bytes() + 32;
    }
    for (const auto& entry : pending_frees_)
      for (const auto& p : entry.second) {  // a freed block keeps its history until its pool stream works again
        ++z.pending_frees;
        z.segments += p.shadow.segs.size();
        for (const auto& g : p.shadow.segs) count(g.cell);
        z.bytes += p.shadow.bytes() + p.held.t.capacity() * sizeof(Time) + sizeof(PendingFree);
      }
    for (size_t a = 0; a < clocks_.size(); ++a) {
      if (has_clock_[a]) ++z.actors;
      z.bytes += clocks_[a].t.capacity() * sizeof(Time) + actor_names_[a].capacity();
    }
    z.accesses = distinct.size();
    z.events = events_.size();
    for (const auto& e : events_) z.bytes += e.second.t.capacity() * sizeof(Time) + 32;
    z.works = works_.size();
    for (const auto& w : works_) z.bytes += w.second.first.t.capacity() * sizeof(Time) + 48;
    z.bytes += z.allocations * (sizeof(Allocation) + 32);
    z.bytes += races.capacity() * sizeof(Race);
    return z;
  }

 private:
  std::vector<std::string> actor_names_, op_names_;
  std::unordered_map<std::string, int> actor_ids_, op_ids_;
  std::vector<Clock> clocks_;
  std::vector<bool> has_clock_;
  std::vector<int> device_of_;
  std::unordered_map<int, std::vector<int>> streams_of_device_;  // in the order their clocks were made
  std::unordered_map<uint64_t, Clock> events_;
  std::unordered_map<uint64_t, int64_t> handed_at_;  // storage -> seq of its last hand_over
  std::unordered_map<uint64_t, std::pair<Clock, std::list<uint64_t>::iterator>> works_;
  std::list<uint64_t> work_order_;  // works by first finish (a re-finish keeps its place, as a dict's key does)
  ska::flat_hash_map<uint64_t, Block> blocks_;  // a block with neither history nor allocation has no entry
  std::unordered_map<int, std::vector<PendingFree>> pending_frees_;
  // Shadows of freed blocks, emptied with their vectors' capacity kept: most ops write a block the allocator just
  // handed out again, whose first history then costs no allocation (a step's blocks come and go by the thousand)
  std::vector<StorageShadow> spare_;

  void recycle(StorageShadow&& shadow) {
    if (!recycle_shadows || spare_.size() >= 256 || shadow.segs.empty()) return;
    shadow.segs.resize(1);  // the array keeps its capacity, the first cell its reads'
    shadow.segs[0].cell.reads.clear();
    spare_.push_back(std::move(shadow));
  }

  StorageShadow first_access(const Access& a, int64_t start, int64_t end) {  // StorageShadow::first_access, reusing
    if (spare_.empty()) return StorageShadow::first_access(a, start, end);
    StorageShadow s = std::move(spare_.back());
    spare_.pop_back();
    s.actor = a.actor;
    Segment& g = s.segs[0];
    g.start = start;
    g.end = end;
    Cell& c = g.cell;
    c.has_write = a.is_write;
    if (a.is_write) c.write = a;
    else c.reads.push_back(a);
    return s;
  }

  static int device_of(const std::string& actor) {  // clocks.py's device_of; -1 for host threads
    std::string head;
    if (actor.rfind("cuda:", 0) == 0) {
      head = actor.substr(5, actor.find('/', 5) == std::string::npos ? std::string::npos : actor.find('/', 5) - 5);
    } else if (actor.rfind("nccl:", 0) == 0) {
      size_t slash = actor.rfind('/');
      head = slash == std::string::npos ? actor : actor.substr(slash + 1);
    } else {
      return -1;
    }
    if (head.empty()) return -1;
    for (char ch : head)
      if (ch < '0' || ch > '9') return -1;
    return std::stoi(head);
  }

  Clock& clock(int actor) {  // created on first sight: a new actor has seen nothing but itself
    if (!has_clock_[actor]) {
      has_clock_[actor] = true;
      clocks_[actor].at(actor) = 1;
      if (device_of_[actor] >= 0) streams_of_device_[device_of_[actor]].push_back(actor);
    }
    return clocks_[actor];
  }
  void send(int source, int target) {  // target ⊔= source, then source ticks
    clock(target);
    clock(source);
    clocks_[target].join(clocks_[source]);
    clocks_[source].at(source) += 1;
  }
  void wait_event(int actor, uint64_t event) {
    auto found = events_.find(event);
    if (found != events_.end()) clock(actor).join(found->second);
  }
  void finish_work(uint64_t work, int comm) {
    Clock& vc = clock(comm);
    auto found = works_.find(work);
    if (found != works_.end()) {
      found->second.first = vc;
    } else {
      work_order_.push_back(work);
      works_.emplace(work, std::make_pair(vc, std::prev(work_order_.end())));
    }
    vc.at(comm) += 1;
    if (works_.size() > kMaxPendingWorks) {
      works_.erase(work_order_.front());
      work_order_.pop_front();
    }
  }
  void wait_work(int actor, uint64_t work) {
    auto found = works_.find(work);
    if (found != works_.end()) clock(actor).join(found->second.first);
  }

  static Access make(int actor, int thread, bool is_write, int64_t site, int op, int64_t seq, Time time) {
    Access a;
    a.actor = actor;
    a.thread = thread;
    a.is_write = is_write;
    a.site = site;
    a.op = op;
    a.seq = seq;
    a.clock = time;
    return a;
  }

  char kind_of(const Access& earlier, const Access& later) const {
    if (later.op == free_op) return 'F';
    if (earlier.actor == earlier.thread || later.actor == later.thread) return 'H';
    if (later.is_write) return earlier.is_write ? 'W' : 'A';
    return 'R';
  }

  void access_all(const Access& a, const Clock& clock, const std::vector<Range3>& ranges) {
    std::vector<std::pair<uint64_t, std::vector<Found>>> by_storage;  // in the order storages first raced
    std::vector<Found> found;
    for (const auto& r : ranges) {
      if (r.start >= r.end) continue;
      Block& b = blocks_[r.storage];  // a reference into the table: no insertion below until the next range
      if (!b.has_shadow) {
        b.shadow = first_access(a, r.start, r.end);
        b.has_shadow = true;
        continue;
      }
      StorageShadow& shadow = b.shadow;
      if (shadow.actor != a.actor) shadow.actor = kMixed;
      found.clear();
      shadow.access(a, clock, r.start, r.end, found);
      if (found.empty()) continue;
      bool merged = false;
      for (auto& entry : by_storage)
        if (entry.first == r.storage) {
          entry.second.insert(entry.second.end(), found.begin(), found.end());
          merged = true;
        }
      if (!merged) by_storage.emplace_back(r.storage, found);
    }
    for (auto& entry : by_storage) report(entry.first, a, entry.second, nullptr, nullptr);
  }

  // One Race per earlier access, spanning every byte range where the two met.
  void report(uint64_t storage, const Access& later, const std::vector<Found>& found, const Access* reuse,
              const Allocation* allocation, char kind = 0) {
    size_t first = races.size();
    for (const auto& f : found) {
      bool merged = false;
      for (size_t k = first; k < races.size(); ++k) {
        Race& race = races[k];
        if (race.earlier.same(f.earlier)) {
          race.start = std::min(race.start, f.start);
          race.end = std::max(race.end, f.end);
          merged = true;
          break;
        }
      }
      if (merged) continue;
      Race race;
      race.kind = kind != 0 ? kind : kind_of(f.earlier, later);
      race.storage = storage;
      race.start = f.start;
      race.end = f.end;
      race.earlier = f.earlier;
      race.later = later;
      if (reuse != nullptr) {
        race.has_reuse = true;
        race.reuse = *reuse;
      }
      const Allocation* known = allocation != nullptr ? allocation : this->allocation(storage);
      if (known != nullptr) {
        race.has_allocation = true;
        race.allocation = *known;
      }
      races.push_back(race);
    }
  }

  void check_frees(int stream, int thread, const Clock& clock, int64_t site, int op, int64_t at) {
    Access reuse = make(stream, thread, true, site, op, at, clock.get(stream));
    std::vector<PendingFree> frees = std::move(pending_frees_[stream]);
    pending_frees_.erase(stream);
    std::vector<Found> found;
    Clock joined;  // the stream's clock joined with a free's record_stream streams, where it has any
    for (auto& pending : frees) {
      const Clock* when = &clock;  // nothing below changes the clocks: no copy for a free without record_stream
      if (!pending.held.t.empty()) {
        joined = clock;
        joined.join(pending.held);
        when = &joined;
      }
      pending.free.clock = when->get(stream);
      found.clear();
      pending.shadow.check_all(pending.free, *when, found);
      if (!found.empty()) {
        const Allocation* known = allocation(pending.storage);
        report(pending.storage, pending.free, found, &reuse, known != nullptr ? known : &pending.allocation);
      }
    }
  }
};

}  // namespace streamcheck_native
