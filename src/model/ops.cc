// Row operations matching ggml's CPU arithmetic (see ops.h).
#include "model/ops.h"

#include <array>
#include <cmath>
#include <memory>

#include "model/ffn_kernels.h"
#include "tensor/fp16.h"

namespace shardlm {

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  // Eight running sums (s_j takes elements ≡ j mod 8), combined in a fixed tree, then the
  // tail: one serial chain of double adds took 3% of a batched decode step. Named scalars,
  // not an array, so that they stay in registers (the vectoriser pairs them).
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float* v = x + i;
    s0 += double(v[0] * v[0]);
    s1 += double(v[1] * v[1]);
    s2 += double(v[2] * v[2]);
    s3 += double(v[3] * v[3]);
    s4 += double(v[4] * v[4]);
    s5 += double(v[5] * v[5]);
    s6 += double(v[6] * v[6]);
    s7 += double(v[7] * v[7]);
  }
  double sum = ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7));
  for (; i < n; ++i) sum += double(x[i] * x[i]);
  const float mean = float(sum / double(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  if (w == nullptr) {
    for (i = 0; i < n; ++i) y[i] = x[i] * scale;
  } else {
    for (i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  }
}

void RopeAngles(int position, int n_rot, float freq_base, float freq_scale,
                const float* freq_factors, float* cache) {
  const float theta_scale = powf(freq_base, -2.0f / float(n_rot));
  float theta = float(position);
  for (int i = 0; i < n_rot / 2; ++i) {
    const float angle = freq_scale * (freq_factors ? theta / freq_factors[i] : theta);
    cache[2 * i] = cosf(angle);
    cache[2 * i + 1] = sinf(angle);
    theta *= theta_scale;
  }
}

void ApplyRope(RopeType type, const float* cache, int n_rot, int head_dim, int n_heads, float* x) {
  // NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2). Pair i uses angle i either way.
  const int stride = type == RopeType::kNeox ? 1 : 2;
  const int partner = type == RopeType::kNeox ? n_rot / 2 : 1;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + int64_t(h) * head_dim;
    for (int i = 0; i < n_rot / 2; ++i) {
      const float cos_t = cache[2 * i];
      const float sin_t = cache[2 * i + 1];
      float* a = head + i * stride;
      const float x0 = a[0];
      const float x1 = a[partner];
      a[0] = x0 * cos_t - x1 * sin_t;
      a[partner] = x0 * sin_t + x1 * cos_t;
    }
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  GetFfnKernels().swiglu(gate, up, n, out);
}

namespace {

// GELU of every fp16 value, rounded to fp16 (ggml's table).
std::unique_ptr<std::array<float, 65536>> MakeGeluTable() {
  auto table = std::make_unique<std::array<float, 65536>>();
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = Fp16ToFp32(fp16_t(h));
    const float gelu = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
    (*table)[h] = Fp16ToFp32(Fp32ToFp16(gelu));
  }
  return table;
}

}  // namespace

void GeGlu(const float* gate, const float* up, int64_t n, float* out) {
  static const std::unique_ptr<std::array<float, 65536>> table = MakeGeluTable();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) {
      out[i] = 0.0f;
    } else if (x >= 10.0f) {
      out[i] = x * up[i];
    } else {
      out[i] = (*table)[Fp32ToFp16(x)] * up[i];
    }
  }
}

}  // namespace shardlm
