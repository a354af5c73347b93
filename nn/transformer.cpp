#include "nn/transformer.hpp"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "autograd/functions.hpp"

namespace tg::nn {

void TransformerConfig::validate() const {
  constexpr const char* kName = "TransformerConfig";
  if (src_vocab <= kEos || tgt_vocab <= kEos)
    throw std::invalid_argument(
        fmt::format("TransformerConfig: vocabularies must hold the specials <pad> <bos> <eos> (size > {}), "
                    "got src_vocab={} tgt_vocab={}",
                    kEos, src_vocab, tgt_vocab));
  for (const auto& [field, value] :
       {std::pair{"d_model", d_model}, std::pair{"heads", heads}, std::pair{"enc_layers", enc_layers},
        std::pair{"dec_layers", dec_layers}, std::pair{"d_ff", d_ff}, std::pair{"max_len", max_len}})
    require_positive(kName, field, value);
  require_divisible(kName, "d_model", d_model, "heads", heads);
  require_probability(kName, "dropout", dropout);
  parse_activation(activation);
}

std::vector<ConfigField> TransformerConfig::fields() {
  return {
      {"src_vocab", &src_vocab},   {"tgt_vocab", &tgt_vocab},   {"d_model", &d_model}, {"heads", &heads},
      {"enc_layers", &enc_layers}, {"dec_layers", &dec_layers}, {"d_ff", &d_ff},       {"dropout", &dropout},
      {"norm_first", &norm_first}, {"activation", &activation}, {"max_len", &max_len}};
}

void Batch::validate() const {
  auto check = [](const char* name, size_t have, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0 || have != static_cast<size_t>(rows * cols))
      throw std::invalid_argument(
          fmt::format("Batch: {} has {} ids, expected batch {} x length {}", name, have, rows, cols));
  };
  check("src", src.size(), batch, src_len);
  check("tgt_in", tgt_in.size(), batch, tgt_len);
  check("labels", labels.size(), batch, tgt_len);
}

int64_t Batch::num_label_tokens() const {
  int64_t n = 0;
  for (int32_t id : labels) n += id != kPad;
  return n;
}

KeyPadding padding_mask(std::span<const int32_t> ids, int64_t batch, int64_t len, int32_t pad) {
  if (static_cast<int64_t>(ids.size()) != batch * len)
    throw std::invalid_argument(
        fmt::format("padding_mask: {} ids for batch {} x length {}", ids.size(), batch, len));
  KeyPadding m{std::vector<uint8_t>(ids.size()), batch, len};
  for (size_t i = 0; i < ids.size(); ++i) m.mask[i] = ids[i] == pad;
  return m;
}

namespace {

// One residual sub-layer. Post-norm: norm(x + drop(f(x))); pre-norm: x + drop(f(norm(x))).
template <class F>
Tensor sublayer(const Tensor& x, const LayerNorm& norm, const Dropout& drop, bool norm_first, F&& f) {
  if (norm_first) return drop.forward_add(x, f(norm.forward(x)));
  return norm.forward(drop.forward_add(x, f(x)));
}

// Rows `rows` of t along axis 0 (copies; decoding only, not differentiable).
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape s = t.shape();
  const int64_t n = s[0], row = t.numel() / n;
  s[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(s);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= n)
      throw std::out_of_range(
          fmt::format("DecoderState::select_rows: row {} out of range [0, {})", rows[i], n));
    std::memcpy(out.data() + static_cast<int64_t>(i) * row, t.data() + rows[i] * row,
                sizeof(float) * static_cast<size_t>(row));
  }
  return out;
}

}  // namespace

EncoderLayer::EncoderLayer(const TransformerConfig& cfg, Generator& gen)
    : self_attn(cfg.d_model, cfg.heads, cfg.dropout, gen),
      ff(cfg.d_model, cfg.d_ff, parse_activation(cfg.activation), cfg.dropout, gen),
      norm1(cfg.d_model),
      norm2(cfg.d_model),
      dropout1(cfg.dropout, gen),
      dropout2(cfg.dropout, gen),
      norm_first(cfg.norm_first) {
  register_module("self_attn", self_attn);
  register_module("", ff);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor EncoderLayer::forward(const Tensor& x, const KeyPadding& pad) {
  Tensor h = sublayer(x, norm1, dropout1, norm_first,
                      [&](const Tensor& in) { return self_attn.self_attention(in, false, pad); });
  return sublayer(h, norm2, dropout2, norm_first, [&](const Tensor& in) { return ff.forward(in); });
}

DecoderLayer::DecoderLayer(const TransformerConfig& cfg, Generator& gen)
    : self_attn(cfg.d_model, cfg.heads, cfg.dropout, gen),
      multihead_attn(cfg.d_model, cfg.heads, cfg.dropout, gen),
      ff(cfg.d_model, cfg.d_ff, parse_activation(cfg.activation), cfg.dropout, gen),
      norm1(cfg.d_model),
      norm2(cfg.d_model),
      norm3(cfg.d_model),
      dropout1(cfg.dropout, gen),
      dropout2(cfg.dropout, gen),
      dropout3(cfg.dropout, gen),
      norm_first(cfg.norm_first) {
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_module("", ff);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("dropout3", dropout3);
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& memory, const KeyPadding& tgt_pad,
                             const KeyPadding& memory_pad) {
  Tensor h = sublayer(x, norm1, dropout1, norm_first,
                      [&](const Tensor& in) { return self_attn.self_attention(in, true, tgt_pad); });
  h = sublayer(h, norm2, dropout2, norm_first,
               [&](const Tensor& in) { return multihead_attn.cross_attention(in, memory, memory_pad); });
  return sublayer(h, norm3, dropout3, norm_first, [&](const Tensor& in) { return ff.forward(in); });
}

Tensor DecoderLayer::forward_step(const Tensor& x, KVCache& self_cache, const KVCache& memory_cache,
                                  const KeyPadding& memory_pad) {
  Tensor h = sublayer(x, norm1, dropout1, norm_first,
                      [&](const Tensor& in) { return self_attn.self_attention_step(in, self_cache); });
  h = sublayer(h, norm2, dropout2, norm_first, [&](const Tensor& in) {
    return multihead_attn.cross_attention_cached(in, memory_cache, memory_pad);
  });
  return sublayer(h, norm3, dropout3, norm_first, [&](const Tensor& in) { return ff.forward(in); });
}

void DecoderState::select_rows(const std::vector<int64_t>& rows) {
  for (auto* caches : {&self_cache, &memory_cache})
    for (KVCache& c : *caches)
      if (!c.empty()) c.kv = gather_rows(c.kv, rows);
  if (!memory_pad.empty()) {
    std::vector<uint8_t> m;
    m.reserve(rows.size() * static_cast<size_t>(memory_pad.len));
    for (int64_t r : rows) {
      const auto* p = memory_pad.mask.data() + r * memory_pad.len;
      m.insert(m.end(), p, p + memory_pad.len);
    }
    memory_pad.mask = std::move(m);
    memory_pad.batch = static_cast<int64_t>(rows.size());
  }
  batch = static_cast<int64_t>(rows.size());
}

Transformer::Encoder::Encoder(const TransformerConfig& cfg, Generator& gen) : norm(cfg.d_model) {
  for (int64_t i = 0; i < cfg.enc_layers; ++i) {
    layers.push_back(std::make_unique<EncoderLayer>(cfg, gen));
    register_module(fmt::format("layers.{}", i), *layers.back());
  }
  register_module("norm", norm);
}

Transformer::Decoder::Decoder(const TransformerConfig& cfg, Generator& gen) : norm(cfg.d_model) {
  for (int64_t i = 0; i < cfg.dec_layers; ++i) {
    layers.push_back(std::make_unique<DecoderLayer>(cfg, gen));
    register_module(fmt::format("layers.{}", i), *layers.back());
  }
  register_module("norm", norm);
}

namespace {
const TransformerConfig& validated(const TransformerConfig& cfg) {
  cfg.validate();
  return cfg;
}
}  // namespace

Transformer::Transformer(const TransformerConfig& cfg, uint64_t seed)
    : cfg_(validated(cfg)),
      rng_(seed),
      src_embed(cfg.src_vocab, cfg.d_model, rng_),
      tgt_embed(cfg.tgt_vocab, cfg.d_model, rng_),
      encoder(cfg, rng_),
      decoder(cfg, rng_),
      generator(cfg.d_model, cfg.tgt_vocab, rng_),
      pos_(cfg.d_model, cfg.max_len),
      embed_dropout_(cfg.dropout, rng_) {
  register_module("src_embed", src_embed);
  register_module("tgt_embed", tgt_embed);
  register_module("transformer.encoder", encoder);
  register_module("transformer.decoder", decoder);
  register_module("generator", generator);
  register_module("embed_dropout", embed_dropout_);
}

Tensor Transformer::embed_positions(const Embedding& emb, std::span<const int32_t> ids, int64_t batch,
                                    int64_t len, int64_t offset) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= emb.num)
      throw std::out_of_range(fmt::format(
          "Transformer: token id {} at position {} is outside the vocabulary [0, {})", ids[i], i, emb.num));
  return embed_dropout_.forward(pos_.forward(emb.forward(ids, {batch, len}), offset));
}

namespace {
void check_ids(const char* op, const char* what, std::span<const int32_t> ids, int64_t batch, int64_t len) {
  if (batch <= 0 || len <= 0 || static_cast<int64_t>(ids.size()) != batch * len)
    throw std::invalid_argument(
        fmt::format("Transformer::{}: {} {} ids for batch {} x length {}", op, ids.size(), what, batch, len));
}
void check_memory(const char* op, const Tensor& memory, const KeyPadding& pad, int64_t batch, int64_t d) {
  if (memory.dim() != 3 || memory.size(2) != d || (batch >= 0 && memory.size(0) != batch))
    throw std::invalid_argument(fmt::format("Transformer::{}: memory must be [{}, S, {}], got {}", op,
                                            batch >= 0 ? std::to_string(batch) : std::string("B"), d,
                                            shape_str(memory.shape())));
  if (!pad.empty() && (pad.batch != memory.size(0) || pad.len != memory.size(1)))
    throw std::invalid_argument(fmt::format("Transformer::{}: memory padding mask [{}, {}] for memory {}", op,
                                            pad.batch, pad.len, shape_str(memory.shape())));
}
}  // namespace

Tensor Transformer::encode(std::span<const int32_t> src, int64_t batch, int64_t src_len) {
  check_ids("encode", "source", src, batch, src_len);
  const KeyPadding pad = padding_mask(src, batch, src_len);
  Tensor x = embed_positions(src_embed, src, batch, src_len, 0);
  for (auto& layer : encoder.layers) x = layer->forward(x, pad);
  return encoder.norm.forward(x);
}

Tensor Transformer::decode(std::span<const int32_t> tgt_in, int64_t batch, int64_t tgt_len,
                           const Tensor& memory, const KeyPadding& memory_pad) {
  check_ids("decode", "target", tgt_in, batch, tgt_len);
  check_memory("decode", memory, memory_pad, batch, cfg_.d_model);
  const KeyPadding pad = padding_mask(tgt_in, batch, tgt_len);
  Tensor x = embed_positions(tgt_embed, tgt_in, batch, tgt_len, 0);
  for (auto& layer : decoder.layers) x = layer->forward(x, memory, pad, memory_pad);
  return decoder.norm.forward(x);
}

Tensor Transformer::generate(const Tensor& hidden) const {
  return generator.forward(hidden);
}

Tensor Transformer::forward(const Batch& b) {
  b.validate();
  const Tensor memory = encode(b.src, b.batch, b.src_len);
  const Tensor hidden = decode(b.tgt_in, b.batch, b.tgt_len, memory, padding_mask(b.src, b.batch, b.src_len));
  return generate(reshape(hidden, {b.batch * b.tgt_len, cfg_.d_model}));
}

DecoderState Transformer::start_decoding(const Tensor& memory, const KeyPadding& memory_pad) {
  check_memory("start_decoding", memory, memory_pad, -1, cfg_.d_model);
  DecoderState st;
  st.batch = memory.size(0);
  st.memory_pad = memory_pad;
  st.self_cache.resize(decoder.layers.size());
  st.memory_cache.resize(decoder.layers.size());
  for (size_t i = 0; i < decoder.layers.size(); ++i)
    decoder.layers[i]->multihead_attn.precompute_memory(memory, st.memory_cache[i]);
  return st;
}

Tensor Transformer::decode_step(DecoderState& st, std::span<const int32_t> tokens) {
  if (static_cast<int64_t>(tokens.size()) != st.batch)
    throw std::invalid_argument(
        fmt::format("Transformer::decode_step: {} tokens for a state of batch {}", tokens.size(), st.batch));
  Tensor x = embed_positions(tgt_embed, tokens, st.batch, 1, st.pos);
  for (size_t i = 0; i < decoder.layers.size(); ++i)
    x = decoder.layers[i]->forward_step(x, st.self_cache[i], st.memory_cache[i], st.memory_pad);
  ++st.pos;
  return generate(reshape(decoder.norm.forward(x), {st.batch, cfg_.d_model}));
}

void Transformer::keep_attention(bool on) {
  for (auto& l : encoder.layers) l->self_attn.keep_attention = on;
  for (auto& l : decoder.layers) l->self_attn.keep_attention = l->multihead_attn.keep_attention = on;
}

NamedTensors Transformer::attention_maps() const {
  NamedTensors out;
  for (size_t i = 0; i < encoder.layers.size(); ++i)
    out.emplace_back(fmt::format("encoder.layers.{}.self_attn", i),
                     encoder.layers[i]->self_attn.last_attention);
  for (size_t i = 0; i < decoder.layers.size(); ++i) {
    out.emplace_back(fmt::format("decoder.layers.{}.self_attn", i),
                     decoder.layers[i]->self_attn.last_attention);
    out.emplace_back(fmt::format("decoder.layers.{}.multihead_attn", i),
                     decoder.layers[i]->multihead_attn.last_attention);
  }
  return out;
}

}  // namespace tg::nn
