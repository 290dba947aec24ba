// Forward pass vs a slow float64 reference on random models with shapes the fixtures do not
// cover: head_dim not a multiple of 16 (kernel tails), partial rope (n_rot < head_dim), GQA
// groups of 3, q_dim != n_embd, rope_freqs divisors, tied output, both rope pairings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "model/model_harness.h"

namespace shardlm::testing {
namespace {

struct Shape {
  std::string arch = "llama";
  int n_layers = 2, n_embd = 96, n_head = 6, n_head_kv = 2, head_dim = 40, n_rot = 24;
  int n_ff = 160, n_vocab = 300;
  float freq_base = 5000.0f, eps = 1e-5f;
  bool tied = false, rope_freqs = true;
};

// Weights by name as float64 row-major [rows][cols] (ne = {cols, rows}).
using Tensors = std::map<std::string, std::vector<double>>;

struct Synth {
  std::vector<uint8_t> bytes;
  Tensors t;
};

Synth Build(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  GgufWriter w;
  Synth out;
  const std::string a = s.arch;
  w.SetString("general.architecture", a);
  w.SetUint32(a + ".block_count", s.n_layers);
  w.SetUint32(a + ".embedding_length", s.n_embd);
  w.SetUint32(a + ".feed_forward_length", s.n_ff);
  w.SetUint32(a + ".attention.head_count", s.n_head);
  w.SetUint32(a + ".attention.head_count_kv", s.n_head_kv);
  w.SetUint32(a + ".attention.key_length", s.head_dim);
  w.SetUint32(a + ".attention.value_length", s.head_dim);
  w.SetUint32(a + ".rope.dimension_count", s.n_rot);
  w.SetFloat32(a + ".rope.freq_base", s.freq_base);
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", s.eps);
  auto add = [&](const std::string& name, std::vector<int64_t> ne, float scale, float offset) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> v(n);
    for (float& x : v) x = offset + scale * normal(rng);
    out.t[name] = std::vector<double>(v.begin(), v.end());
    std::vector<uint8_t> raw(n * 4);
    std::memcpy(raw.data(), v.data(), raw.size());
    EXPECT_TRUE(w.AddTensor(name, GgmlType::kF32, ne, std::move(raw)).ok()) << name;
  };
  const int q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  add("token_embd.weight", {s.n_embd, s.n_vocab}, 1.0f, 0.0f);
  add("output_norm.weight", {s.n_embd}, 0.1f, 1.0f);
  if (!s.tied) add("output.weight", {s.n_embd, s.n_vocab}, 0.2f, 0.0f);
  if (s.rope_freqs) add("rope_freqs.weight", {s.n_rot / 2}, 0.5f, 2.5f);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {s.n_embd}, 0.1f, 1.0f);
    add(p + "attn_q.weight", {s.n_embd, q_dim}, 0.15f, 0.0f);
    add(p + "attn_k.weight", {s.n_embd, kv_dim}, 0.15f, 0.0f);
    add(p + "attn_v.weight", {s.n_embd, kv_dim}, 0.15f, 0.0f);
    add(p + "attn_output.weight", {q_dim, s.n_embd}, 0.1f, 0.0f);
    if (s.arch == "qwen3") {
      add(p + "attn_q_norm.weight", {s.head_dim}, 0.1f, 1.0f);
      add(p + "attn_k_norm.weight", {s.head_dim}, 0.1f, 1.0f);
    }
    add(p + "ffn_norm.weight", {s.n_embd}, 0.1f, 1.0f);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, 0.1f, 0.0f);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, 0.1f, 0.0f);
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, 0.1f, 0.0f);
  }
  auto bytes = w.WriteToBytes();
  EXPECT_TRUE(bytes.ok());
  out.bytes = std::move(bytes).value();
  return out;
}

using Vec = std::vector<double>;

Vec MatVec(const Vec& w, const Vec& x, int rows) {
  const size_t cols = x.size();
  Vec y(rows, 0.0);
  for (int r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
  }
  return y;
}

void RmsNormInPlace(double* x, const double* w, int n, double eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) x[i] = x[i] * scale * w[i];
}

void Rope(double* head, int pos, const Shape& s, const Tensors& t) {
  for (int i = 0; i < s.n_rot / 2; ++i) {
    double theta = pos * std::pow(double(s.freq_base), -2.0 * i / s.n_rot);
    if (s.rope_freqs) theta /= t.at("rope_freqs.weight")[i];
    const int i0 = s.arch == "qwen3" ? i : 2 * i;
    const int i1 = s.arch == "qwen3" ? i + s.n_rot / 2 : 2 * i + 1;
    const double x0 = head[i0], x1 = head[i1];
    head[i0] = x0 * std::cos(theta) - x1 * std::sin(theta);
    head[i1] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
}

// Logits of every position of `tokens`, [n][n_vocab], in float64.
Vec Reference(const Shape& s, const Tensors& t, const std::vector<int32_t>& tokens) {
  const int n = int(tokens.size()), hd = s.head_dim, group = s.n_head / s.n_head_kv;
  std::vector<Vec> x(n);
  for (int i = 0; i < n; ++i) {
    const auto& e = t.at("token_embd.weight");
    x[i].assign(e.begin() + size_t(tokens[i]) * s.n_embd,
                e.begin() + size_t(tokens[i] + 1) * s.n_embd);
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    std::vector<Vec> q(n), k(n), v(n);
    for (int i = 0; i < n; ++i) {
      Vec h = x[i];
      RmsNormInPlace(h.data(), t.at(p + "attn_norm.weight").data(), s.n_embd, s.eps);
      q[i] = MatVec(t.at(p + "attn_q.weight"), h, s.n_head * hd);
      k[i] = MatVec(t.at(p + "attn_k.weight"), h, s.n_head_kv * hd);
      v[i] = MatVec(t.at(p + "attn_v.weight"), h, s.n_head_kv * hd);
      for (int hh = 0; hh < s.n_head; ++hh) {
        if (s.arch == "qwen3") {
          RmsNormInPlace(&q[i][hh * hd], t.at(p + "attn_q_norm.weight").data(), hd, s.eps);
        }
        Rope(&q[i][hh * hd], i, s, t);
      }
      for (int hh = 0; hh < s.n_head_kv; ++hh) {
        if (s.arch == "qwen3") {
          RmsNormInPlace(&k[i][hh * hd], t.at(p + "attn_k_norm.weight").data(), hd, s.eps);
        }
        Rope(&k[i][hh * hd], i, s, t);
      }
    }
    for (int i = 0; i < n; ++i) {
      Vec attn(s.n_head * hd, 0.0);
      for (int hh = 0; hh < s.n_head; ++hh) {
        const int g = hh / group;
        Vec score(i + 1);
        double max = -INFINITY, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += q[i][hh * hd + c] * k[j][g * hd + c];
          score[j] = d / std::sqrt(double(hd));
          max = std::max(max, score[j]);
        }
        for (int j = 0; j <= i; ++j) sum += score[j] = std::exp(score[j] - max);
        for (int j = 0; j <= i; ++j) {
          for (int c = 0; c < hd; ++c) attn[hh * hd + c] += score[j] / sum * v[j][g * hd + c];
        }
      }
      Vec o = MatVec(t.at(p + "attn_output.weight"), attn, s.n_embd);
      for (int c = 0; c < s.n_embd; ++c) x[i][c] += o[c];
      Vec h = x[i];
      RmsNormInPlace(h.data(), t.at(p + "ffn_norm.weight").data(), s.n_embd, s.eps);
      Vec gate = MatVec(t.at(p + "ffn_gate.weight"), h, s.n_ff);
      Vec up = MatVec(t.at(p + "ffn_up.weight"), h, s.n_ff);
      for (int c = 0; c < s.n_ff; ++c) gate[c] = gate[c] / (1 + std::exp(-gate[c])) * up[c];
      Vec d = MatVec(t.at(p + "ffn_down.weight"), gate, s.n_embd);
      for (int c = 0; c < s.n_embd; ++c) x[i][c] += d[c];
    }
  }
  Vec logits;
  const Vec& head = t.at(s.tied ? "token_embd.weight" : "output.weight");
  for (int i = 0; i < n; ++i) {
    RmsNormInPlace(x[i].data(), t.at("output_norm.weight").data(), s.n_embd, s.eps);
    Vec row = MatVec(head, x[i], s.n_vocab);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

void CheckAgainstReference(const Shape& shape, uint32_t seed) {
  Synth synth = Build(shape, seed);
  auto file = GgufFile::FromBytes(synth.bytes, "synth.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::shared_ptr<const GgufFile> shared(std::move(file).value());
  HarnessOptions options;
  options.n_threads = 2;
  options.page_tokens = 8;
  auto h = Harness::Open("", options, shared);
  ASSERT_NE(h, nullptr);
  std::vector<int32_t> tokens;
  std::mt19937 rng(seed + 1);
  for (int i = 0; i < 29; ++i) tokens.push_back(int32_t(rng() % shape.n_vocab));
  BlockTable table = h->NewTable();
  std::vector<float> got = h->Run(table, tokens, 0, true);
  Vec want = Reference(shape, synth.t, tokens);
  std::vector<float> want_f(want.begin(), want.end());
  ExpectClose(got.data(), want_f.data(), want_f.size(), 2e-4, 3e-5, shape.arch + " vs float64");
}

TEST(ReferenceForward, LlamaOddShapes) { CheckAgainstReference(Shape{}, 11); }

TEST(ReferenceForward, Qwen3OddShapesTied) {
  Shape s;
  s.arch = "qwen3";
  s.tied = true;
  s.rope_freqs = false;
  s.head_dim = 36;
  s.n_rot = 36;
  s.n_head = 4;
  s.n_head_kv = 4;
  CheckAgainstReference(s, 12);
}

}  // namespace
}  // namespace shardlm::testing
