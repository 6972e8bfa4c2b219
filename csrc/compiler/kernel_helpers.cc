#include "compiler/kernel_helpers.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace torch_neuron::compiler {
namespace {

// Vectorizable float exp and tanh for generated kernels. libm's expf is a call
// the loop vectorizer cannot widen, which left a kernel with one exp at 6% of the
// copy bandwidth; these are straight-line code (selects, FMAs, integer shifts),
// so the loop stays vectorized. Accuracy against a double reference over
// [-120, 120]: exp and sigmoid within 1.5e-7 relative, tanh within 3e-7 (ATen's
// Sleef kernels are within 1 ulp). exp flushes results under about 2e-38 (x
// below about -87) to zero.
constexpr char kExpSource[] = R"(static inline float tn_exp(float x) {
  // exp(x) = 2^n * e^r with n = round(x / ln 2), |r| <= ln(2) / 2 (Cody-Waite).
  // The clamps keep NaN (a false compare keeps x); past 89 the result overflows
  // to inf, below -87.3 the scale's exponent field is 0 and the result 0.
  float xc = x < -87.3f ? -87.3f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = __builtin_fmaf(xc, 1.44269504088896341f, magic);
  const float n = t - magic;
  float r = __builtin_fmaf(n, -0.693359375f, xc);
  r = __builtin_fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r + 1.0f);
  int32_t bits;
  __builtin_memcpy(&bits, &t, 4);  // t's low mantissa bits hold n
  bits = (bits - (0x4B400000 - 126)) << 23;  // 2^(n-1), so n = 128 still fits
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return (p + p) * scale;
}
)";

constexpr char kTanhSource[] = R"(static inline float tn_tanh(float x) {
  // (1 - e) / (1 + e) with e = exp(-2|x|); below |x| = 0.25, where 1 - e would
  // cancel, the Taylor series to x^9.
  const float a = __builtin_fabsf(x);
  const float e = tn_exp(-2.0f * a);
  const float large = (1.0f - e) / (1.0f + e);
  const float x2 = x * x;
  float p = 62.0f / 2835.0f;
  p = __builtin_fmaf(p, x2, -17.0f / 315.0f);
  p = __builtin_fmaf(p, x2, 2.0f / 15.0f);
  p = __builtin_fmaf(p, x2, -1.0f / 3.0f);
  const float small = __builtin_fmaf(p * x2, a, a);
  const float r = a < 0.25f ? small : large;
  return x != x ? x : __builtin_copysignf(r, x);
}
)";

constexpr char kErfSource[] = R"(static inline float tn_erf(float x) {
  // Abramowitz and Stegun 7.1.26: absolute error under 1.5e-7.
  const float a = __builtin_fabsf(x);
  const float t = 1.0f / __builtin_fmaf(0.3275911f, a, 1.0f);
  float p = 1.061405429f;
  p = __builtin_fmaf(p, t, -1.453152027f);
  p = __builtin_fmaf(p, t, 1.421413741f);
  p = __builtin_fmaf(p, t, -0.284496736f);
  p = __builtin_fmaf(p, t, 0.254829592f);
  const float r = 1.0f - p * t * tn_exp(-a * a);
  return x != x ? x : __builtin_copysignf(r, x);
}
)";

// A float32's bits and back, for the 16-bit formats' conversions.
constexpr char kBitsSource[] = R"(static inline uint32_t tn_bits_of(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}

static inline float tn_float_of(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
)";

// bfloat16 is the high half of a float32: loading shifts it up; storing
// rounds to nearest even, as c10::BFloat16 does, NaN to a quiet NaN.
constexpr char kBFloat16Source[] = R"(static inline float tn_bf16_load(uint16_t bits) {
  return tn_float_of(static_cast<uint32_t>(bits) << 16);
}

static inline uint16_t tn_bf16_bits(float f) {
  const uint32_t u = tn_bits_of(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return f != f ? static_cast<uint16_t>(0x7FC0) : static_cast<uint16_t>(rounded);
}

static inline float tn_bf16_round(float f) { return tn_bf16_load(tn_bf16_bits(f)); }
)";

// float16: loading is exact (a subnormal is its mantissa times 2^-24);
// storing rounds to nearest even, as c10::Half does, a NaN to the quiet NaN
// 0x7E00 with its sign.
constexpr char kHalfSource[] = R"(static inline float tn_f16_load(uint16_t h) {
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  const uint32_t small = tn_bits_of(static_cast<float>(mantissa) * 5.9604644775390625e-8f);  // 2^-24
  const uint32_t magnitude = exponent == 0 ? small
                             : exponent == 31 ? (0x7F800000u | (mantissa << 13))
                                              : (((exponent + 112u) << 23) | (mantissa << 13));
  return tn_float_of((static_cast<uint32_t>(h & 0x8000u) << 16) | magnitude);
}

static inline uint16_t tn_f16_bits(float f) {
  const uint32_t u = tn_bits_of(f);
  const uint32_t magnitude = u & 0x7FFFFFFFu;
  // Below 2^-14, the smallest normal: adding 0.5 rounds |f| to a multiple of
  // 2^-24 (the float spacing at 0.5), to even; the sum's low bits count them.
  const uint32_t subnormal = tn_bits_of(__builtin_fabsf(f) + 0.5f) - 0x3F000000u;
  // Normal: rebias the exponent (127 to 15), drop 13 mantissa bits rounding to even.
  const uint32_t normal = (magnitude - 0x38000000u + 0xFFFu + ((magnitude >> 13) & 1u)) >> 13;
  const uint32_t result = magnitude > 0x7F800000u    ? 0x7E00u  // NaN
                          : magnitude >= 0x477FF000u ? 0x7C00u  // 65520 and above round to infinity
                          : magnitude < 0x38800000u  ? subnormal
                                                     : normal;
  return static_cast<uint16_t>(((u >> 16) & 0x8000u) | result);
}

static inline float tn_f16_round(float f) { return tn_f16_load(tn_f16_bits(f)); }
)";
}  // namespace

std::string HelperSource(const std::string& calls) {
  const bool tanh = absl::StrContains(calls, "tn_tanh(");
  const bool erf = absl::StrContains(calls, "tn_erf(");
  const bool exp = tanh || erf || absl::StrContains(calls, "tn_exp(");
  const bool bf16 = absl::StrContains(calls, "tn_bf16_");
  const bool f16 = absl::StrContains(calls, "tn_f16_");
  std::string out;
  if (exp) absl::StrAppend(&out, kExpSource, "\n");
  if (tanh) absl::StrAppend(&out, kTanhSource, "\n");
  if (erf) absl::StrAppend(&out, kErfSource, "\n");
  if (bf16 || f16) absl::StrAppend(&out, kBitsSource, "\n");
  if (bf16) absl::StrAppend(&out, kBFloat16Source, "\n");
  if (f16) absl::StrAppend(&out, kHalfSource, "\n");
  return out;
}

std::string AllHelperSource() { return HelperSource("tn_tanh( tn_erf( tn_bf16_ tn_f16_"); }

}  // namespace torch_neuron::compiler
