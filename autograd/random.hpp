// A small, seedable, serialisable random generator (xoshiro256**, seeded by splitmix64).
// Its whole state is four 64-bit words, so checkpoints can save and restore it exactly.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace tg {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { seed_(seed); }

  void seed_(uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ull;  // splitmix64
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
    has_spare_ = false;
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // uniform in [0, 1) with 24 random bits
  float uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // uniform integer in [0, n)
  uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }
  // standard normal (Box-Muller, caching the second value)
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform_double(), u2 = uniform_double();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1)), th = 6.283185307179586 * u2;
    spare_ = r * std::sin(th);
    has_spare_ = true;
    return r * std::cos(th);
  }

  // Full state (for checkpoints): 4 words, plus the cached normal.
  struct State {
    std::array<uint64_t, 4> s;
    bool has_spare;
    double spare;
  };
  State state() const { return {s_, has_spare_, spare_}; }
  void set_state(const State& st) {
    s_ = st.s;
    has_spare_ = st.has_spare;
    spare_ = st.spare;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_{};
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace tg
