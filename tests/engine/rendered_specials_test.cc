// Special tokens the output shows (EngineRequest::rendered_specials), through the scheduler
// over a real model: a vocabulary whose chat markup is CONTROL tokens (as Gemma 4's is) gives
// their text only to a request that asks for it, never a turn marker's; a grammar over that
// text lets the model write a marker as its one token (only then), and the text is the same.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/scheduler_test_util.h"
#include "grammar/grammar.h"

namespace shardlm {
namespace rendered_specials_test {

using scheduler_test_util::kGemma4;

// The fixture tokenizer with three byte tokens turned into CONTROL markup tokens.
class MarkupTokenizer : public Tokenizer {
 public:
  static constexpr TokenId kOpen = 1, kClose = 2, kQuote = 3;

  explicit MarkupTokenizer(const Tokenizer& base) : base_(base) {}
  std::vector<TokenId> Encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    return base_.Encode(text, add_special, parse_special);
  }
  std::string Piece(TokenId id, bool render_special) const override {
    if (IsMarkup(id)) return render_special ? std::string(TokenText(id)) : "";
    return base_.Piece(id, render_special);
  }
  int32_t n_vocab() const override { return base_.n_vocab(); }
  TokenId bos() const override { return base_.bos(); }
  TokenId eos() const override { return base_.eos(); }
  bool add_bos() const override { return base_.add_bos(); }
  bool IsEog(TokenId id) const override { return base_.IsEog(id); }
  std::vector<TokenId> EogIds() const override { return base_.EogIds(); }
  bool IsControl(TokenId id) const override { return IsMarkup(id) || base_.IsControl(id); }
  std::string_view TokenText(TokenId id) const override {
    switch (id) {
      case kOpen:
        return "<|tool_call>";
      case kClose:
        return "<tool_call|>";
      case kQuote:
        return "<|\"|>";
      default:
        return base_.TokenText(id);
    }
  }

 private:
  static bool IsMarkup(TokenId id) { return id >= kOpen && id <= kQuote; }
  const Tokenizer& base_;
};

// The gemma4 fixture's byte vocabulary: 258 is <start_of_turn>, a CONTROL turn marker.
constexpr TokenId kStartOfTurn = 258;

struct MarkupEngine {
  std::unique_ptr<MarkupTokenizer> tokenizer;
  std::unique_ptr<Scheduler> scheduler;
};

MarkupEngine MakeMarkupEngine() {
  MarkupEngine engine;
  const LoadedModel& loaded = scheduler_test_util::Fixture(kGemma4);
  if (!loaded.model) return engine;
  engine.tokenizer = std::make_unique<MarkupTokenizer>(*loaded.tokenizer);
  auto scheduler =
      Scheduler::Create(*loaded.model, *engine.tokenizer, scheduler_test_util::TestOptions(2));
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().message();
  if (scheduler.ok()) engine.scheduler = std::move(scheduler).value();
  return engine;
}

EngineRequest Forced(std::vector<std::pair<TokenId, float>> bias, int max_tokens) {
  EngineRequest request =
      scheduler_test_util::Request(scheduler_test_util::Encode(kGemma4, "Weather?", true),
                                   scheduler_test_util::Greedy(), max_tokens);
  request.logit_bias = std::move(bias);
  return request;
}

TEST(RenderedSpecials, OnlyTheTokensAskedForGiveText) {
  SHARDLM_REQUIRE_FIXTURES();
  MarkupEngine engine = MakeMarkupEngine();
  ASSERT_NE(engine.scheduler, nullptr);
  EngineRequest request = Forced({{MarkupTokenizer::kOpen, 100.0f}}, 3);
  auto hidden = scheduler_test_util::RunOne(*engine.scheduler, request);
  EXPECT_EQ(hidden->ids, std::vector<TokenId>(3, MarkupTokenizer::kOpen));
  EXPECT_EQ(hidden->text, "");

  request.rendered_specials = {MarkupTokenizer::kQuote, MarkupTokenizer::kOpen};
  auto shown = scheduler_test_util::RunOne(*engine.scheduler, request);
  EXPECT_EQ(shown->ids, hidden->ids);
  EXPECT_EQ(shown->text, "<|tool_call><|tool_call><|tool_call>");

  // A turn marker is not markup the request asked for: it stays hidden.
  request.logit_bias = {{kStartOfTurn, 100.0f}};
  auto turn = scheduler_test_util::RunOne(*engine.scheduler, request);
  EXPECT_EQ(turn->ids, std::vector<TokenId>(3, kStartOfTurn));
  EXPECT_EQ(turn->text, "");

  request.rendered_specials = {engine.tokenizer->n_vocab()};
  scheduler_test_util::Collector c;
  EXPECT_EQ(engine.scheduler->Submit(request, c.Callbacks()).status().code(),
            StatusCode::kInvalidArgument);
}

std::shared_ptr<const grammar::Grammar> LiteralGrammar(const std::string& text) {
  grammar::GrammarBuilder builder;
  const grammar::RuleId root = builder.AddRule("root");
  builder.AddAlternative(root, builder.Literal(text));
  Result<grammar::Grammar> g = builder.Build(root);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::make_shared<const grammar::Grammar>(std::move(g).value());
}

// A grammar of the text a marker spells: a request that renders the markers may write each
// as its one token (the model's choice, here pushed by a bias), one that does not spells it
// in bytes; both end with the same text, complete.
TEST(RenderedSpecials, AGrammarSeesTheMarkersAsText) {
  SHARDLM_REQUIRE_FIXTURES();
  MarkupEngine engine = MakeMarkupEngine();
  ASSERT_NE(engine.scheduler, nullptr);
  const std::string call = "<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>";
  EngineRequest request = Forced({{MarkupTokenizer::kOpen, 50.0f},
                                  {MarkupTokenizer::kClose, 50.0f},
                                  {MarkupTokenizer::kQuote, 50.0f}},
                                 100);
  request.grammar = LiteralGrammar(call);
  request.rendered_specials = {MarkupTokenizer::kOpen, MarkupTokenizer::kClose,
                               MarkupTokenizer::kQuote};
  auto tokens = scheduler_test_util::RunOne(*engine.scheduler, request);
  EXPECT_EQ(tokens->text, call);
  EXPECT_EQ(tokens->finish.reason, FinishReason::kStop);
  ASSERT_FALSE(tokens->ids.empty());
  EXPECT_EQ(tokens->ids.front(), MarkupTokenizer::kOpen);
  EXPECT_EQ(tokens->ids.back(), MarkupTokenizer::kClose);
  EXPECT_EQ(std::count(tokens->ids.begin(), tokens->ids.end(), MarkupTokenizer::kQuote), 2);
  EXPECT_EQ(tokens->ids.size(), call.size() - 12 - 12 - 5 - 5 + 4);

  request.rendered_specials.clear();
  auto bytes = scheduler_test_util::RunOne(*engine.scheduler, request);
  EXPECT_EQ(bytes->text, call);
  EXPECT_EQ(bytes->finish.reason, FinishReason::kStop);
  EXPECT_EQ(bytes->ids.size(), call.size());
}

}  // namespace rendered_specials_test
}  // namespace shardlm
