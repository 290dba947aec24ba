// `shardlm tokenize`: the token ids of a text under a GGUF model's vocabulary, like
// `llama-tokenize --ids` (`[1, 2, 3]`), or with --pieces one `id -> 'piece'` per line.
//
// Goals: the same ids as llama-tokenize for the same flags: BOS as the vocabulary asks
// unless --no-bos, special-token text parsed unless --no-parse-special; the text comes from
// the command line or a file (-f).
// Non-goals: escape processing of the text (llama-tokenize's default without --no-escape),
// loading weights (only the GGUF metadata is read).
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::cli {
namespace {

struct TokenizeFlags {
  std::string model_path;
  std::string text;
  std::string file;
  bool no_parse_special = false;
  bool no_bos = false;
  bool pieces = false;
};

void DeclareFlags(CLI::App& cmd, TokenizeFlags& f) {
  cmd.add_option("-m,--model", f.model_path, "GGUF model file (only its vocabulary is read)")
      ->required();
  cmd.add_option("text", f.text, "Text to tokenize");
  cmd.add_option("-f,--file", f.file, "Read the text from this file instead");
  cmd.add_flag("--no-parse-special", f.no_parse_special,
               "Tokenize special-token text (\"<|im_start|>\") as plain text");
  cmd.add_flag("--no-bos", f.no_bos, "Never add BOS, even if the vocabulary asks for it");
  cmd.add_flag("--pieces", f.pieces, "Print one `id -> 'piece'` line per token");
}

Result<std::string> ReadText(const TokenizeFlags& f) {
  if (f.file.empty()) return f.text;
  if (!f.text.empty()) return InvalidArgument("give the text or -f FILE, not both");
  std::ifstream in(f.file, std::ios::binary);
  if (!in) return IoError("cannot read '{}'", f.file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void PrintIds(const std::vector<TokenId>& ids) {
  std::string line = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ", ";
    line += std::to_string(ids[i]);
  }
  line += "]\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
}

// As llama-tokenize without --ids: special tokens rendered as their text.
void PrintPieces(const Tokenizer& tokenizer, const std::vector<TokenId>& ids) {
  for (TokenId id : ids) {
    const std::string piece = tokenizer.Piece(id, /*render_special=*/true);
    std::printf("%6d -> '", id);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::printf("'\n");
  }
}

Status RunTokenize(const TokenizeFlags& f) {
  SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadText(f));
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(f.model_path));
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(*file));
  // llama-tokenize passes add_special = the vocab's add_bos && !--no-bos.
  const bool add_special = tokenizer->add_bos() && !f.no_bos;
  const std::vector<TokenId> ids = tokenizer->Encode(text, add_special, !f.no_parse_special);
  if (f.pieces) {
    PrintPieces(*tokenizer, ids);
  } else {
    PrintIds(ids);
  }
  std::fflush(stdout);
  return Status::Ok();
}

}  // namespace

void AddTokenizeCommand(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  auto flags = std::make_shared<TokenizeFlags>();
  DeclareFlags(*cmd, *flags);
  cmd->callback([flags, &action] { action = [flags] { return RunTokenize(*flags); }; });
}

}  // namespace shardlm::cli
