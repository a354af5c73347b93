#include "nn/family/transformer_family.hpp"

#include <fmt/format.h>

#include <array>
#include <new>

#include "nn/tokenizers/spm.hpp"
#include "nn/tokenizers/vocab_tokenizer.hpp"

namespace tg::nn {

using io::SafetensorsError;

namespace {

constexpr std::array<std::string_view, 6> kKeys = {"config",    "tokenizer", "src_vocab",
                                                   "tgt_vocab", "src_spm",   "tgt_spm"};

// The tokenizer of one side ("src_" or "tgt_") of kind `kind`.
std::shared_ptr<const Tokenizer> load_side(const std::string& kind, const io::Metadata& md,
                                           const std::string& prefix, const std::string& path) {
  if (kind == "spm") {
    auto spm = std::make_shared<SpmTokenizer>(SpmTokenizer::load(md, prefix, path));
    if (spm->layout() != SpmLayout::translate)
      throw SafetensorsError(
          fmt::format("checkpoint {}: __metadata__ \"{}spm\": a language model's "
                      "SentencePiece model (its ids have no <pad> <bos> <eos>)",
                      path, prefix));
    return spm;
  }
  return std::make_shared<VocabTokenizer>(VocabTokenizer::load(parse_tokenizer(kind), md, prefix, path));
}

}  // namespace

std::string config_to_json(const TransformerConfig& c) {
  return config_to_json<TransformerConfig>(c);
}

TransformerConfig config_from_json(const std::string& text) {
  return config_from_json<TransformerConfig>(text);
}

double transformer_parameter_count(const TransformerConfig& c) {
  const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff);
  const double attention = 3 * d * d + 3 * d + d * d + d;  // in_proj, out_proj
  const double feed_forward = ff * d + ff + d * ff + d;    // linear1, linear2
  const double norm = 2 * d;
  const double enc_layer = attention + feed_forward + 2 * norm;
  const double dec_layer = 2 * attention + feed_forward + 3 * norm;
  const double vs = static_cast<double>(c.src_vocab), vt = static_cast<double>(c.tgt_vocab);
  return vs * d + vt * d + static_cast<double>(c.enc_layers) * enc_layer +
         static_cast<double>(c.dec_layers) * dec_layer + 2 * norm + vt * d + vt;
}

void save_checkpoint(const std::string& path, const Transformer& model, const CheckpointInfo& info,
                     const Optimizer* optimizer) {
  const TransformerConfig& c = model.config();
  if (!info.src || !info.tgt || info.src->kind() != info.tgt->kind())
    throw std::invalid_argument(
        fmt::format("save {}: the source and target tokenizers must be of one kind", path));
  if (c.src_vocab != info.src->vocab_size() || c.tgt_vocab != info.tgt->vocab_size())
    throw std::invalid_argument(fmt::format("save {}: model vocabularies {}/{} but the tokenizers hold {}/{}",
                                            path, c.src_vocab, c.tgt_vocab, info.src->vocab_size(),
                                            info.tgt->vocab_size()));
  io::Metadata md;
  md["config"] = config_to_json(c);
  md["tokenizer"] = info.src->kind();
  info.src->save(md, "src_");
  info.tgt->save(md, "tgt_");
  write_checkpoint(path, kTransformerFamily, std::move(md), kKeys, info, model, optimizer);
}

Checkpoint read_checkpoint(const std::string& path) {
  io::TensorFile file = io::read_safetensors(path);  // names the file when memory runs out
  try {
    return parse_checkpoint(std::move(file), path);
  } catch (const std::bad_alloc&) {
    throw SafetensorsError(fmt::format("checkpoint {}: out of memory reading its metadata", path));
  }
}

Checkpoint parse_checkpoint(io::TensorFile file, const std::string& path) {
  Checkpoint ck = open_checkpoint<CheckpointInfo>(std::move(file), path, kTransformerFamily, kKeys);
  const io::Metadata& md = ck.file.metadata;
  CheckpointInfo& info = ck.info;
  std::string kind;
  parse_metadata(
      md, path, "tokenizer", missing_key_hint(kTransformerFamily).c_str(), [&](const std::string& s) {
        if (s != "word" && s != "char" && s != "spm")
          throw std::invalid_argument(fmt::format("unknown tokenizer '{}' (expected word, char or spm)", s));
        kind = s;
      });
  info.src = load_side(kind, md, "src_", path);
  info.tgt = load_side(kind, md, "tgt_", path);
  const TransformerConfig& c = info.config;
  if (c.src_vocab != info.src->vocab_size() || c.tgt_vocab != info.tgt->vocab_size())
    throw SafetensorsError(
        fmt::format("checkpoint {}: config says vocabularies {}/{} but src_vocab/tgt_vocab hold {}/{}", path,
                    c.src_vocab, c.tgt_vocab, info.src->vocab_size(), info.tgt->vocab_size()));
  check_positions(c.max_len, "max_len", path);
  check_weight_count(ck.file, transformer_parameter_count(c), path);
  return ck;
}

std::unique_ptr<Transformer> load_transformer(const Checkpoint& ck, const std::string& path) {
  auto model = std::make_unique<Transformer>(ck.info.config, 0);
  load_weights(*model, ck.file, path);
  model->eval();
  return model;
}

}  // namespace tg::nn
