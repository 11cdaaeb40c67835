// act_core.cpp: hybridsim's act() loop in plain C++, without Python, for profiling the
// core (benchmarks/act_core.py builds and runs it; see BENCHMARKS.md).
// Usage: act_core DIR GAME FRAMES [REPEATS]
//   DIR/GAME.state  the AleEnv bytes of a loaded environment (Emulator.clone_state body)
//   DIR/GAME.rom    the ROM image, DIR/GAME.acts  int32 actions (4,096, used cyclically)
// Frames are emulated as ALEInterface.act emulates them when the screen is not read
// (lazily drawn); prints the best frames/s of REPEATS runs from the same state.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ale_env.h"

static bool read_file(const std::string& path, std::vector<uint8_t>& out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  uint8_t chunk[4096];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) out.insert(out.end(), chunk, chunk + n);
  std::fclose(f);
  return true;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s DIR GAME FRAMES [REPEATS]\n", argv[0]);
    return 2;
  }
  const std::string base = std::string(argv[1]) + "/" + argv[2];
  const long frames = std::atol(argv[3]);
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 5;
  std::vector<uint8_t> state, rom, action_bytes;
  if (!read_file(base + ".state", state) || !read_file(base + ".rom", rom) ||
      !read_file(base + ".acts", action_bytes)) {
    std::fprintf(stderr, "cannot read %s.{state,rom,acts}\n", base.c_str());
    return 2;
  }
  if (state.size() != sizeof(hs::AleEnv) || action_bytes.size() != 4096 * sizeof(int32_t)) {
    std::fprintf(stderr, "%s: state of %zu bytes (this build: %zu) or wrong action file\n", base.c_str(),
                 state.size(), sizeof(hs::AleEnv));
    return 2;
  }
  std::vector<int32_t> actions(4096);
  std::memcpy(actions.data(), action_bytes.data(), action_bytes.size());
  static hs::AleEnv start, env;
  static uint8_t buffers[2][hs::kFrameBytes];
  static hs::FrameReplay replay;
  std::memcpy(&start, state.data(), sizeof start);
  double best = 1e30;
  long reward = 0;
  for (int r = 0; r < repeats; ++r) {
    env = start;
    std::memset(&replay, 0, sizeof replay);
    replay.lazy = 1;
    hs::FrameBuffers fbs;
    fbs.buf[0] = buffers[0];
    fbs.buf[1] = buffers[1];
    fbs.shown = 0;
    fbs.replay = &replay;
    reward = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < frames; ++i) {
      reward += hs::env_act(env, rom.data(), fbs, actions[i & 4095], hs::B_NOOP, 1.0f, 0.0f);
      if (hs::env_terminal(env)) hs::env_reset(env, rom.data(), fbs);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (seconds < best) best = seconds;
  }
  std::printf("%s %.0f frames/s (reward %ld, frame %d)\n", argv[2], frames / best, reward, env.frame_number);
  return 0;
}
