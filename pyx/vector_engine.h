// vector_engine.h: host-only glue of the CPU vector engine (pyx/_vector.pyx): where a
// batch's environments and output rows live, and a small worker pool for the
// asynchronous mode (send/recv with batch_size < num_envs, as EnvPool and ale-py have
// it). The per-environment work is cuda/vector_env.h's vec_execute, the same code a GPU
// kernel runs; this file only schedules it.
#pragma once
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

struct VecJob {
  int32_t env, action;
  float strength;
  int32_t force_reset;
};

// Worker threads that take jobs in submission order and write each environment's
// result into its own row of a staging batch (row = environment id), then append the
// id to a completion list; wait() hands out ids in completion order. An environment
// is never submitted again before its result was taken, so rows are never shared.
class VecPool {
 public:
  VecPool(const VecEngine& g, const VecBatch& stage, int num_threads) : g_(g), stage_(stage) {
    for (int t = 0; t < num_threads; ++t) workers_.emplace_back([this] { loop(); });
  }
  ~VecPool() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_job_.notify_all();
    for (auto& w : workers_) w.join();
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
    cv_done_.wait(lock, [&] { return (int)done_.size() >= n; });
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
      engine_run_one(g_, job.env, job.force_reset != 0, job.action, job.strength, stage_, job.env);
      {
        std::lock_guard<std::mutex> lock(m_);
        done_.push_back(job.env);
      }
      cv_done_.notify_all();
    }
  }
  VecEngine g_;
  VecBatch stage_;
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_job_, cv_done_;
  std::deque<VecJob> jobs_;
  std::deque<int32_t> done_;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace hs
