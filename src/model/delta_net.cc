// Gated DeltaNet over a mixed batch (see delta_net.h).
#include "model/delta_net.h"

#include <algorithm>
#include <cmath>

#include "model/ops.h"

namespace shardlm {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float Silu(float x) { return x / (1.0f + expf(-x)); }
// As ggml: the identity past 20, where log(1 + e^x) rounds to x anyway.
float Softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

// Σ a[i]·b[i] in eight running sums combined in a fixed tree: the order depends on n only.
float Dot(const float* a, const float* b, int n) {
  float lanes[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) lanes[l] += a[i] * b[i];
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

void DeltaNetScratch::GroupSequences(std::span<const BatchEntry> batch) {
  seq_entries.clear();
  seq_begin.clear();
  seq_slot.clear();
  // Sequences in order of their first entry; a sequence's entries keep batch order.
  for (size_t t = 0; t < batch.size(); ++t) {
    if (std::find(seq_slot.begin(), seq_slot.end(), batch[t].slot) == seq_slot.end()) {
      seq_slot.push_back(batch[t].slot);
    }
  }
  for (int32_t slot : seq_slot) {
    seq_begin.push_back(int32_t(seq_entries.size()));
    for (size_t t = 0; t < batch.size(); ++t) {
      if (batch[t].slot == slot) seq_entries.push_back(int32_t(t));
    }
  }
  seq_begin.push_back(int32_t(seq_entries.size()));
}

void DeltaNetConvStep(const float* w, int kernel, int channels, int c_begin, int c_end,
                      float* history, const float* x, float* out) {
  const int taps = kernel - 1;
  for (int c = c_begin; c < c_end; ++c) {
    const float* wc = w + size_t(c) * kernel;
    float sum = 0.0f;
    for (int i = 0; i < taps; ++i) sum += history[size_t(i) * channels + c] * wc[i];
    sum += x[c] * wc[taps];
    out[c] = Silu(sum);
    for (int i = 0; i + 1 < taps; ++i) {
      history[size_t(i) * channels + c] = history[size_t(i + 1) * channels + c];
    }
    if (taps > 0) history[size_t(taps - 1) * channels + c] = x[c];
  }
}

void DeltaNetRecurrenceStep(float* state, int head_dim_k, int head_dim_v, const float* q,
                            const float* k, const float* v, float g, float beta, float* out) {
  const float decay = expf(g);
  const float scale = 1.0f / sqrtf(float(head_dim_k));
  // Row j is independent of the others: decay, the delta against k, the update and the
  // read-out with q run on it while it is in cache (the same values as whole-matrix steps).
  for (int j = 0; j < head_dim_v; ++j) {
    float* row = state + size_t(j) * head_dim_k;
    for (int i = 0; i < head_dim_k; ++i) row[i] *= decay;
    const float delta = (v[j] - Dot(row, k, head_dim_k)) * beta;
    for (int i = 0; i < head_dim_k; ++i) row[i] += k[i] * delta;
    out[j] = Dot(row, q, head_dim_k) * scale;
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
    float* history = states.conv(s.seq_slot[seq], state_layer);
    for (int e = s.seq_begin[seq]; e < s.seq_begin[seq + 1]; ++e) {
      const size_t t = size_t(s.seq_entries[e]);
      DeltaNetConvStep(w.ssm_conv1d.data, d.conv_kernel, channels, c_begin, c_end, history,
                       &s.qkv[t * channels], &s.mixed[t * channels]);
    }
  });

  // Per token: unit q and k heads, beta and the decay exponent g.
  threads.ParallelFor(size_t(n), [&](size_t t, size_t) {
    float* row = &s.mixed[t * channels];
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
    float* state = states.state(s.seq_slot[seq], state_layer) + size_t(h) * state_floats;
    for (int e = s.seq_begin[seq]; e < s.seq_begin[seq + 1]; ++e) {
      const size_t t = size_t(s.seq_entries[e]);
      const float* row = &s.mixed[t * channels];
      const float* q = row + size_t(kh) * d.head_dim_k;
      const float* k = row + size_t(d.key_dim() + kh * d.head_dim_k);
      const float* v = row + size_t(2 * d.key_dim() + h * d.head_dim_v);
      DeltaNetRecurrenceStep(state, d.head_dim_k, d.head_dim_v, q, k, v,
                             s.alpha[t * d.n_v_heads + h], s.beta[t * d.n_v_heads + h],
                             &s.o[t * d.value_dim() + size_t(h) * d.head_dim_v]);
    }
  });

  // Gated norm per (token, v head), then the output projection.
  threads.ParallelFor(size_t(n), [&](size_t t, size_t) {
    for (int h = 0; h < d.n_v_heads; ++h) {
      float* o = &s.o[t * d.value_dim() + size_t(h) * d.head_dim_v];
      const float* z = &s.z[t * d.value_dim() + size_t(h) * d.head_dim_v];
      RmsNorm(o, w.ssm_norm.data, d.head_dim_v, rms_eps, o);
      for (int i = 0; i < d.head_dim_v; ++i) o[i] *= Silu(z[i]);
    }
  });
  MatMul(w.ssm_out, s.o.data(), n, out, threads, matmul);
}

}  // namespace shardlm
