// Row operations of a decoder layer, written to reproduce ggml's CPU arithmetic.
//
// Goals: the exact float order of llama.cpp's CPU backend where it is cheap to match:
//  - RMSNorm: y = (x · (1/sqrtf(mean + eps))) · w, each square x·x in float, the mean cast
//    to float from a double sum (ggml's is one serial sum; ours has eight running sums, each
//    taking every eighth square, combined in a fixed tree).
//  - Rope: angles by repeated float multiplication θ_{i+1} = θ_i · base^(−2/n_rot) starting
//    from θ_0 = position (ggml's rope cache), cosf/sinf, NORM (adjacent pairs) or NEOX
//    (halves) pairing; dimensions past n_rot pass through.
//  - Softmax: max subtraction, expf, sum in double, multiply by (float)(1/sum).
//  - SiLU: x / (1 + expf(−x)); SwiGLU = SiLU(gate) · up.
//  - GELU (tanh form), as ggml's CPU backend computes it for GeGLU: 0 at or below −10, x at
//    or above 10, else a table over fp16 inputs of the fp16-rounded
//    0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))); GeGLU = GELU(gate) · up.
// Every function handles one row with a reduction order fixed by n only (determinism).
// Non-goals: batching (the caller's ParallelFor runs one row per task). SwiGLU runs on the
// ISA kernels of ffn_kernels.h; the other rows are a small share of a step (matmul
// dominates) and stay plain C++.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "model/model_config.h"

namespace shardlm {

// y[0..n) = x / rms(x) · w (w may be nullptr: no weight). y may alias x.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y);

// cache[2i], cache[2i+1] = cos θ_i, sin θ_i for i < n_rot/2 at `position`;
// freq_factors (optional, [n_rot/2]) divide θ_i as llama.cpp's rope_freqs do, and
// freq_scale (linear rope scaling) multiplies it after them.
void RopeAngles(int position, int n_rot, float freq_base, float freq_scale,
                const float* freq_factors, float* cache);
// Rotates the first n_rot dims of each of n_heads heads in x [n_heads][head_dim].
void ApplyRope(RopeType type, const float* cache, int n_rot, int head_dim, int n_heads, float* x);

// out[i] = SiLU(gate[i]) · up[i]; out may alias gate. The ISA kernel of ffn_kernels.h.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
// out[i] = GELU(gate[i]) · up[i]; out may alias gate.
void GeGlu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace shardlm
