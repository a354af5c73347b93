// bf16 conversions: the scalar definition (ops::to_bf16 / to_f32) on the cases that decide it
// (ties to even, NaN, Inf, overflow, denormals), then every arch's array kernels against it, bit
// for bit, on those cases, random bit patterns and every bf16 value.
#include <cstring>
#include <random>

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
uint16_t rounded(uint32_t fp32_bits) {
  return to_bf16(from_bits(fp32_bits)).bits;
}

TEST_CASE("bf16.scalar.round_to_nearest_even") {
  CHECK(rounded(0x3f800000u) == 0x3f80);             // 1.0 exact
  CHECK(rounded(0x3f807fffu) == 0x3f80);             // below half an ulp: down
  CHECK(rounded(0x3f808001u) == 0x3f81);             // above half an ulp: up
  CHECK(rounded(0x3f808000u) == 0x3f80);             // tie, 0x3f80 even: stays
  CHECK(rounded(0x3f818000u) == 0x3f82);             // tie, 0x3f81 odd: to the even 0x3f82
  CHECK(rounded(0xbf818000u) == 0xbf82);             // the same below zero
  CHECK(rounded(0x3fff8000u) == 0x4000);             // a tie that carries into the exponent
  CHECK(to_bf16(1.0f + 1.0f / 256).bits == 0x3f80);  // 1 + 2^-8: the tie between 1 and 1 + 2^-7
  CHECK(to_bf16(1.0f + 3.0f / 256).bits == 0x3f82);  // 1 + 3 * 2^-8: tie, up to the even 1 + 2^-6
  CHECK(rounded(0x00000000u) == 0x0000);
  CHECK(rounded(0x80000000u) == 0x8000);  // -0 keeps its sign
}

TEST_CASE("bf16.scalar.inf_overflow_nan") {
  CHECK(rounded(0x7f800000u) == 0x7f80);  // +Inf
  CHECK(rounded(0xff800000u) == 0xff80);  // -Inf
  CHECK(rounded(0x7f7fffffu) == 0x7f80);  // the largest finite float is past the last tie: Inf
  CHECK(rounded(0x7f7f8000u) == 0x7f80);  // tie at the top, 0x7f7f odd: up to Inf (RNE)
  CHECK(rounded(0x7f7f7fffu) == 0x7f7f);  // just below the tie: the largest finite bf16
  CHECK(rounded(0x7f7e8000u) == 0x7f7e);  // tie, 0x7f7e even: stays finite
  CHECK(rounded(0xff7fffffu) == 0xff80);  // and -Inf below
  // NaN stays NaN, made quiet (bit 6), with its sign and upper payload
  CHECK(rounded(0x7fc00000u) == 0x7fc0);  // the quiet NaN
  CHECK(rounded(0xffc00000u) == 0xffc0);  // negative quiet NaN: sign kept
  CHECK(rounded(0x7f800001u) == 0x7fc0);  // signalling NaN, payload only in the dropped half
  CHECK(rounded(0xff800001u) == 0xffc0);
  CHECK(rounded(0x7fbfffffu) == 0x7fff);  // signalling NaN with a high payload: quiet, payload kept
  CHECK(rounded(0x7fffffffu) == 0x7fff);  // would carry into the sign with plain rounding
  CHECK(std::isnan(to_f32(to_bf16(from_bits(0x7f800001u)))));
}

TEST_CASE("bf16.scalar.denormals_round_too") {
  CHECK(rounded(0x00000001u) == 0x0000);  // the smallest denormal rounds to +0
  CHECK(rounded(0x80000001u) == 0x8000);  // and to -0 below zero
  CHECK(rounded(0x00008000u) == 0x0000);  // tie, even: down
  CHECK(rounded(0x00018000u) == 0x0002);  // tie, odd: up
  CHECK(rounded(0x00010000u) == 0x0001);  // the smallest bf16 denormal, exact
  CHECK(rounded(0x80018001u) == 0x8002);  // above the tie
  CHECK(rounded(0x007fffffu) == 0x0080);  // the largest denormal rounds up to the smallest normal
  CHECK(to_f32(bf16{0x0001}) == from_bits(0x00010000u));
}

TEST_CASE("bf16.scalar.to_f32_is_exact_and_round_trips") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = to_f32(bf16{static_cast<uint16_t>(h)});
    REQUIRE(bits_of(f) == h << 16);
    if (!std::isnan(f)) REQUIRE(to_bf16(f).bits == h);
  }
}

// The decisive fp32 bit patterns above, then random ones (every exponent, NaNs included).
std::vector<float> conversion_inputs(int64_t n) {
  const uint32_t special[] = {0x3f800000u, 0x3f807fffu, 0x3f808001u, 0x3f808000u, 0x3f818000u, 0xbf818000u,
                              0x3fff8000u, 0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,
                              0x7f7f8000u, 0x7f7f7fffu, 0x7f7e8000u, 0xff7fffffu, 0x7fc00000u, 0xffc00000u,
                              0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fffffffu, 0x00000001u, 0x80000001u,
                              0x00008000u, 0x00018000u, 0x00010000u, 0x80018001u, 0x007fffffu};
  std::vector<float> v;
  for (uint32_t u : special) v.push_back(from_bits(u));
  std::mt19937 rng(7);
  while (static_cast<int64_t>(v.size()) < n) {
    uint32_t u = rng();
    if (rng() % 4 == 0) u = (u & 0xffff0000u) | (rng() % 2 ? 0x8000u : 0x7fffu);  // ties and near-ties
    v.push_back(from_bits(u));
  }
  v.resize(static_cast<size_t>(n));
  return v;
}

// Every arch converts exactly as the scalar definition, in the main loop and in the tail (sizes
// around the vector widths) and across threads (a long array is split between 2 threads).
void conversions_match_scalar(const KernelTable& t) {
  for (int64_t n : std::vector<int64_t>{1, 3, 7, 8, 15, 16, 17, 29, 31, 33, 63, 65, 255, 257, 1 << 17}) {
    CAPTURE(n);
    const auto in = conversion_inputs(n);
    std::vector<bf16> got(static_cast<size_t>(n) + 1, bf16{0x5555});
    t.f32_to_bf16(got.data(), in.data(), n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += got[i].bits != to_bf16(in[i]).bits;
    CHECK(bad == 0);
    CHECK(got[n].bits == 0x5555);  // nothing written past the end
    std::vector<float> back(static_cast<size_t>(n) + 1, 7.0f);
    t.bf16_to_f32(back.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) bad += bits_of(back[i]) != static_cast<uint32_t>(got[i].bits) << 16;
    CHECK(bad == 0);
    CHECK(back[n] == 7.0f);
  }
  std::vector<bf16> all(0x10000);
  for (uint32_t h = 0; h <= 0xffff; ++h) all[h].bits = static_cast<uint16_t>(h);
  std::vector<float> f(all.size());
  t.bf16_to_f32(f.data(), all.data(), static_cast<int64_t>(all.size()));
  int64_t bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) bad += bits_of(f[h]) != h << 16;
  CHECK(bad == 0);
}
TG_OPS_ARCH_TESTS("bf16", "conversions_match_scalar", conversions_match_scalar)

TEST_CASE("bf16.scalar_table.conversions_match_scalar") {
  conversions_match_scalar(ref::table());
}

}  // namespace
