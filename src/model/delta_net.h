// Gated DeltaNet: the recurrent mixer of qwen35's linear-attention layers, over a mixed batch.
//
// Per token t of a sequence (h = the layer's normed input):
//   q|k|v = SiLU(causal depthwise conv over time of attn_qkv·h), conv_kernel taps per channel
//   q, k  = l2-normalized per head;  beta = sigmoid(ssm_beta·h);
//   g     = softplus(ssm_alpha·h + ssm_dt.bias) · ssm_a          (per v head, negative)
//   per v head j (reading q/k head j % n_k_heads), state S [head_dim_v][head_dim_k]:
//     S ·= exp(g);  δ = (v − S·k) · beta;  S += δ ⊗ k;  o = S·q / sqrt(head_dim_k)
//   out   = ssm_out · (RMSNorm(o)·ssm_norm ⊙ SiLU(attn_gate·h))   (per v head)
// as llama.cpp's CPU backend computes it (its fused delta-net op, one token at a time).
//
// Determinism: the recurrence runs token by token in position order, so a sequence's state
// and outputs are bitwise the same whether its tokens come in one prefill batch, in chunks
// or one decode step at a time, and whatever else shares the batch. A chunked (WY)
// formulation would trade that for matrix products whose rounding depends on where chunks
// start; prefill is batched where it pays: the five projections are matmuls over the whole
// batch, and the recurrence is one task per (sequence, v head).
//
// Non-goals: where the state lives between batches and where checkpoints go
// (kv/recurrent_state.h).
//
// Thread safety: one call at a time per DeltaNetScratch; uses the ThreadPool internally.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/batch.h"
#include "kv/recurrent_state.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tensor/matmul.h"
#include "tensor/thread_pool.h"

namespace shardlm {

// Buffers of one stage's DeltaNet layers, sized once for max_batch_tokens rows.
struct DeltaNetScratch {
  void Resize(const DeltaNetShape& shape, int max_batch_tokens);
  // The next recurrent layer's conv kernel, taps-major (every call adds one layer, in order).
  void AddLayer(const DeltaNetShape& shape, const NormWeight& conv1d);
  // The batch's entries grouped by sequence, each group in batch (= position) order:
  // seq_entries[seq_begin[s] .. seq_begin[s + 1]) are sequence s's batch indices; and per
  // sequence the batch index after which its state is checkpointed (the last entry that ends
  // a page of page_tokens positions), or -1.
  void GroupSequences(std::span<const BatchEntry> batch, int page_tokens);

  std::vector<float> qkv;    // [B][conv_channels]: projections, then conv outputs
  std::vector<float> mixed;  // [B][conv_channels]: the conv's SiLU outputs (q | k | v)
  std::vector<float> z;      // [B][value_dim]
  std::vector<float> beta;   // [B][n_v_heads]
  std::vector<float> alpha;  // [B][n_v_heads]: then g
  std::vector<float> o;      // [B][value_dim]
  std::vector<float> ones;   // [conv_channels] of 1: SiLU as SwiGLU with up = 1
  // [recurrent layer][conv_kernel][conv_channels]: ssm_conv1d transposed, so that each tap
  // is one contiguous row over the channels.
  std::vector<std::vector<float>> conv_taps;
  std::vector<int32_t> seq_entries;
  std::vector<int32_t> seq_begin;
  std::vector<int32_t> seq_slot;
  std::vector<int32_t> seq_checkpoint;
};

// One DeltaNet layer over the batch: xn [n][n_embd] is the normed input; out [n][n_embd]
// receives ssm_out's rows. `states` holds every slot's state of this layer as
// `state_layer`; the caller has reset the slots whose sequences start in this batch. The state
// after each sequence's checkpoint entry is copied into its slot's checkpoint.
void RunDeltaNet(const LayerWeights& w, const DeltaNetShape& shape, float rms_eps,
                 std::span<const BatchEntry> batch, const float* xn, RecurrentStates& states,
                 int state_layer, DeltaNetScratch& scratch, ThreadPool& threads,
                 MatMulScratch& matmul, float* out);

// The per-token pieces, exposed for tests against a plain reference.
// out[c] = Σ_i history_i[c]·taps[i][c] + x[c]·taps[kernel−1][c] for c in [c_begin, c_end),
// oldest tap first (the SiLU follows); then x enters the history ([kernel − 1][channels],
// oldest row first). taps: the kernel taps-major ([kernel][channels]).
void DeltaNetConvStep(const float* taps, int kernel, int channels, int c_begin, int c_end,
                      float* history, const float* x, float* out);
// One token of one v head: state [head_dim_v][head_dim_k] (row j: value j's keys).
void DeltaNetRecurrenceStep(float* state, int head_dim_k, int head_dim_v, const float* q,
                            const float* k, const float* v, float g, float beta, float* out);

}  // namespace shardlm
