// Fiber scheduler and runtime stand-ins of the CUDA emulation (see emulation.hpp).
#include "emulation.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

// Minimal x86-64 (System V) context switch: saves the callee-saved registers, MXCSR and the x87
// control word on the current stack, stores the stack pointer in *save_sp and resumes load_sp.
// (glibc's swapcontext also saves the signal mask: one system call per switch.)
extern "C" void emu_switch_context(void** save_sp, void* load_sp);
asm(R"(
.text
.globl emu_switch_context
.type emu_switch_context,@function
emu_switch_context:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch_context,.-emu_switch_context
)");

namespace emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

struct PendingCopy {
  void* dst;
  const void* src;
  int bytes;
  int src_bytes;
};

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while switched out
  char* stack = nullptr;
  uint3 tid{};
  bool done = false;
  std::vector<PendingCopy> open_group;
  std::deque<std::vector<PendingCopy>> committed;
};

struct Warp {
  int live = 0;
  int arrived = 0;
  uint64_t generation = 0;
  alignas(16) unsigned char slots[32][64];
};

struct NamedBarrier {
  int arrived = 0;
  uint64_t generation = 0;
};

struct Cta {
  dim3 grid, block;
  uint3 index{};
  std::vector<unsigned char> smem;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int live = 0;
  int current = -1;
  int barrier_arrived = 0;
  uint64_t barrier_generation = 0;
  NamedBarrier named[16];
  void* scheduler_sp = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<std::unique_ptr<char[]>> own_stacks;  // concurrent grids: this CTA's fiber stacks
  struct Cluster* cluster = nullptr;                // cluster launches: the CTA's cluster
  unsigned cluster_rank = 0;
};

/// The CTAs of one thread-block cluster (by rank) and its barrier.
struct Cluster {
  std::vector<Cta*> ctas;
  int arrived = 0;
  uint64_t generation = 0;
  int live() const {
    int n = 0;
    for (const Cta* c : ctas) n += c->live;
    return n;
  }
};

Cta* g_cta = nullptr;
uint64_t g_events = 0;  // barrier arrivals and finished threads: progress of the scheduler
std::vector<std::unique_ptr<char[]>> g_stacks;

enum class Order { forward, reverse, random };
Order schedule_order() {
  static const Order order = [] {
    const char* env = std::getenv("LATTE_EMU_ORDER");
    const std::string s = env ? env : "forward";
    return s == "reverse" ? Order::reverse : s == "random" ? Order::random : Order::forward;
  }();
  return order;
}
bool lazy_copies() {
  static const bool lazy = [] {
    const char* env = std::getenv("LATTE_EMU_CP_ASYNC");
    return env && std::string(env) == "lazy";
  }();
  return lazy;
}

Fiber& current_fiber() { return g_cta->fibers[g_cta->current]; }
int linear_tid(const uint3& t) { return t.x + g_cta->block.x * (t.y + g_cta->block.y * t.z); }
Warp& current_warp() { return g_cta->warps[linear_tid(current_fiber().tid) / 32]; }

void yield() { emu_switch_context(&current_fiber().sp, g_cta->scheduler_sp); }

[[noreturn]] void fiber_entry() {
  (*g_cta->body)();
  void* unused = nullptr;
  emu_switch_context(&unused, g_cta->scheduler_sp);  // never resumed
  std::abort();
}

// A fresh stack whose first switch "returns" into fiber_entry with the ABI's alignment.
void* initial_stack(char* stack) {
#if defined(__SANITIZE_ADDRESS__)
  // Frames of the fiber that used this stack before never returned: clear their redzones.
  ASAN_UNPOISON_MEMORY_REGION(stack, kStackBytes);
#endif
  uintptr_t top = reinterpret_cast<uintptr_t>(stack + kStackBytes) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                                // fake return address of fiber_entry
  *--sp = reinterpret_cast<void*>(&fiber_entry);  // popped by ret
  for (int i = 0; i < 6; ++i) *--sp = nullptr;    // rbp rbx r12 r13 r14 r15
  uint32_t control[2];
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  *--sp = *reinterpret_cast<void**>(control);  // mxcsr | x87 control word
  return sp;
}

void do_copy(const PendingCopy& c) {
  if (c.src_bytes > 0) std::memcpy(c.dst, c.src, c.src_bytes);
  if (c.src_bytes < c.bytes) std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
}

void release_if_complete() {
  Cta& c = *g_cta;
  if (c.live > 0 && c.barrier_arrived > 0 && c.barrier_arrived == c.live) {
    c.barrier_arrived = 0;
    ++c.barrier_generation;
  }
  for (Warp& w : c.warps) {
    if (w.live > 0 && w.arrived > 0 && w.arrived == w.live) {
      w.arrived = 0;
      ++w.generation;
    }
  }
}

/// Prepares `cta` to run `body` as CTA `index`; stacks from `stacks` (at least one per thread).
void setup_cta(Cta& cta, const LaunchConfig& config, uint3 index, const std::function<void()>& body,
               std::vector<std::unique_ptr<char[]>>& stacks) {
  cta.grid = config.grid;
  cta.block = config.block;
  cta.index = index;
  cta.body = &body;
  cta.smem.assign(std::max<size_t>(config.smem, 16), 0xff);  // garbage (NaN) until written
  const int n = config.block.x * config.block.y * config.block.z;
  cta.fibers.resize(n);
  cta.warps.resize((n + 31) / 32);
  for (int i = 0; i < n; ++i) cta.warps[i / 32].live++;
  cta.live = n;
  while (stacks.size() < static_cast<size_t>(n)) stacks.emplace_back(new char[kStackBytes]);
  for (int i = 0; i < n; ++i) {
    Fiber& f = cta.fibers[i];
    f.tid =
        make_uint3(i % config.block.x, (i / config.block.x) % config.block.y, i / (config.block.x * config.block.y));
    f.stack = stacks[i].get();
    f.sp = initial_stack(f.stack);
  }
}

/// One round over the CTA's unfinished threads, in the configured order.
void run_round(Cta& cta, std::vector<int>& order) {
  static std::mt19937 rng(12345);
  if (schedule_order() == Order::random) std::shuffle(order.begin(), order.end(), rng);
  g_cta = &cta;
  for (int i : order) {
    if (cta.fibers[i].done) continue;
    cta.current = i;
    emu_switch_context(&cta.scheduler_sp, cta.fibers[i].sp);
  }
  g_cta = nullptr;
}

std::vector<int> thread_order(int n) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  if (schedule_order() == Order::reverse) std::reverse(order.begin(), order.end());
  return order;
}

/// Wraps a kernel body so that a finished fiber marks itself done and leaves the barrier counts.
std::function<void()> finishing(const std::function<void()>& body) {
  return [&body] {
    body();
    Fiber& f = current_fiber();
    f.done = true;
    g_cta->live--;
    ++g_events;
    current_warp().live--;
    release_if_complete();
  };
}

void run_cta(const LaunchConfig& config, uint3 index, const std::function<void()>& body) {
  Cta cta;
  setup_cta(cta, config, index, body, g_stacks);
  std::vector<int> order = thread_order(static_cast<int>(cta.fibers.size()));
  while (cta.live > 0) {
    const uint64_t events_before = g_events;
    run_round(cta, order);
    if (g_events == events_before) {
      std::fprintf(stderr, "emulation: deadlock in CTA (%u,%u,%u): %d threads wait at barriers that cannot complete\n",
                   index.x, index.y, index.z, cta.live);
      std::abort();
    }
  }
}

}  // namespace

uint3 thread_idx() { return current_fiber().tid; }
uint3 block_idx() { return g_cta->index; }
dim3 block_dim() { return g_cta->block; }
dim3 grid_dim() { return g_cta->grid; }
void* dynamic_smem() { return g_cta->smem.data(); }
int lane_id() { return linear_tid(current_fiber().tid) % 32; }
void* warp_slot(int lane) { return current_warp().slots[lane]; }

void syncthreads() {
  Cta& c = *g_cta;
  const uint64_t generation = c.barrier_generation;
  ++c.barrier_arrived;
  ++g_events;
  release_if_complete();
  while (c.barrier_generation == generation) yield();
}

void yield_now() { yield(); }
void progress() { ++g_events; }

void named_barrier(int id, int count) {
  NamedBarrier& b = g_cta->named[id & 15];
  const uint64_t generation = b.generation;
  ++g_events;
  if (++b.arrived == count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == generation) yield();
}

void warp_barrier() {
  Warp& w = current_warp();
  const uint64_t generation = w.generation;
  ++w.arrived;
  ++g_events;
  release_if_complete();
  while (w.generation == generation) yield();
}

void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
  const PendingCopy copy{dst, src, bytes, src_bytes};
  if (lazy_copies()) {
    current_fiber().open_group.push_back(copy);
  } else {
    do_copy(copy);
  }
}
void cp_async_commit() {
  Fiber& f = current_fiber();
  f.committed.push_back(std::move(f.open_group));
  f.open_group.clear();
}
void cp_async_wait(int pending) {
  Fiber& f = current_fiber();
  while (static_cast<int>(f.committed.size()) > pending) {
    for (const PendingCopy& c : f.committed.front()) do_copy(c);
    f.committed.pop_front();
  }
}

void run_grid(const LaunchConfig& config, const std::function<void()>& body) {
  const std::function<void()> wrapped = finishing(body);
  for (unsigned z = 0; z < config.grid.z; ++z) {
    for (unsigned y = 0; y < config.grid.y; ++y) {
      for (unsigned x = 0; x < config.grid.x; ++x) run_cta(config, make_uint3(x, y, z), wrapped);
    }
  }
}

namespace {

/// Runs the CTAs at `indices` at once, their threads interleaved round by round; `cluster` (or null) is
/// the cluster they form, in the order of `indices`.
void run_together(const LaunchConfig& config, const std::vector<uint3>& indices, const std::function<void()>& body,
                  Cluster* cluster, const char* what) {
  std::vector<std::unique_ptr<Cta>> ctas;
  for (const uint3& index : indices) {
    ctas.push_back(std::make_unique<Cta>());
    setup_cta(*ctas.back(), config, index, body, ctas.back()->own_stacks);
    if (cluster != nullptr) {
      ctas.back()->cluster = cluster;
      ctas.back()->cluster_rank = static_cast<unsigned>(cluster->ctas.size());
      cluster->ctas.push_back(ctas.back().get());
    }
  }
  std::vector<int> order = thread_order(static_cast<int>(ctas.front()->fibers.size()));
  for (;;) {
    bool live = false;
    const uint64_t events_before = g_events;
    for (auto& cta : ctas) {
      if (cta->live == 0) continue;
      live = true;
      run_round(*cta, order);
    }
    if (!live) break;
    if (g_events == events_before) {
      std::fprintf(stderr, "emulation: deadlock in %s of %zu CTAs: every live thread waits\n", what, ctas.size());
      std::abort();
    }
  }
}

}  // namespace

void run_grid_concurrent(const LaunchConfig& config, const std::function<void()>& body) {
  const std::function<void()> wrapped = finishing(body);
  const unsigned n = config.grid.x * config.grid.y * config.grid.z;
  std::vector<uint3> indices;
  for (unsigned i = 0; i < n; ++i) {
    indices.push_back(
        make_uint3(i % config.grid.x, (i / config.grid.x) % config.grid.y, i / (config.grid.x * config.grid.y)));
  }
  run_together(config, indices, wrapped, nullptr, "a cooperative grid");
}

void run_grid_clusters(const LaunchConfig& config, dim3 cluster, const std::function<void()>& body) {
  const std::function<void()> wrapped = finishing(body);
  for (unsigned z0 = 0; z0 < config.grid.z; z0 += cluster.z) {
    for (unsigned y0 = 0; y0 < config.grid.y; y0 += cluster.y) {
      for (unsigned x0 = 0; x0 < config.grid.x; x0 += cluster.x) {
        std::vector<uint3> indices;  // rank order: x fastest
        for (unsigned z = 0; z < cluster.z; ++z) {
          for (unsigned y = 0; y < cluster.y; ++y) {
            for (unsigned x = 0; x < cluster.x; ++x) indices.push_back(make_uint3(x0 + x, y0 + y, z0 + z));
          }
        }
        Cluster c;
        run_together(config, indices, wrapped, &c, "a cluster");
      }
    }
  }
}

unsigned cluster_rank() { return g_cta->cluster != nullptr ? g_cta->cluster_rank : 0; }

void cluster_sync() {
  Cluster* cl = g_cta->cluster;
  if (cl == nullptr) {  // a launch without clusters: a cluster of one CTA
    syncthreads();
    return;
  }
  const uint64_t generation = cl->generation;
  ++g_events;
  if (++cl->arrived == cl->live()) {
    cl->arrived = 0;
    ++cl->generation;
    return;
  }
  while (cl->generation == generation) yield();
}

void* cluster_map(const void* local, unsigned rank) {
  Cta& me = *g_cta;
  const auto* base = me.smem.data();
  const auto* p = static_cast<const unsigned char*>(local);
  if (p < base || p >= base + me.smem.size()) {
    std::fprintf(stderr, "emulation: cluster_map of an address outside the CTA's dynamic shared memory\n");
    std::abort();
  }
  Cta* target = me.cluster != nullptr && rank < me.cluster->ctas.size() ? me.cluster->ctas[rank]
                : rank == 0                                             ? &me
                                                                        : nullptr;
  if (target == nullptr) {
    std::fprintf(stderr, "emulation: cluster_map to rank %u, outside the cluster\n", rank);
    std::abort();
  }
  return target->smem.data() + (p - base);
}

cudaError_t malloc_device(void** ptr, size_t bytes) {
  *ptr = std::malloc(std::max<size_t>(bytes, 1));
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t free_device(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t mem_get_info(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = size_t{1} << 34;
  return cudaSuccess;
}
cudaError_t get_device_properties(cudaDeviceProp* prop, int device) {
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "emulated H200", sizeof prop->name - 1);
  prop->major = 9;
  prop->minor = 0;
  get_device_attribute(&prop->multiProcessorCount, cudaDevAttrMultiProcessorCount, device);
  int smem = 0;
  get_device_attribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  prop->sharedMemPerBlockOptin = static_cast<size_t>(smem);
  prop->l2CacheSize = 60 << 20;
  prop->totalGlobalMem = size_t{1} << 34;
  return cudaSuccess;
}
cudaError_t max_active_clusters(int* clusters, const cudaLaunchConfig_t* config) {
  int size = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      const auto& d = config->attrs[i].val.clusterDim;
      size = static_cast<int>(d.x * d.y * d.z);
    }
  }
  int sms = 0;
  get_device_attribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  *clusters = sms / std::max(size, 1);
  return cudaSuccess;
}

cudaError_t get_device_attribute(int* value, cudaDeviceAttr attr, int) {
  static const int smem = [] {
    const char* env = std::getenv("LATTE_EMU_SMEM_PER_BLOCK");
    return env ? std::atoi(env) : 232448;  // H100/H200
  }();
  static const int sms = [] {
    const char* env = std::getenv("LATTE_EMU_SMS");
    return env ? std::atoi(env) : 132;
  }();
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = sms;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = smem;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    default:
      *value = 0;
      return cudaSuccess;
  }
}

}  // namespace emu
