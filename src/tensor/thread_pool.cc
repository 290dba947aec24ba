// ThreadPool implementation (thread_pool.h): persistent workers, one loop at a time; the
// caller runs tasks too and never waits for a worker that has not claimed a task.
//
// One atomic word describes the current loop: generation (16 bits) | n_tasks (24) | next
// task (24). A thread claims a task by a compare-exchange that bumps `next task` while the
// generation still matches, so a worker that wakes late (descheduled on a busy machine, or
// more threads than cores) finds nothing to claim instead of holding the loop up. The
// owner returns when `done` reaches n_tasks; the function pointer of a loop is only read
// by threads holding an unfinished task of that loop, so it stays valid.
//
// Waiting: a worker spins for kSpinMicros after its last loop (decode runs hundreds of short
// loops back to back, and a futex wake costs more than a whole small loop), then sleeps on
// a condition variable. The owner notifies only when some worker sleeps.
#include "tensor/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/check.h"
#include "base/thread_name.h"

namespace shardlm {
namespace {

// Long enough to bridge the gap between consecutive loops of one forward pass, short
// enough that an idle server stops burning cores at once.
constexpr int64_t kSpinMicros = 200;

constexpr int kIndexBits = 24;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr size_t kMaxTasks = kIndexMask;  // per loop; far above any matmul's task count

uint64_t Generation(uint64_t word) { return word >> (2 * kIndexBits); }
uint64_t NumTasks(uint64_t word) { return (word >> kIndexBits) & kIndexMask; }
uint64_t NextTask(uint64_t word) { return word & kIndexMask; }

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The pool whose task the current thread is running, to catch nested ParallelFor calls
// (a non-goal that would corrupt the loop state) instead of deadlocking.
thread_local const void* tls_running_pool = nullptr;

void PinCurrentThread(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  // Best effort: a core outside the process's cpuset leaves the thread unpinned.
  (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::vector<int> cores;

  std::atomic<uint64_t> loop{0};  // generation | n_tasks | next task
  std::atomic<const TaskFn*> fn{nullptr};
  std::atomic<size_t> done{0};  // tasks finished in the current loop

  std::mutex mu;
  std::condition_variable cv;
  int sleepers = 0;   // guarded by mu
  bool stop = false;  // guarded by mu

  std::thread::id pinned_owner;

  // Claims and runs tasks of generation `gen` until none is left.
  void RunTasks(uint64_t gen, size_t worker) {
    uint64_t word = loop.load(std::memory_order_acquire);
    for (;;) {
      if (Generation(word) != gen || NextTask(word) >= NumTasks(word)) return;
      if (!loop.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        continue;  // `word` was reloaded
      }
      tls_running_pool = this;
      (*fn.load(std::memory_order_acquire))(static_cast<size_t>(NextTask(word)), worker);
      tls_running_pool = nullptr;
      done.fetch_add(1, std::memory_order_release);
      word = loop.load(std::memory_order_acquire);
    }
  }

  // Waits until the generation differs from `seen`; returns it, or nothing on shutdown.
  bool WaitForLoop(uint64_t seen, uint64_t* gen) {
    const auto start = std::chrono::steady_clock::now();
    for (int spin = 0;; ++spin) {
      *gen = Generation(loop.load(std::memory_order_acquire));
      if (*gen != seen) return true;
      CpuRelax();
      if ((spin & 255) == 255) {
        if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(kSpinMicros)) {
          break;
        }
        std::this_thread::yield();
      }
    }
    std::unique_lock<std::mutex> lock(mu);
    ++sleepers;
    cv.wait(lock, [&] {
      *gen = Generation(loop.load(std::memory_order_acquire));
      return stop || *gen != seen;
    });
    --sleepers;
    return !stop;
  }

  void WorkerMain(size_t worker) {
    SetThreadName("compute-" + std::to_string(worker + 1));
    if (!cores.empty()) PinCurrentThread(cores[worker % cores.size()]);
    uint64_t gen = 0;
    while (WaitForLoop(gen, &gen)) RunTasks(gen, worker);
  }
};

ThreadPool::ThreadPool(int n_threads, std::vector<int> cores)
    : n_threads_(n_threads), impl_(std::make_unique<Impl>()) {
  SHARDLM_CHECK_MSG(n_threads >= 1, "thread pool needs >= 1 thread, got %d", n_threads);
  impl_->cores = std::move(cores);
  for (int i = 1; i < n_threads; ++i) {
    impl_->workers.emplace_back([impl = impl_.get(), i] { impl->WorkerMain(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (std::thread& t : impl_->workers) t.join();
}

void ThreadPool::ParallelFor(size_t n_tasks, TaskFn fn) {
  Impl& impl = *impl_;
  SHARDLM_CHECK_MSG(tls_running_pool != &impl, "nested ParallelFor on the same ThreadPool");
  if (!impl.cores.empty() && impl.pinned_owner != std::this_thread::get_id()) {
    PinCurrentThread(impl.cores[0]);
    impl.pinned_owner = std::this_thread::get_id();
  }
  if (n_tasks == 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    tls_running_pool = &impl;
    for (size_t task = 0; task < n_tasks; ++task) fn(task, 0);
    tls_running_pool = nullptr;
    return;
  }
  SHARDLM_CHECK_MSG(n_tasks <= kMaxTasks, "ParallelFor over %zu tasks (max %zu)", n_tasks,
                    kMaxTasks);
  const uint64_t gen = (Generation(impl.loop.load(std::memory_order_relaxed)) + 1) & 0xFFFF;
  impl.fn.store(&fn, std::memory_order_relaxed);
  impl.done.store(0, std::memory_order_relaxed);
  impl.loop.store((gen << (2 * kIndexBits)) | (uint64_t{n_tasks} << kIndexBits),
                  std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    if (impl.sleepers > 0) impl.cv.notify_all();
  }
  impl.RunTasks(gen, 0);
  for (int spin = 0; impl.done.load(std::memory_order_acquire) != n_tasks; ++spin) {
    if (spin < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();  // a worker holding a task was descheduled
    }
  }
}

void ThreadPool::ParallelForAsGuest(size_t n_tasks, TaskFn fn) {
  Impl& impl = *impl_;
  if (impl.cores.empty()) return ParallelFor(n_tasks, fn);
  cpu_set_t saved;
  const bool restore = pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0;
  const std::thread::id owner = impl.pinned_owner;
  ParallelFor(n_tasks, fn);
  impl.pinned_owner = owner;
  if (restore) (void)pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
}

}  // namespace shardlm
