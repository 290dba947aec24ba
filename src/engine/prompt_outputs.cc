// PromptOutputs (prompt_outputs.h): mean pooling of embedding rows and the prompt's
// log-probabilities from its logits rows.
#include "engine/prompt_outputs.h"

#include "base/check.h"
#include "engine/logprobs.h"

namespace shardlm {

PromptOutputs::PromptOutputs(const EngineRequest& request)
    : n_prompt_(int(request.prompt.size())),
      embedding_(request.kind == RequestKind::kEmbedding),
      prompt_logprobs_(request.kind == RequestKind::kGenerate && request.want_prompt_logprobs),
      n_top_(request.sampling.n_logprobs) {
  if (prompt_logprobs_) prompt_ = request.prompt;
}

void PromptOutputs::AddEmbeddingRows(int first, int n, std::span<const float> rows) {
  if (n == 0) return;
  SHARDLM_CHECK(embedding_ && first == n_summed_ && first + n <= n_prompt_ &&
                rows.size() % size_t(n) == 0);
  const size_t n_embd = rows.size() / size_t(n);
  if (sum_.empty()) sum_.assign(n_embd, 0.0);
  SHARDLM_CHECK(sum_.size() == n_embd);
  for (int r = 0; r < n; ++r) {
    const float* row = rows.data() + size_t(r) * n_embd;
    for (size_t i = 0; i < n_embd; ++i) sum_[i] += double(row[i]);
  }
  n_summed_ += n;
}

void PromptOutputs::AddPromptLogits(int first, int n, std::span<const float> rows) {
  if (n == 0) return;
  SHARDLM_CHECK(prompt_logprobs_ && first == int(logprobs_.size()) && first + n < n_prompt_ &&
                rows.size() % size_t(n) == 0);
  const size_t n_vocab = rows.size() / size_t(n);
  for (int r = 0; r < n; ++r) {
    const std::span<const float> row = rows.subspan(size_t(r) * n_vocab, n_vocab);
    const double lse = LogSumExp(row);
    TokenEvent event;
    event.token = prompt_[size_t(first + r + 1)];
    event.logprob = float(double(row[size_t(event.token)]) - lse);
    event.top = TopLogprobs(row, n_top_, lse);
    logprobs_.push_back(std::move(event));
  }
}

bool PromptOutputs::complete() const {
  const bool embedding_done = !embedding_ || n_summed_ == n_prompt_;
  const bool logprobs_done = !prompt_logprobs_ || int(logprobs_.size()) == n_prompt_ - 1;
  return embedding_done && logprobs_done;
}

std::vector<float> PromptOutputs::MeanEmbedding() const {
  if (!embedding_ || n_summed_ != n_prompt_ || n_prompt_ == 0) return {};
  std::vector<float> mean(sum_.size());
  for (size_t i = 0; i < sum_.size(); ++i) mean[i] = float(sum_[i] / double(n_prompt_));
  return mean;
}

}  // namespace shardlm
