// Gated DeltaNet over a mixed batch (see delta_net.h).
#include "model/delta_net.h"

#include <algorithm>
#include <cmath>

#include "model/ops.h"

namespace shardlm {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// As ggml: the identity past 20, where log(1 + e^x) rounds to x anyway.
float Softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

// Lanes of the fixed-order sums below: a sum over i keeps eight running sums, lane i % 8,
// combined in a fixed tree, so the bits depend on n only (and AVX2 computes the same lanes).
constexpr int kLanes = 8;

float CombineLanes(const float* lanes) {
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
         ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// x / max(||x||, eps), the sum of squares in double (ggml's l2_norm).
void L2Normalize(float* x, int n, float eps) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float scale = 1.0f / std::max(sqrtf(float(sum)), eps);
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

// Channels per conv task: a sequence's channels split so a long prefill uses every thread.
constexpr int kConvChannelsPerTask = 64;

}  // namespace

void DeltaNetScratch::Resize(const DeltaNetShape& shape, int max_batch_tokens) {
  const size_t b = size_t(max_batch_tokens);
  ones.assign(size_t(shape.conv_channels()), 1.0f);
  qkv.resize(b * shape.conv_channels());
  mixed.resize(b * shape.conv_channels());
  z.resize(b * shape.value_dim());
  beta.resize(b * shape.n_v_heads);
  alpha.resize(b * shape.n_v_heads);
  o.resize(b * shape.value_dim());
  seq_entries.reserve(b);
  seq_begin.reserve(b + 1);
  seq_slot.reserve(b);
}

void DeltaNetScratch::AddLayer(const DeltaNetShape& shape, const NormWeight& conv1d) {
  const int kernel = shape.conv_kernel;
  const int channels = shape.conv_channels();
  std::vector<float>& taps = conv_taps.emplace_back(size_t(kernel) * channels);
  for (int c = 0; c < channels; ++c) {
    for (int i = 0; i < kernel; ++i)
      taps[size_t(i) * channels + c] = conv1d.data[size_t(c) * kernel + i];
  }
}

void DeltaNetScratch::GroupSequences(std::span<const BatchEntry> batch, int page_tokens) {
  seq_entries.clear();
  seq_begin.clear();
  seq_slot.clear();
  seq_checkpoint.clear();
  // Sequences in order of their first entry; a sequence's entries keep batch order.
  for (size_t t = 0; t < batch.size(); ++t) {
    if (std::find(seq_slot.begin(), seq_slot.end(), batch[t].slot) == seq_slot.end()) {
      seq_slot.push_back(batch[t].slot);
    }
  }
  for (int32_t slot : seq_slot) {
    seq_begin.push_back(int32_t(seq_entries.size()));
    int32_t checkpoint = -1;
    for (size_t t = 0; t < batch.size(); ++t) {
      if (batch[t].slot != slot) continue;
      seq_entries.push_back(int32_t(t));
      if ((batch[t].position + 1) % page_tokens == 0) checkpoint = int32_t(t);
    }
    seq_checkpoint.push_back(checkpoint);
  }
  seq_begin.push_back(int32_t(seq_entries.size()));
}

__attribute__((target_clones("avx2", "default"))) void DeltaNetConvStep(
    const float* __restrict taps_w, int kernel, int channels, int c_begin, int c_end,
    float* __restrict history, const float* __restrict x, float* __restrict out) {
  // Tap by tap over the channel range (contiguous rows), oldest first: per channel the sum
  // h_0·w_0 + h_1·w_1 + ... + x·w_last in that order.
  const int taps = kernel - 1;
  const float* w_x = taps_w + size_t(taps) * channels;
  if (taps == 0) {
    for (int c = c_begin; c < c_end; ++c) out[c] = x[c] * w_x[c];
    return;
  }
  for (int c = c_begin; c < c_end; ++c) out[c] = history[c] * taps_w[c];
  for (int i = 1; i < taps; ++i) {
    const float* h = history + size_t(i) * channels;
    const float* w = taps_w + size_t(i) * channels;
    for (int c = c_begin; c < c_end; ++c) out[c] += h[c] * w[c];
  }
  for (int c = c_begin; c < c_end; ++c) out[c] += x[c] * w_x[c];
  for (int i = 0; i + 1 < taps; ++i) {
    float* h = history + size_t(i) * channels;
    for (int c = c_begin; c < c_end; ++c) h[c] = h[c + channels];
  }
  float* newest = history + size_t(taps - 1) * channels;
  for (int c = c_begin; c < c_end; ++c) newest[c] = x[c];
}

__attribute__((target_clones("avx2", "default"))) void DeltaNetRecurrenceStep(
    float* __restrict state, int head_dim_k, int head_dim_v, const float* __restrict q,
    const float* __restrict k, const float* __restrict v, float g, float beta,
    float* __restrict out) {
  const float decay = expf(g);
  const float scale = 1.0f / sqrtf(float(head_dim_k));
  // Row j is independent of the others: decay and the dot with k in one pass, the update and
  // the read-out with q in a second, while the row is in cache (the values of whole-matrix
  // steps: each element sees the same operations in the same order).
  const int whole = head_dim_k - head_dim_k % kLanes;
  for (int j = 0; j < head_dim_v; ++j) {
    float* __restrict row = state + size_t(j) * head_dim_k;
    float lanes[kLanes] = {};
    for (int i0 = 0; i0 < whole; i0 += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        row[i0 + l] *= decay;
        lanes[l] += row[i0 + l] * k[i0 + l];
      }
    }
    for (int i = whole; i < head_dim_k; ++i) {
      row[i] *= decay;
      lanes[i - whole] += row[i] * k[i];
    }
    const float delta = (v[j] - CombineLanes(lanes)) * beta;
    float read[kLanes] = {};
    for (int i0 = 0; i0 < whole; i0 += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        row[i0 + l] += k[i0 + l] * delta;
        read[l] += row[i0 + l] * q[i0 + l];
      }
    }
    for (int i = whole; i < head_dim_k; ++i) {
      row[i] += k[i] * delta;
      read[i - whole] += row[i] * q[i];
    }
    out[j] = CombineLanes(read) * scale;
  }
}

void RunDeltaNet(const LayerWeights& w, const DeltaNetShape& d, float rms_eps,
                 std::span<const BatchEntry> batch, const float* xn, RecurrentStates& states,
                 int state_layer, DeltaNetScratch& s, ThreadPool& threads, MatMulScratch& matmul,
                 float* out) {
  const int n = int(batch.size());
  const int channels = d.conv_channels();
  const MatMulOutput projections[] = {{w.attn_qkv, s.qkv.data()},
                                      {w.attn_gate, s.z.data()},
                                      {w.ssm_beta, s.beta.data()},
                                      {w.ssm_alpha, s.alpha.data()}};
  MatMulMany(projections, xn, n, threads, matmul);

  // The conv, token by token per sequence, split over channel ranges.
  const int n_seqs = int(s.seq_slot.size());
  const int chunks = (channels + kConvChannelsPerTask - 1) / kConvChannelsPerTask;
  threads.ParallelFor(size_t(n_seqs) * chunks, [&](size_t task, size_t) {
    const int seq = int(task / chunks);
    const int c_begin = int(task % chunks) * kConvChannelsPerTask;
    const int c_end = std::min(channels, c_begin + kConvChannelsPerTask);
    const int slot = s.seq_slot[seq];
    float* history = states.conv(slot, state_layer);
    for (int e = s.seq_begin[seq]; e < s.seq_begin[seq + 1]; ++e) {
      const size_t t = size_t(s.seq_entries[e]);
      DeltaNetConvStep(s.conv_taps[size_t(state_layer)].data(), d.conv_kernel, channels, c_begin,
                       c_end, history, &s.qkv[t * channels], &s.mixed[t * channels]);
      if (int32_t(t) != s.seq_checkpoint[seq]) continue;
      float* saved = states.checkpoint_conv(slot, state_layer);
      for (int i = 0; i + 1 < d.conv_kernel; ++i) {
        const size_t row = size_t(i) * channels;
        std::copy(history + row + c_begin, history + row + c_end, saved + row + c_begin);
      }
    }
  });

  // Per token: the conv's SiLU, unit q and k heads, beta and the decay exponent g.
  threads.ParallelFor(size_t(n), [&](size_t t, size_t) {
    float* row = &s.mixed[t * channels];
    SwiGlu(row, s.ones.data(), channels, row);  // SiLU(row) · 1
    for (int h = 0; h < 2 * d.n_k_heads; ++h) {
      L2Normalize(row + size_t(h) * d.head_dim_k, d.head_dim_k, rms_eps);
    }
    for (int h = 0; h < d.n_v_heads; ++h) {
      float& beta = s.beta[t * d.n_v_heads + h];
      beta = Sigmoid(beta);
      float& alpha = s.alpha[t * d.n_v_heads + h];
      alpha = Softplus(alpha + w.ssm_dt_bias.data[h]) * w.ssm_a.data[h];
    }
  });

  // The recurrence: one task per (sequence, v head), its tokens in order.
  const size_t state_floats = size_t(d.head_dim_v) * d.head_dim_k;
  threads.ParallelFor(size_t(n_seqs) * d.n_v_heads, [&](size_t task, size_t) {
    const int seq = int(task / d.n_v_heads);
    const int h = int(task % d.n_v_heads);
    const int kh = h % d.n_k_heads;
    const int slot = s.seq_slot[seq];
    float* state = states.state(slot, state_layer) + size_t(h) * state_floats;
    for (int e = s.seq_begin[seq]; e < s.seq_begin[seq + 1]; ++e) {
      const size_t t = size_t(s.seq_entries[e]);
      const float* row = &s.mixed[t * channels];
      const float* q = row + size_t(kh) * d.head_dim_k;
      const float* k = row + size_t(d.key_dim() + kh * d.head_dim_k);
      const float* v = row + size_t(2 * d.key_dim() + h * d.head_dim_v);
      DeltaNetRecurrenceStep(state, d.head_dim_k, d.head_dim_v, q, k, v,
                             s.alpha[t * d.n_v_heads + h], s.beta[t * d.n_v_heads + h],
                             &s.o[t * d.value_dim() + size_t(h) * d.head_dim_v]);
      if (int32_t(t) == s.seq_checkpoint[seq]) {
        std::copy(state, state + state_floats,
                  states.checkpoint_state(slot, state_layer) + size_t(h) * state_floats);
      }
    }
  });

  // Gated norm per (token, v head), then the output projection.
  threads.ParallelFor(size_t(n), [&](size_t t, size_t) {
    for (int h = 0; h < d.n_v_heads; ++h) {
      float* o = &s.o[t * d.value_dim() + size_t(h) * d.head_dim_v];
      const float* z = &s.z[t * d.value_dim() + size_t(h) * d.head_dim_v];
      RmsNorm(o, w.ssm_norm.data, d.head_dim_v, rms_eps, o);
      SwiGlu(z, o, d.head_dim_v, o);  // SiLU(z) · o
    }
  });
  MatMul(w.ssm_out, s.o.data(), n, out, threads, matmul);
}

}  // namespace shardlm
