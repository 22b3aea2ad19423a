// A minimal SIMT emulator that runs CUDA kernel source on the host, for checking kernels without a
// GPU (tests/kernels/unwrap/simt/simt_unwrap.cc). Every CUDA thread is a ucontext fiber. Warp
// collectives (full-mask shuffles, ballots, reductions), __syncthreads* and grid.sync() are real
// rendezvous of the participating fibers; __ldcg, __stcg, __threadfence and atomics are random
// preemption points, so different seeds give different interleavings of the threads. Execution is
// sequentially consistent: it finds logic errors, races under any interleaving, undefined
// behaviour of warp collectives (a lane missing from a full-mask collective is reported), reads
// of uninitialised memory (run with different garbage) and, with -fsanitize=address, out-of-bounds
// accesses; it cannot find faults that need a weaker memory model. __shared__ variables become
// statics, so kernels that use them must run one block at a time (Launch's `wave` = 1).
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using std::fabs;
using std::isfinite;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3() = default;
  dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

namespace simt {

enum Kind { kNone, kShflXor, kShfl, kShflUp, kBallot, kReduceAdd };

struct Fiber;
struct Rendezvous {
  int expected = 0;  // live participants
  int arrived = 0;
  std::vector<Fiber*> waiting;
  std::function<void(std::vector<Fiber*>&)> complete;
};

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  dim3 tid, bid;
  int lane = 0, warp = 0, block = 0;  // warp = global warp index, block = linear block index
  bool done = false, ready = true;
  // collective payload
  uint64_t val = 0;
  int param = 0;
  uint64_t result = 0;
  int pred = 0;
};

struct Machine {
  std::mt19937_64 rng{1};
  double preempt = 0.2;
  std::vector<Fiber*> fibers;
  std::vector<Fiber*> ready;
  Fiber* cur = nullptr;
  ucontext_t sched;
  dim3 grid, block;
  std::vector<Rendezvous> warp_rv, block_rv;
  Rendezvous grid_rv;
  std::vector<int> warp_live;
  std::function<void()> body;
  long switches = 0;
  int errors = 0;
};
inline Machine& M() {
  static Machine m;
  return m;
}

inline void MakeReady(Fiber* f) {
  f->ready = true;
  M().ready.push_back(f);
}
inline void SwitchOut() {
  Machine& m = M();
  ++m.switches;
  swapcontext(&m.cur->ctx, &m.sched);
}
// Random preemption point (fiber stays ready).
inline void Preempt() {
  Machine& m = M();
  if (m.cur == nullptr) return;
  if (std::uniform_real_distribution<double>(0, 1)(m.rng) >= m.preempt) return;
  MakeReady(m.cur);
  SwitchOut();
}
// Arrive at a rendezvous; the last arriver runs `complete` then releases everybody.
template <class F>
inline void Arrive(Rendezvous& rv, F&& complete) {
  Machine& m = M();
  Fiber* self = m.cur;
  rv.waiting.push_back(self);
  ++rv.arrived;
  rv.complete = complete;
  if (rv.arrived >= rv.expected) {
    complete(rv.waiting);
    for (Fiber* f : rv.waiting)
      if (f != self) MakeReady(f);
    rv.waiting.clear();
    rv.arrived = 0;
    // let others run too
    MakeReady(self);
    SwitchOut();
  } else {
    self->ready = false;
    SwitchOut();
  }
}

inline void Trampoline();

// Launches `fn` over grid x block; `wave` blocks run concurrently (1 for kernels with __shared__,
// all for cooperative kernels).
inline void Launch(dim3 grid, dim3 block, int wave, std::function<void()> fn, size_t stack = 48 << 10) {
  Machine& m = M();
  m.grid = grid;
  m.block = block;
  m.body = fn;
  const int nb = grid.x * grid.y * grid.z;
  const int nt = block.x * block.y * block.z;
  const int wpb = (nt + 31) / 32;
  std::vector<int> order(nb);
  for (int i = 0; i < nb; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), m.rng);  // hardware runs blocks in any order
  for (int b0 = 0; b0 < nb; b0 += wave) {
    const int b1 = std::min(nb, b0 + wave);
    m.fibers.clear();
    m.ready.clear();
    m.warp_rv.assign((b1 - b0) * wpb, Rendezvous{});
    m.block_rv.assign(b1 - b0, Rendezvous{});
    m.grid_rv = Rendezvous{};
    std::vector<Fiber> store((b1 - b0) * nt);
    int k = 0;
    for (int bi = b0; bi < b1; ++bi) {
      const int b = order[bi];
      for (int t = 0; t < nt; ++t, ++k) {
        Fiber& f = store[k];
        f.bid = dim3(b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y));
        f.tid = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
        f.lane = t % 32;
        f.block = bi - b0;
        f.warp = (bi - b0) * wpb + t / 32;
        f.stack.resize(stack);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = &m.sched;
        makecontext(&f.ctx, Trampoline, 0);
        m.fibers.push_back(&f);
        m.ready.push_back(&f);
        m.warp_rv[f.warp].expected++;
        m.block_rv[f.block].expected++;
        m.grid_rv.expected++;
      }
    }
    int live = k;
    while (live > 0) {
      if (m.ready.empty()) {
        std::fprintf(stderr, "SIMT DEADLOCK: %d live fibers, none ready\n", live);
        std::abort();
      }
      const size_t pick = std::uniform_int_distribution<size_t>(0, m.ready.size() - 1)(m.rng);
      Fiber* f = m.ready[pick];
      m.ready[pick] = m.ready.back();
      m.ready.pop_back();
      f->ready = false;
      m.cur = f;
      swapcontext(&m.sched, &f->ctx);
      m.cur = nullptr;
      if (f->done) {
        --live;
        // An exited thread no longer takes part in barriers.
        auto shrink = [&](Rendezvous& rv, bool warp) {
          rv.expected--;
          if (rv.arrived > 0 && rv.arrived >= rv.expected) {
            if (warp) {
              std::fprintf(stderr, "SIMT ERROR: warp collective completed by an exit\n");
              ++m.errors;
            }
            rv.complete(rv.waiting);
            for (Fiber* w : rv.waiting) MakeReady(w);
            rv.waiting.clear();
            rv.arrived = 0;
          }
        };
        // Warp collectives with a full mask while a lane has exited are UB: detect arrivals.
        if (m.warp_rv[f->warp].arrived > 0) {
          std::fprintf(stderr, "SIMT ERROR: lane exited while its warp waits in a collective\n");
          ++m.errors;
        }
        shrink(m.warp_rv[f->warp], true);
        shrink(m.block_rv[f->block], false);
        shrink(m.grid_rv, false);
      }
    }
  }
}

inline void Trampoline() {
  Machine& m = M();
  m.body();
  m.cur->done = true;
}

// Warp collective: exchange 64-bit payloads among the 32 lanes.
inline uint64_t WarpOp(Kind kind, uint64_t v, int param) {
  Machine& m = M();
  Fiber* self = m.cur;
  self->val = v;
  self->param = param;
  Rendezvous& rv = m.warp_rv[self->warp];
  if (rv.expected != 32) {
    std::fprintf(stderr, "SIMT ERROR: full-mask warp op with %d live lanes\n", rv.expected);
    ++m.errors;
  }
  Arrive(rv, [kind](std::vector<Fiber*>& ws) {
    Fiber* by_lane[32] = {};
    for (Fiber* f : ws) by_lane[f->lane] = f;
    uint64_t vals[32] = {};
    for (int l = 0; l < 32; ++l) vals[l] = by_lane[l] ? by_lane[l]->val : 0;
    uint64_t ballot = 0, sum = 0;
    for (int l = 0; l < 32; ++l) {
      if (by_lane[l] && vals[l]) ballot |= 1ull << l;
      sum += static_cast<uint32_t>(vals[l]);
    }
    for (Fiber* f : ws) {
      const int l = f->lane;
      switch (kind) {
        case kShflXor: f->result = vals[(l ^ f->param) & 31]; break;
        case kShfl: f->result = vals[f->param & 31]; break;
        case kShflUp: f->result = l >= f->param ? vals[l - f->param] : vals[l]; break;
        case kBallot: f->result = ballot; break;
        case kReduceAdd: f->result = static_cast<uint32_t>(sum); break;
        default: break;
      }
    }
  });
  return self->result;
}

inline int BlockOp(int pred, int mode) {  // mode 0 sync, 1 count, 2 or
  Machine& m = M();
  Fiber* self = m.cur;
  self->pred = pred != 0;
  Rendezvous& rv = m.block_rv[self->block];
  Arrive(rv, [](std::vector<Fiber*>& ws) {
    uint64_t c = 0;
    for (Fiber* f : ws) c += f->pred;
    for (Fiber* f : ws) f->result = c;
  });
  const uint64_t c = self->result;
  return mode == 1 ? static_cast<int>(c) : (mode == 2 ? (c != 0) : 0);
}

inline void GridSync() {
  Machine& m = M();
  Arrive(m.grid_rv, [](std::vector<Fiber*>&) {});
}

template <class T>
uint64_t Bits(T v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
T FromBits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

}  // namespace simt

#define threadIdx (simt::M().cur->tid)
#define blockIdx (simt::M().cur->bid)
#define blockDim (simt::M().block)
#define gridDim (simt::M().grid)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__

template <class T>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }

template <class T>
inline T __ldcg(const T* p) {
  simt::Preempt();
  return *p;
}
template <class T>
inline void __stcg(T* p, T v) {
  simt::Preempt();
  *p = v;
}
template <class T, class U>
inline T atomicAdd(T* p, U v) {
  simt::Preempt();
  T o = *p;
  *p = o + static_cast<T>(v);
  return o;
}
template <class T, class U>
inline T atomicSub(T* p, U v) {
  simt::Preempt();
  T o = *p;
  *p = o - static_cast<T>(v);
  return o;
}
template <class T, class U>
inline T atomicMin(T* p, U v) {
  simt::Preempt();
  T o = *p;
  if (static_cast<T>(v) < o) *p = static_cast<T>(v);
  return o;
}
template <class T, class U>
inline T atomicMax(T* p, U v) {
  simt::Preempt();
  T o = *p;
  if (o < static_cast<T>(v)) *p = static_cast<T>(v);
  return o;
}
template <class T, class U>
inline T atomicExch(T* p, U v) {
  simt::Preempt();
  T o = *p;
  *p = static_cast<T>(v);
  return o;
}
template <class T, class U, class V>
inline T atomicCAS(T* p, U cmp, V v) {
  simt::Preempt();
  T o = *p;
  if (o == static_cast<T>(cmp)) *p = static_cast<T>(v);
  return o;
}
inline void __threadfence() { simt::Preempt(); }
inline void __syncthreads() { simt::BlockOp(0, 0); }
inline int __syncthreads_count(int p) { return simt::BlockOp(p, 1); }
inline int __syncthreads_or(int p) { return simt::BlockOp(p, 2); }
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int off) {
  return simt::FromBits<T>(simt::WarpOp(simt::kShflXor, simt::Bits(v), off));
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
  return simt::FromBits<T>(simt::WarpOp(simt::kShfl, simt::Bits(v), src));
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, unsigned d) {
  return simt::FromBits<T>(simt::WarpOp(simt::kShflUp, simt::Bits(v), static_cast<int>(d)));
}
inline unsigned __ballot_sync(unsigned, int pred) {
  return static_cast<unsigned>(simt::WarpOp(simt::kBallot, pred != 0, 0));
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return static_cast<unsigned>(simt::WarpOp(simt::kReduceAdd, v, 0));
}
inline int __ffs(unsigned x) { return x == 0 ? 0 : __builtin_ctz(x) + 1; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(unsigned x) { return x == 0 ? 32 : __builtin_clz(x); }
