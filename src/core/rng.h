// A small, portable, seeded pseudo-random generator (xoshiro256**, seeded by
// splitmix64) with the few distributions the project uses.
//
// The standard library's distributions differ between implementations, so
// results drawn through them would not be reproducible across toolchains;
// these are written out here and give the same numbers everywhere for a seed.
// Not thread-safe: give each thread (or each component) its own Rng.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace gandiva::core {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : s_) s = SplitMix64(x);
  }

  // A new generator whose stream is independent of this one's, derived from
  // this one's seed and `stream` (for example one per component).
  static Rng Derive(uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ULL * (stream + 1));
    return Rng(SplitMix64(x));
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n); n > 0.
  uint64_t Below(uint64_t n) {
    // Lemire's multiply-shift; the tiny bias is irrelevant here.
    __extension__ using U128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<U128>(Next()) * n) >> 64);
  }
  bool Bernoulli(double p) { return Uniform() < p; }
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Standard normal by Box-Muller (one value per call; simple over fast).
  double Normal() {
    double u1 = Uniform();
    while (u1 <= 0.0) u1 = Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) *
           std::cos(2.0 * std::numbers::pi * u2);
  }
  double Normal(double mean, double stddev) { return mean + stddev * Normal(); }
  // exp(N(mu, sigma)).
  double LogNormal(double mu, double sigma) {
    return std::exp(Normal(mu, sigma));
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

}  // namespace gandiva::core
