// vector_engine.h: host-only glue of the CPU vector engine (pyx/_vector.pyx): where a
// batch's environments and output rows live, and a small worker pool for the
// asynchronous mode (send/recv with batch_size < num_envs, as EnvPool and ale-py have
// it). The per-environment work is cuda/vector_env.h's vec_execute, the same code a GPU
// kernel runs; this file only schedules it.
#pragma once
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "vector_env.h"

namespace hs {

// Output rows of a batch: row j of each array (obs rows are obs_stride bytes apart).
struct VecBatch {
  uint8_t* obs;
  uint8_t* final_obs;  // null: SAME_STEP final observations not wanted
  int32_t* reward;
  uint8_t* terminated;
  uint8_t* truncated;
  int32_t* lives;
  int32_t* frame_number;
  int32_t* episode_frame_number;
  uint8_t* has_final;  // 1 where final_obs row was written
  long long obs_stride;
};

// Everything one environment's step needs; plain pointers into the engine's arrays.
struct VecEngine {
  VecConfig cfg;
  const pp::ResizePlan* plan;
  const uint8_t* rom;
  AleEnv* envs;
  VecEnvState* states;
  VecEnvBuffers* bufs;
};

// Row `row` of the batch outputs as one environment's output pointers.
inline VecOutput engine_row(const VecBatch& out, long long row, bool with_final) {
  VecOutput o;
  o.obs = out.obs + row * out.obs_stride;
  o.final_obs = with_final && out.final_obs ? out.final_obs + row * out.obs_stride : nullptr;
  o.reward = out.reward + row;
  o.terminated = out.terminated + row;
  o.truncated = out.truncated + row;
  o.lives = out.lives + row;
  o.frame_number = out.frame_number + row;
  o.episode_frame_number = out.episode_frame_number + row;
  return o;
}

inline void engine_run_one(const VecEngine& g, int32_t env, bool force_reset, int32_t action,
                           float strength, const VecBatch& out, long long row) {
  VecOutput o = engine_row(out, row, true);
  int32_t f = vec_execute(g.cfg, *g.plan, g.rom, g.envs[env], g.states[env], g.bufs[env], force_reset,
                          action, strength, o);
  if (out.has_final) out.has_final[row] = (uint8_t)f;
}

// The current state of one environment as a result row (partial resets report the
// environments they leave alone this way).
inline void engine_write_current(const VecEngine& g, int32_t env, const VecBatch& out, long long row) {
  VecOutput o = engine_row(out, row, false);
  vec_write(g.cfg, g.envs[env], g.states[env], g.bufs[env], o);
  if (out.has_final) out.has_final[row] = 0;
}

// One synchronous batch (VecPool::run): where its rows go, and how many of its jobs
// still run (run() waits for its own).
struct VecSyncBatch {
  const VecBatch* out;
  int left;
};

struct VecJob {
  int32_t env, action;
  float strength;
  int32_t force_reset;
  long long row;       // the row of sync->out
  VecSyncBatch* sync;  // set by run(); null: an asynchronous job, row env of the staging batch
};

// Worker threads that take jobs in submission order. An asynchronous job (submit)
// writes its environment's result into that environment's row of a staging batch and
// appends the id to a completion list; wait() hands out ids in completion order. An
// environment is never submitted again before its result was taken, so rows are never
// shared. A synchronous batch (run) writes into the caller's rows; its own count of
// running jobs (VecSyncBatch) tells run() when they are all done.
// cores (may be null): worker t runs on CPU cores[t] only; pin_errors[t] is then 0 or
// pthread_setaffinity_np's error number (EINVAL: a core this process may not use).
class VecPool {
 public:
  VecPool(const VecEngine& g, const VecBatch& stage, int num_threads, const int* cores = nullptr,
          int* pin_errors = nullptr)
      : g_(g), stage_(stage) {
    try {
      for (int t = 0; t < num_threads; ++t) {
        workers_.emplace_back([this] { loop(); });
        // before any job is submitted, so every job of a pinned pool runs on its core
        if (cores) pin_errors[t] = pin_to_core(workers_.back(), cores[t]);
      }
    } catch (...) {  // no thread to be had (ulimit -u): joinable threads must not be destroyed
      stop_workers();
      throw;
    }
  }
  ~VecPool() { stop_workers(); }
  // Run n jobs, each into its row of `out`, and return when all are done. One batch at
  // a time: two threads stepping one environment take turns.
  void run(const VecBatch& out, VecJob* jobs, int n) {
    std::lock_guard<std::mutex> one_batch(run_m_);
    VecSyncBatch batch{&out, n};
    {
      std::lock_guard<std::mutex> lock(m_);
      for (int k = 0; k < n; ++k) {
        jobs[k].sync = &batch;
        jobs_.push_back(jobs[k]);
      }
    }
    cv_job_.notify_all();
    std::unique_lock<std::mutex> lock(m_);
    cv_sync_.wait(lock, [&] { return batch.left == 0; });
  }
  void submit(const VecJob* jobs, int n) {
    {
      std::lock_guard<std::mutex> lock(m_);
      for (int k = 0; k < n; ++k) jobs_.push_back(jobs[k]);
      pending_ += n;
    }
    cv_job_.notify_all();
  }
  // Block until n results are complete; write their environment ids in completion order.
  void wait(int32_t* ids, int n) {
    std::unique_lock<std::mutex> lock(m_);
    awaited_ = n;
    cv_done_.wait(lock, [&] { return (int)done_.size() >= n; });
    awaited_ = 0;
    for (int k = 0; k < n; ++k) {
      ids[k] = done_.front();
      done_.pop_front();
    }
    pending_ -= n;
  }
  int in_flight() {
    std::lock_guard<std::mutex> lock(m_);
    return pending_;
  }
  int ready() {
    std::lock_guard<std::mutex> lock(m_);
    return (int)done_.size();
  }

 private:
  void stop_workers() {
    std::lock_guard<std::mutex> one_batch(run_m_);  // after a batch another thread runs
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_job_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  static int pin_to_core(std::thread& worker, int core) {
#if defined(__linux__)
    if (core < 0 || core >= CPU_SETSIZE) return EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    return pthread_setaffinity_np(worker.native_handle(), sizeof(set), &set);
#else
    (void)worker, (void)core;
    return ENOSYS;  // no per-thread affinity call
#endif
  }
  void loop() {
    for (;;) {
      VecJob job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_job_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (stop_) return;
        job = jobs_.front();
        jobs_.pop_front();
      }
      engine_run_one(g_, job.env, job.force_reset != 0, job.action, job.strength,
                     job.sync ? *job.sync->out : stage_, job.sync ? job.row : job.env);
      // wake a waiter once, when its batch is complete (not once per environment: it
      // would take a core from the workers 32 times a step for nothing)
      if (job.sync) {
        bool last;
        {
          std::lock_guard<std::mutex> lock(m_);
          last = --job.sync->left == 0;
        }
        if (last) cv_sync_.notify_all();
        continue;
      }
      bool enough;
      {
        std::lock_guard<std::mutex> lock(m_);
        done_.push_back(job.env);
        enough = awaited_ > 0 && (int)done_.size() >= awaited_;
      }
      if (enough) cv_done_.notify_all();
    }
  }
  VecEngine g_;
  VecBatch stage_;
  std::vector<std::thread> workers_;
  std::mutex m_, run_m_;
  std::condition_variable cv_job_, cv_done_, cv_sync_;
  std::deque<VecJob> jobs_;
  std::deque<int32_t> done_;
  int pending_ = 0;
  int awaited_ = 0;  // results wait() needs before it returns; 0: nobody waits
  bool stop_ = false;
};

}  // namespace hs
