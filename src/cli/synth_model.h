// Synthetic models for `shardlm gguf synth`: shape presets, llama.cpp-style quantization
// mixes, seeded random weights and a byte-level tokenizer, written through GgufWriter.
//
// Goals: files llama.cpp can load (standard tensor names and keys for llama/qwen3/gemma3/qwen35/
// gemma4:
// the tensors are the list shardlm binds, model/tensor_specs.h, so what synth writes loads; a GPT-2
// byte vocab with ChatML specials and a chat template); deterministic for a seed whatever the
// thread count (every row has its own PRNG stream); big presets (Qwen3-0.6B/1.7B shapes with
// the real 151936-token vocab size) written tensor by tensor, quantized in parallel.
// Non-goals: trained weights, other architectures (mixtures of experts), imatrix quantization.
//
// Thread safety: the functions are reentrant. Lifetime: the writer returned by
// BuildSynthModel holds callbacks that own copies of everything they need.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/ggml_type.h"
#include "gguf/gguf_writer.h"

namespace shardlm::cli {

struct SynthSpec {
  std::string arch = "qwen3";  // llama | qwen3 | gemma3 | qwen35 | gemma4
  std::string preset = "tiny";
  std::string type = "f32";  // a plain type (f32, q8_0, q4_k, ...) or a mix (q4_k_m, ...)
  uint64_t seed = 42;
  int64_t n_layers = 2;
  int64_t n_embd = 256;
  int64_t n_ff = 512;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 64;
  int64_t n_vocab = 259;
  int64_t n_ctx = 2048;
  bool tied = false;  // token_embd doubles as the LM head (no output.weight)
  double rope_base = 1e6;
  double rms_eps = 1e-6;
  int64_t sliding_window = 0;  // gemma3: the window of its windowed layers
  int64_t n_rot = 0;           // rotated dims per head (0: head_dim); qwen35 ropes a quarter
  // qwen35: every full_attention_interval-th layer attends, the others are gated DeltaNet of
  // this shape (ssm.*): q/k heads of ssm_state dims, value heads of ssm_state dims.
  int64_t full_attention_interval = 4;
  int64_t ssm_conv_kernel = 4;
  int64_t ssm_state = 32;
  int64_t ssm_k_heads = 2;
  int64_t ssm_v_heads = 4;
  // gemma4: layer i is global iff (i + 1) % global_period == 0 or it is the last, windowed
  // otherwise (heads of head_dim_swa; head_dim is the global layers'); global layers have
  // n_head_kv_global kv heads and take v from k; the last shared_kv_layers layers read
  // earlier layers' KV and have an FFN twice as wide; per-layer inputs of n_embd_per_layer.
  int64_t global_period = 3;
  int64_t head_dim_swa = 16;
  int64_t n_head_kv_global = 1;
  int64_t shared_kv_layers = 2;
  int64_t n_embd_per_layer = 16;
};

// The shapes of a preset: tiny | 0.6b | 1.7b (Qwen3 shapes, for llama and gemma3 too; gemma3
// gets a window of 16 positions in tiny, 512 in the others, as Gemma 3 1B has). qwen35's tiny
// is the fixture's shape, its 0.6b the 0.6B-class Qwen3.5-0.8B (24 layers of 1024, 18 of them
// DeltaNet with 16 heads of 128, attention 8/2 heads of 256 roped on 64, its 248320 vocab).
// gemma4's tiny is the fixture's shape; its 0.6b has Gemma 4's layout at the 0.6B class (24
// layers of 1024, a global layer in five, windowed heads of 256 and global of 512, one kv head,
// the last 9 layers sharing KV, per-layer inputs of 64, the Qwen3 vocab size).
Result<SynthSpec> SynthPreset(const std::string& arch, const std::string& preset);
// Checks arch, type and that the shapes are consistent and positive.
Status ValidateSynthSpec(const SynthSpec& spec);

// One weight of the model.
struct SynthTensor {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType type;
  // kDecayRate: −(1 + small noise), a DeltaNet decay rate (ssm_a), so states shrink per token.
  // kProportionalRope: rope_freqs of gemma4's global layers: 1 for the first quarter of the
  // pairs, 1e30 (standing still) for the rest.
  enum class Init { kWeight, kNorm, kDecayRate, kProportionalRope } init = Init::kWeight;
};

// Every tensor of the model, in file order, with the type the mix assigns it.
Result<std::vector<SynthTensor>> PlanSynthTensors(const SynthSpec& spec);
// llama.cpp's general.file_type for a --type value.
Result<uint32_t> SynthFileType(const std::string& type);

// Progress callback: (index of the tensor being written, count, name).
using SynthProgress = std::function<void(size_t, size_t, const std::string&)>;
// Metadata + tokenizer + tensors whose data is generated and quantized when written.
// `n_threads` 0 means all hardware threads.
Result<GgufWriter> BuildSynthModel(const SynthSpec& spec, int n_threads,
                                   SynthProgress progress = nullptr);

// The GPT-2 byte-level alphabet: the UTF-8 text of the token for byte b.
std::string ByteToken(uint8_t b);

}  // namespace shardlm::cli
