// ThreadPool: persistent worker threads that run one parallel loop at a time.
//
// Goals: no thread creation per op (a decode step runs hundreds of loops); explicit ranges
// so results never depend on the number of threads (each output element is computed by
// exactly one task, and a task's work does not depend on which worker runs it); optional
// pinning of workers to a core set (a stage's device "cpu:0-7").
// Non-goals: nested parallelism, work stealing between loops.
//
// Thread safety: ParallelFor is called by one owner thread at a time. Lifetime: workers
// are joined in the destructor.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace shardlm {

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
  void ParallelFor(size_t n_tasks, const std::function<void(size_t task, size_t worker)>& fn);

 private:
  struct Impl;
  int n_threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm
