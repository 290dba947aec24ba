// Synthetic model builder (see synth_model.h): presets, the quantization mix, random weights,
// the byte tokenizer and the GGUF metadata.
#include "cli/synth_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "model/model_config.h"
#include "model/tensor_specs.h"
#include "tensor/type_traits.h"

namespace shardlm::cli {
namespace {

// Qwen3's vocabulary size: the 0.6b/1.7b presets pad to it so the LM head is realistic.
constexpr int64_t kQwen3VocabSize = 151936;
constexpr int64_t kByteVocab = 256;
constexpr const char* kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
constexpr int64_t kBaseVocab = kByteVocab + 3;
// llama.cpp token types.
constexpr int64_t kTokenNormal = 1;
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUnused = 5;
// Weight init: N(0, kWeightStd); norms 1 + N(0, kNormStd) (roughly what trained models show).
constexpr float kWeightStd = 0.02f;
constexpr float kNormStd = 0.05f;

constexpr const char* kChatTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct TypeChoice {
  const char* name;
  GgmlType base;
  uint32_t file_type;  // llama_ftype, as the fixtures record it
};

constexpr TypeChoice kTypes[] = {
    {"f32", GgmlType::kF32, 0},         {"f16", GgmlType::kF16, 1},
    {"bf16", GgmlType::kBF16, 32},      {"q8_0", GgmlType::kQ8_0, 7},
    {"q4_0", GgmlType::kQ4_0, 2},       {"q4_1", GgmlType::kQ4_1, 3},
    {"q5_0", GgmlType::kQ5_0, 8},       {"q5_1", GgmlType::kQ5_1, 9},
    {"q2_k", GgmlType::kQ2_K, 10},      {"q3_k", GgmlType::kQ3_K, 12},
    {"q4_k", GgmlType::kQ4_K, 15},      {"q5_k", GgmlType::kQ5_K, 17},
    {"q6_k", GgmlType::kQ6_K, 18},      {"q4_k_m", GgmlType::kQ4_K, 15},
    {"q5_k_m", GgmlType::kQ5_K, 17},    {"q3_k_m", GgmlType::kQ3_K, 12},
    {"iq4_nl", GgmlType::kIq4Nl, 25},   {"iq4_xs", GgmlType::kIq4Xs, 30},
    {"iq3_s", GgmlType::kIq3S, 26},     {"iq3_xxs", GgmlType::kIq3Xxs, 23},
    {"iq2_s", GgmlType::kIq2S, 29},     {"iq2_xs", GgmlType::kIq2Xs, 20},
    {"iq2_xxs", GgmlType::kIq2Xxs, 19}, {"iq1_m", GgmlType::kIq1M, 31},
    {"iq1_s", GgmlType::kIq1S, 24},     {"tq1_0", GgmlType::kTq1_0, 36},
    {"tq2_0", GgmlType::kTq2_0, 37},    {"mxfp4", GgmlType::kMxfp4, 38},
};

const TypeChoice* FindType(const std::string& name) {
  for (const TypeChoice& t : kTypes) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

// llama.cpp's use_more_bits(i, n): the first and last eighth of the layers and every third
// layer in between get more bits in the _M mixes.
bool UseMoreBits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

enum class Role { kEmbd, kOutput, kAttnV, kAttnOut, kFfnDown, kOther };

// The type llama-quantize picks for a 2-D weight under `mix` (plain types: every weight).
GgmlType MixType(const std::string& mix, GgmlType base, Role role, int64_t layer, int64_t n) {
  if (mix == "q4_k_m" || mix == "q5_k_m") {
    if (role == Role::kOutput) return GgmlType::kQ6_K;
    if ((role == Role::kAttnV || role == Role::kFfnDown) && UseMoreBits(layer, n)) {
      return GgmlType::kQ6_K;
    }
    return base;
  }
  if (mix == "q3_k_m") {
    switch (role) {
      case Role::kOutput:
        return GgmlType::kQ6_K;
      case Role::kAttnV:
        return layer < 2 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
      case Role::kFfnDown:
        return layer < n / 16 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
      case Role::kAttnOut:
        return GgmlType::kQ4_K;
      default:
        return base;
    }
  }
  return base;
}

// The role of a model tensor in the quantization mix (a tied embedding is the head).
Role QuantRole(TensorRole role, bool tied) {
  switch (role) {
    case TensorRole::kTokenEmbd:
      return tied ? Role::kOutput : Role::kEmbd;
    case TensorRole::kOutput:
      return Role::kOutput;
    case TensorRole::kAttnV:
      return Role::kAttnV;
    case TensorRole::kAttnOutput:
      return Role::kAttnOut;
    case TensorRole::kFfnDown:
      return Role::kFfnDown;
    default:
      return Role::kOther;
  }
}

// gemma4's per-layer shapes from the spec (SynthSpec's comment), as the metadata writes them.
LayerPattern Gemma4Pattern(const SynthSpec& s, ModelConfig& config) {
  LayerPattern p;
  const int64_t first_shared = s.n_layers - s.shared_kv_layers;
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const bool global = (i + 1) % s.global_period == 0 || i + 1 == s.n_layers;
    p.sliding.push_back(!global);
    p.v_from_k.push_back(global);
    p.n_head.push_back(int(s.n_head));
    p.n_head_kv.push_back(int(global ? s.n_head_kv_global : s.n_head_kv));
    p.n_ff.push_back(int(i >= first_shared ? 2 * s.n_ff : s.n_ff));
  }
  p.head_dim_swa = int(s.head_dim_swa);
  p.n_rot_swa = int(s.head_dim_swa);
  p.rope_base_swa = 1e4f;
  p.shared_kv_layers = int(s.shared_kv_layers);
  config.n_embd_per_layer = int(s.n_embd_per_layer);
  config.n_head_kv = *std::max_element(p.n_head_kv.begin(), p.n_head_kv.end());
  config.n_ff = *std::max_element(p.n_ff.begin(), p.n_ff.end());
  config.head_dim = int(std::max(s.head_dim, s.head_dim_swa));
  config.n_rot = int(s.head_dim);
  return p;
}

// The config a model of `s` reads back as (the shapes the tensor list needs).
ModelConfig SynthModelConfig(const SynthSpec& s) {
  ModelConfig config;
  config.arch = s.arch == "llama"    ? Arch::kLlama
                : s.arch == "gemma3" ? Arch::kGemma3
                : s.arch == "qwen35" ? Arch::kQwen35
                : s.arch == "gemma4" ? Arch::kGemma4
                                     : Arch::kQwen3;
  config.rope_freq_base = float(s.rope_base);
  config.sliding_window = int(s.sliding_window);
  config.n_layers = int(s.n_layers);
  config.n_embd = int(s.n_embd);
  config.n_head = int(s.n_head);
  config.n_head_kv = int(s.n_head_kv);
  config.head_dim = int(s.head_dim);
  config.n_ff = int(s.n_ff);
  config.n_vocab = int(s.n_vocab);
  config.n_rot = int(s.n_rot > 0 ? s.n_rot : s.head_dim);
  config.tied_output = s.tied;
  if (config.arch == Arch::kQwen35) {
    config.full_attention_interval = int(s.full_attention_interval);
    config.delta_net = {.conv_kernel = int(s.ssm_conv_kernel),
                        .n_k_heads = int(s.ssm_k_heads),
                        .n_v_heads = int(s.ssm_v_heads),
                        .head_dim_k = int(s.ssm_state),
                        .head_dim_v = int(s.ssm_state)};
  }
  LayerPattern pattern;
  if (config.arch == Arch::kGemma4) pattern = Gemma4Pattern(s, config);
  SetLayerConfigs(config, pattern);
  return config;
}

// When ne[0] is not a multiple of the block size, llama.cpp falls back to a 32-block type
// (Q2_K, Q3_K and the i-quants of 256 to IQ4_NL, the ternary types to Q4_0).
GgmlType FitRowLength(GgmlType type, int64_t ne0) {
  auto info = LookupGgmlType(static_cast<uint32_t>(type));
  if (info && ne0 % info->block_size == 0) return type;
  GgmlType fallback = GgmlType::kF16;
  switch (type) {
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIq4Xs:
    case GgmlType::kIq3S:
    case GgmlType::kIq3Xxs:
    case GgmlType::kIq2S:
    case GgmlType::kIq2Xs:
    case GgmlType::kIq2Xxs:
    case GgmlType::kIq1M:
    case GgmlType::kIq1S:
      fallback = GgmlType::kIq4Nl;
      break;
    case GgmlType::kTq1_0:
    case GgmlType::kTq2_0:
      fallback = GgmlType::kQ4_0;
      break;
    case GgmlType::kQ4_K:
      fallback = GgmlType::kQ5_0;
      break;
    case GgmlType::kQ5_K:
      fallback = GgmlType::kQ5_1;
      break;
    case GgmlType::kQ6_K:
      fallback = GgmlType::kQ8_0;
      break;
    default:
      break;
  }
  return ne0 % 32 == 0 ? fallback : GgmlType::kF16;
}

// ---- Random numbers ------------------------------------------------------------------------

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& name, uint64_t seed) {
  uint64_t h = seed ^ 0xcbf29ce484222325ull;  // FNV-1a over the name, seeded
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Approximately N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall, variance 1/3 per
// four) rescaled. One 64-bit draw per value keeps 600M values to a few seconds.
float ApproxNormal(uint64_t& state) {
  uint64_t r = SplitMix64(state);
  float sum = 0.0f;
  for (int i = 0; i < 4; ++i) sum += static_cast<float>((r >> (16 * i)) & 0xffff);
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  return (sum - 2.0f * 65535.0f) * kScale;
}

void FillRow(const SynthTensor& t, uint64_t tensor_seed, int64_t row, float* out) {
  uint64_t state = tensor_seed ^ (static_cast<uint64_t>(row) * 0xd1b54a32d192ed03ull);
  for (int64_t i = 0; i < t.ne[0]; ++i) {
    float z = ApproxNormal(state);
    switch (t.init) {
      case SynthTensor::Init::kWeight:
        out[i] = kWeightStd * z;
        break;
      case SynthTensor::Init::kNorm:
        out[i] = 1.0f + kNormStd * z;
        break;
      case SynthTensor::Init::kDecayRate:
        out[i] = -(1.0f + kNormStd * z);
        break;
      case SynthTensor::Init::kProportionalRope:
        out[i] = 4 * i < t.ne[0] ? 1.0f : 1e30f;
        break;
    }
  }
}

// Generates and quantizes every row of `t` into dst, rows split across threads.
Status FillTensor(const SynthTensor& t, uint64_t seed, int n_threads, std::span<uint8_t> dst) {
  const TypeTraits* traits = GetTypeTraits(t.type);
  if (traits == nullptr || traits->quantize_row == nullptr) {
    return Unsupported("no quantizer for type {}", GgmlTypeName(static_cast<uint32_t>(t.type)));
  }
  auto info = LookupGgmlType(static_cast<uint32_t>(t.type));
  const int64_t row_bytes = RowBytes(*info, t.ne[0]);
  const int64_t rows = row_bytes == 0 ? 0 : static_cast<int64_t>(dst.size()) / row_bytes;
  const uint64_t tensor_seed = HashName(t.name, seed);
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> row(t.ne[0]);
    for (int64_t r = begin; r < end; ++r) {
      FillRow(t, tensor_seed, r, row.data());
      traits->quantize_row(row.data(), dst.data() + r * row_bytes, t.ne[0]);
    }
  };
  int64_t n_workers = std::clamp<int64_t>(rows / 64, 1, n_threads);
  std::vector<std::thread> threads;
  for (int64_t w = 1; w < n_workers; ++w) {
    threads.emplace_back(work, rows * w / n_workers, rows * (w + 1) / n_workers);
  }
  work(0, rows / n_workers);
  for (std::thread& th : threads) th.join();
  return Status::Ok();
}

// ---- Tokenizer and metadata ----------------------------------------------------------------

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the byte alphabet stays below U+0800
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

bool PrintableByte(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

Status SetTokenizer(const SynthSpec& spec, GgufWriter& w) {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  tokens.reserve(spec.n_vocab);
  for (int b = 0; b < kByteVocab; ++b) tokens.push_back(ByteToken(static_cast<uint8_t>(b)));
  types.assign(kByteVocab, kTokenNormal);
  for (const char* special : kSpecials) {
    tokens.push_back(special);
    types.push_back(kTokenControl);
  }
  for (int64_t id = kBaseVocab; id < spec.n_vocab; ++id) {
    tokens.push_back(fmt::format("[PAD{}]", id));
    types.push_back(kTokenUnused);
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "qwen2");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  SHARDLM_TRY(w.SetIntArray("tokenizer.ggml.token_type", GgufValueType::kInt32, types));
  w.SetStringArray("tokenizer.ggml.merges", {});
  w.SetUint32("tokenizer.ggml.bos_token_id", kByteVocab);      // <|endoftext|>
  w.SetUint32("tokenizer.ggml.eos_token_id", kByteVocab + 2);  // <|im_end|>
  w.SetUint32("tokenizer.ggml.padding_token_id", kByteVocab);
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  w.SetString("tokenizer.chat_template", kChatTemplate);
  return Status::Ok();
}

// qwen35's partial rope (its multimodal sections: text positions use all of them alike) and
// gated DeltaNet shape.
Status SetQwen35Hparams(const SynthSpec& spec, GgufWriter& w) {
  const std::string& a = spec.arch;
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  const int64_t n_rot = spec.n_rot > 0 ? spec.n_rot : spec.head_dim;
  w.SetUint32(a + ".rope.dimension_count", u32(n_rot));
  const int64_t pairs = n_rot / 2;
  const int64_t third = (pairs + 2) / 3;
  const std::vector<int64_t> sections = {third, third, pairs - 2 * third, 0};
  SHARDLM_TRY(w.SetIntArray(a + ".rope.dimension_sections", GgufValueType::kInt32, sections));
  w.SetUint32(a + ".full_attention_interval", u32(spec.full_attention_interval));
  w.SetUint32(a + ".ssm.conv_kernel", u32(spec.ssm_conv_kernel));
  w.SetUint32(a + ".ssm.state_size", u32(spec.ssm_state));
  w.SetUint32(a + ".ssm.group_count", u32(spec.ssm_k_heads));
  w.SetUint32(a + ".ssm.time_step_rank", u32(spec.ssm_v_heads));
  w.SetUint32(a + ".ssm.inner_size", u32(spec.ssm_v_heads * spec.ssm_state));
  return Status::Ok();
}

// gemma4's per-layer shapes (arrays where layers differ), windowed layers and shared KV.
Status SetGemma4Hparams(const SynthSpec& spec, GgufWriter& w) {
  const std::string& a = spec.arch;
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  ModelConfig config;
  const LayerPattern p = Gemma4Pattern(spec, config);
  const auto ints = [](const auto& values) {
    return std::vector<int64_t>(values.begin(), values.end());
  };
  SHARDLM_TRY(w.SetIntArray(a + ".feed_forward_length", GgufValueType::kUint32, ints(p.n_ff)));
  SHARDLM_TRY(
      w.SetIntArray(a + ".attention.head_count_kv", GgufValueType::kUint32, ints(p.n_head_kv)));
  SHARDLM_TRY(w.SetIntArray(a + ".attention.sliding_window_pattern", GgufValueType::kBool,
                            ints(p.sliding)));
  w.SetUint32(a + ".attention.key_length_swa", u32(spec.head_dim_swa));
  w.SetUint32(a + ".attention.value_length_swa", u32(spec.head_dim_swa));
  w.SetUint32(a + ".rope.dimension_count", u32(spec.head_dim));
  w.SetUint32(a + ".rope.dimension_count_swa", u32(spec.head_dim_swa));
  w.SetFloat32(a + ".rope.freq_base_swa", 1e4f);
  w.SetUint32(a + ".attention.sliding_window", u32(spec.sliding_window));
  w.SetUint32(a + ".attention.shared_kv_layers", u32(spec.shared_kv_layers));
  w.SetUint32(a + ".embedding_length_per_layer_input", u32(spec.n_embd_per_layer));
  w.SetFloat32(a + ".final_logit_softcapping", 30.0f);
  return Status::Ok();
}

Status SetHparams(const SynthSpec& spec, GgufWriter& w) {
  SHARDLM_ASSIGN_OR_RETURN(uint32_t file_type, SynthFileType(spec.type));
  const std::string& a = spec.arch;
  w.SetString("general.architecture", a);
  w.SetString("general.name", fmt::format("synth-{}-{}-{}", a, spec.preset, spec.type));
  w.SetUint32("general.file_type", file_type);
  if (FindType(spec.type)->base != GgmlType::kF32) w.SetUint32("general.quantization_version", 2);
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.SetUint32(a + ".block_count", u32(spec.n_layers));
  w.SetUint32(a + ".context_length", u32(spec.n_ctx));
  w.SetUint32(a + ".embedding_length", u32(spec.n_embd));
  if (a == "gemma4") {
    SHARDLM_TRY(SetGemma4Hparams(spec, w));
  } else {
    w.SetUint32(a + ".feed_forward_length", u32(spec.n_ff));
    w.SetUint32(a + ".attention.head_count_kv", u32(spec.n_head_kv));
  }
  w.SetUint32(a + ".attention.head_count", u32(spec.n_head));
  w.SetUint32(a + ".attention.key_length", u32(spec.head_dim));
  w.SetUint32(a + ".attention.value_length", u32(spec.head_dim));
  if (a == "llama") {
    w.SetUint32(a + ".rope.dimension_count", u32(spec.head_dim));
    w.SetUint32(a + ".vocab_size", u32(spec.n_vocab));
  }
  if (a == "qwen35") SHARDLM_TRY(SetQwen35Hparams(spec, w));
  if (a == "gemma3" && spec.sliding_window > 0) {
    w.SetUint32(a + ".attention.sliding_window", u32(spec.sliding_window));
  }
  w.SetFloat32(a + ".rope.freq_base", static_cast<float>(spec.rope_base));
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(spec.rms_eps));
  return Status::Ok();
}

}  // namespace

std::string ByteToken(uint8_t b) {
  if (PrintableByte(b)) return Utf8(b);
  uint32_t n = 0;  // non-printable bytes map to U+0100.. in byte order
  for (uint32_t x = 0; x < b; ++x) n += PrintableByte(x) ? 0 : 1;
  return Utf8(256 + n);
}

namespace {

// Gemma 4's layout at the 0.6B class (synth_model.h).
SynthSpec Gemma4SmallPreset(SynthSpec spec) {
  spec.n_layers = 24;
  spec.n_embd = 1024;
  spec.n_ff = 4096;
  spec.n_head = 8;
  spec.n_head_kv = 1;
  spec.n_head_kv_global = 1;
  spec.head_dim = 512;
  spec.head_dim_swa = 256;
  spec.global_period = 5;
  spec.shared_kv_layers =
      9;  // from layer 15: the last earlier layer (14) is global, as llama.cpp expects
  spec.n_embd_per_layer = 64;
  spec.sliding_window = 512;
  spec.n_vocab = kQwen3VocabSize;
  spec.n_ctx = 32768;
  return spec;
}

// Qwen3.5-0.8B's shape (the 0.6B class of qwen35).
SynthSpec Qwen35SmallPreset(SynthSpec spec) {
  spec.n_layers = 24;
  spec.n_embd = 1024;
  spec.n_ff = 3584;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.head_dim = 256;
  spec.n_rot = 64;
  spec.ssm_state = 128;
  spec.ssm_k_heads = 16;
  spec.ssm_v_heads = 16;
  spec.n_vocab = 248320;
  spec.n_ctx = 40960;
  spec.tied = true;
  return spec;
}

}  // namespace

Result<SynthSpec> SynthPreset(const std::string& arch, const std::string& preset) {
  SynthSpec spec;
  spec.arch = arch;
  spec.preset = preset;
  if (arch == "llama") {
    spec.rope_base = 10000.0;
    spec.rms_eps = 1e-5;
  } else if (arch == "gemma3") {
    spec.tied = true;
    spec.sliding_window = preset == "tiny" ? 16 : 512;
  } else if (arch == "qwen35") {
    spec.n_layers = 4;
    spec.rope_base = 1e7;
    spec.n_rot = 16;
    if (preset == "0.6b") return Qwen35SmallPreset(spec);
  } else if (arch == "gemma4") {
    // The fixture's shape: layers [swa, swa, global, swa, global], the last two sharing KV.
    spec.tied = true;
    spec.n_layers = 5;
    spec.n_embd = 128;
    spec.n_ff = 64;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.head_dim = 32;
    spec.sliding_window = 32;
    spec.n_vocab = 260;  // the fixture's rows: 256 bytes and Gemma's four specials
    if (preset == "0.6b") return Gemma4SmallPreset(spec);
    if (preset != "tiny") return InvalidArgument("--preset {}: expected tiny or 0.6b", preset);
    return spec;
  } else if (arch != "qwen3") {
    return InvalidArgument("--arch {}: expected llama, qwen3, gemma3, qwen35 or gemma4", arch);
  }
  if (preset == "tiny") return spec;
  if (preset != "0.6b" && preset != "1.7b") {
    return InvalidArgument("--preset {}: expected tiny, 0.6b or 1.7b", preset);
  }
  spec.n_layers = 28;
  spec.n_embd = preset == "0.6b" ? 1024 : 2048;
  spec.n_ff = preset == "0.6b" ? 3072 : 6144;
  spec.n_head = 16;
  spec.n_head_kv = 8;
  spec.head_dim = 128;
  spec.n_vocab = kQwen3VocabSize;
  spec.n_ctx = 40960;
  spec.tied = true;
  return spec;
}

Status ValidateSynthSpec(const SynthSpec& s) {
  if (s.arch != "llama" && s.arch != "qwen3" && s.arch != "gemma3" && s.arch != "qwen35" &&
      s.arch != "gemma4") {
    return InvalidArgument("--arch {}: expected llama, qwen3, gemma3, qwen35 or gemma4", s.arch);
  }
  const int64_t gemma4[] = {s.global_period, s.head_dim_swa, s.n_head_kv_global, s.n_embd_per_layer,
                            s.sliding_window};
  if (s.arch == "gemma4" &&
      (std::ranges::any_of(gemma4, [](int64_t v) { return v < 1 || v > 4096; }) ||
       s.shared_kv_layers < 0 || s.shared_kv_layers >= s.n_layers - 1 ||
       s.n_head % s.n_head_kv_global != 0)) {
    return InvalidArgument("gemma4 layer layout out of range");
  }
  if (s.n_rot < 0 || s.n_rot > s.head_dim || s.n_rot % 2 != 0) {
    return InvalidArgument("rotated dims {}: expected an even count up to the head dim {}", s.n_rot,
                           s.head_dim);
  }
  const int64_t ssm[] = {s.full_attention_interval, s.ssm_conv_kernel, s.ssm_state, s.ssm_k_heads,
                         s.ssm_v_heads};
  if (s.arch == "qwen35" &&
      (std::ranges::any_of(ssm, [](int64_t v) { return v < 1 || v > 4096; }) ||
       s.ssm_v_heads % s.ssm_k_heads != 0)) {
    return InvalidArgument("qwen35 DeltaNet shape out of range");
  }
  if (s.sliding_window < 0 || s.sliding_window > (1 << 20)) {
    return InvalidArgument("--window {}: expected 0..2^20", s.sliding_window);
  }
  if (FindType(s.type) == nullptr) return InvalidArgument("--type {}: unknown type", s.type);
  const std::pair<const char*, int64_t> dims[] = {
      {"--layers", s.n_layers}, {"--embd", s.n_embd},        {"--ff", s.n_ff},
      {"--heads", s.n_head},    {"--kv-heads", s.n_head_kv}, {"--head-dim", s.head_dim},
      {"--ctx", s.n_ctx}};
  for (const auto& [flag, v] : dims) {
    if (v < 1 || v > (1 << 20)) return InvalidArgument("{} {}: expected 1..2^20", flag, v);
  }
  if (s.n_head % s.n_head_kv != 0) {
    return InvalidArgument("--heads {} is not a multiple of --kv-heads {}", s.n_head, s.n_head_kv);
  }
  if (s.n_vocab < kBaseVocab || s.n_vocab > (1 << 24)) {
    return InvalidArgument("--vocab {}: expected {}..2^24 (256 bytes + 3 specials)", s.n_vocab,
                           kBaseVocab);
  }
  return Status::Ok();
}

Result<uint32_t> SynthFileType(const std::string& type) {
  const TypeChoice* t = FindType(type);
  if (t == nullptr) return InvalidArgument("--type {}: unknown type", type);
  return t->file_type;
}

Result<std::vector<SynthTensor>> PlanSynthTensors(const SynthSpec& s) {
  SHARDLM_TRY(ValidateSynthSpec(s));
  const TypeChoice& choice = *FindType(s.type);
  const ModelConfig config = SynthModelConfig(s);
  std::vector<SynthTensor> out;
  // The tensors a model of the architecture binds, in file order; optional ones are left out.
  ForEachStageTensor(config, {0, config.n_layers}, [&](const TensorSpec& spec) {
    // gemma4's global layers rotate a quarter of their pairs (rope_freqs); other models' rope
    // frequencies are optional and left out.
    if (spec.role == TensorRole::kRopeFreqs && config.arch == Arch::kGemma4) {
      out.push_back({spec.name, spec.ne, GgmlType::kF32, SynthTensor::Init::kProportionalRope});
      return;
    }
    if (!spec.required) return;
    if (!spec.matrix()) {
      out.push_back({spec.name, spec.ne, GgmlType::kF32,
                     spec.role == TensorRole::kSsmA ? SynthTensor::Init::kDecayRate
                                                    : SynthTensor::Init::kNorm});
      return;
    }
    const Role role = QuantRole(spec.role, s.tied);
    const GgmlType type = MixType(s.type, choice.base, role, std::max(spec.layer, 0), s.n_layers);
    out.push_back({spec.name, spec.ne, FitRowLength(type, spec.ne[0])});
  });
  return out;
}

Result<GgufWriter> BuildSynthModel(const SynthSpec& spec, int n_threads, SynthProgress progress) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<SynthTensor> tensors, PlanSynthTensors(spec));
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  GgufWriter w;
  SHARDLM_TRY(SetHparams(spec, w));
  SHARDLM_TRY(SetTokenizer(spec, w));
  const size_t count = tensors.size();
  for (size_t i = 0; i < count; ++i) {
    const SynthTensor& t = tensors[i];
    auto fill = [t, i, count, seed = spec.seed, n_threads, progress](std::span<uint8_t> dst) {
      if (progress) progress(i, count, t.name);
      return FillTensor(t, seed, n_threads, dst);
    };
    SHARDLM_TRY(w.AddTensor(t.name, t.type, t.ne, std::move(fill)));
  }
  return w;
}

}  // namespace shardlm::cli
