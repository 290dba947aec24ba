// ThreadPool: persistent worker threads that run one parallel loop at a time.
//
// Goals: no thread creation and no allocation per op (a decode step runs hundreds of loops);
// explicit ranges so results never depend on the number of threads (each output element is
// computed by exactly one task, and a task's work does not depend on which worker runs it);
// optional pinning of workers to a core set (a stage's device "cpu:0-7").
// Non-goals: nested parallelism, work stealing between loops.
//
// Thread safety: ParallelFor is called by one owner thread at a time. Lifetime: workers
// are joined in the destructor.
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

namespace shardlm {

class TaskFn;

// What TaskFn refers to: a callable fn(task, worker) other than a TaskFn (that one is copied).
template <typename Fn>
concept TaskBody =
    std::invocable<Fn&, size_t, size_t> && !std::same_as<std::remove_cvref_t<Fn>, TaskFn>;

// The body of a parallel loop, fn(task, worker), by reference: the callable's address and a
// function that calls it. Unlike std::function it never allocates (a lambda capturing more
// than two pointers would), so the hundreds of loops of a decode step allocate nothing. The
// callable must outlive the call it is passed to, as a lambda written in the call does.
class TaskFn {
 public:
  template <TaskBody Fn>
  TaskFn(Fn&& fn)  // NOLINT(google-explicit-constructor): a lambda converts at the call
      : callable_(const_cast<void*>(static_cast<const void*>(&fn))),
        call_([](void* callable, size_t task, size_t worker) {
          (*static_cast<std::remove_reference_t<Fn>*>(callable))(task, worker);
        }) {}

  void operator()(size_t task, size_t worker) const { call_(callable_, task, worker); }

 private:
  void* callable_;
  void (*call_)(void* callable, size_t task, size_t worker);
};

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread. `cores`, if not empty, pins thread i to
  // cores[i % cores.size()].
  explicit ThreadPool(int n_threads, std::vector<int> cores = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, worker) for every task in [0, n_tasks), handing tasks out through an
  // atomic counter (uneven rows balance themselves); returns when all are done.
  void ParallelFor(size_t n_tasks, TaskFn fn);

  // ParallelFor called from a thread that is not the pool's owner and must stay as it was
  // (the loader, which repacks a stage's weights on the stage's threads so that the memory
  // is first touched by the cores that will read it): on a pinned pool the caller takes part
  // pinned to the first core, then gets its CPU affinity back and is no longer the owner.
  void ParallelForAsGuest(size_t n_tasks, TaskFn fn);

 private:
  struct Impl;
  int n_threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm
