// The encoder-decoder Transformer ("Attention Is All You Need"), laid out like PyTorch's
// nn.Transformer so that a state_dict maps one to one (names in docs/ARCHITECTURE.md):
//
//   src_embed, tgt_embed        Embedding * sqrt(d) + sinusoidal positions, then dropout
//   transformer.encoder         layers.{i} (self_attn, linear1/2, norm1/2) + final norm
//   transformer.decoder         layers.{i} (self_attn, multihead_attn, linear1/2, norm1/2/3) + final norm
//   generator                   Linear(d, tgt_vocab) -> logits
//
// Post-norm (x = norm(x + sublayer(x))) by default, pre-norm (x = x + sublayer(norm(x))) with
// norm_first. As in PyTorch, the final encoder and decoder norms exist in both variants.
//
// Sequences (docs/ARCHITECTURE.md): source = tokens + <eos>; decoder input = <bos> + target; labels =
// target + <eos>; padded with <pad> = 0 on the right.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "nn/attention.hpp"
#include "nn/family/family.hpp"
#include "nn/layers.hpp"
#include "nn/module.hpp"
#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

struct TransformerConfig {
  int64_t src_vocab = 0, tgt_vocab = 0;
  int64_t d_model = 128, heads = 4, enc_layers = 2, dec_layers = 2, d_ff = 512;
  float dropout = 0.1f;
  bool norm_first = false;
  std::string activation = "relu";  // "relu" | "gelu"
  int64_t max_len = 1024;           // longest sequence the positional table covers
  // Throws std::invalid_argument naming the bad field (sizes > 0, d_model % heads == 0,
  // 0 <= dropout < 1, known activation).
  void validate() const;
  // The fields in a checkpoint's "config" (nn/family/family.hpp: one list for JSON and messages).
  std::vector<ConfigField> fields();
};

// One training/evaluation batch, row-major token ids.
struct Batch {
  std::vector<int32_t> src;     // [batch, src_len]
  std::vector<int32_t> tgt_in;  // [batch, tgt_len]: <bos> + target
  std::vector<int32_t> labels;  // [batch, tgt_len]: target + <eos>
  int64_t batch = 0, src_len = 0, tgt_len = 0;
  void validate() const;             // sizes agree; throws naming the field
  int64_t num_label_tokens() const;  // labels that are not <pad>
};

// [batch, len] ids -> the key padding mask (nonzero where id == pad).
KeyPadding padding_mask(std::span<const int32_t> ids, int64_t batch, int64_t len, int32_t pad = kPad);

class EncoderLayer : public Module {
 public:
  EncoderLayer(const TransformerConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& x, const KeyPadding& pad);
  MultiHeadAttention self_attn;
  FeedForward ff;  // linear1, linear2
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;
  bool norm_first;
};

class DecoderLayer : public Module {
 public:
  DecoderLayer(const TransformerConfig& cfg, Generator& gen);
  // Full (teacher-forced) pass over x [B, T, d] with the causal mask.
  Tensor forward(const Tensor& x, const Tensor& memory, const KeyPadding& tgt_pad,
                 const KeyPadding& memory_pad);
  // Incremental pass over the new positions x [B, t, d] using the caches.
  Tensor forward_step(const Tensor& x, KVCache& self_cache, const KVCache& memory_cache,
                      const KeyPadding& memory_pad);
  MultiHeadAttention self_attn, multihead_attn;
  FeedForward ff;  // linear1, linear2
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;
  bool norm_first;
};

// Incremental decoding state: per decoder layer the self-attention K/V of the target positions
// decoded so far and the cross-attention K/V of the encoder memory (computed once).
struct DecoderState {
  KeyPadding memory_pad;
  std::vector<KVCache> self_cache, memory_cache;  // one per decoder layer
  int64_t batch = 0;
  int64_t pos = 0;  // number of target positions already decoded
  // Keeps/reorders/repeats batch rows: row i of the new state is row rows[i] of the old one
  // (beam search: expand each source to K beams, then follow the surviving beams).
  void select_rows(const std::vector<int64_t>& rows);
};

class Transformer : public Module {
 public:
  // Parameters are initialised from `seed` (xavier-uniform matrices, zero attention biases);
  // dropout draws from rng(), seeded from `seed` too.
  explicit Transformer(const TransformerConfig& cfg, uint64_t seed = 0);
  const TransformerConfig& config() const { return cfg_; }

  // Teacher-forced logits [B * T, tgt_vocab] (row b * T + t predicts labels[b, t]).
  Tensor forward(const Batch& b);
  // Encoder output [B, S, d] for src ids [B, S] (its padding mask is padding_mask(src)).
  Tensor encode(std::span<const int32_t> src, int64_t batch, int64_t src_len);
  // Decoder hidden states [B, T, d] for tgt_in ids [B, T] (causal + target padding masks).
  Tensor decode(std::span<const int32_t> tgt_in, int64_t batch, int64_t tgt_len, const Tensor& memory,
                const KeyPadding& memory_pad);
  // hidden [..., d] -> logits [..., tgt_vocab]
  Tensor generate(const Tensor& hidden) const;

  // Incremental decoding (use under NoGradGuard): start from an encoded memory, then feed one
  // token per row per step; each step runs the decoder on that one position only.
  DecoderState start_decoding(const Tensor& memory, const KeyPadding& memory_pad);
  // tokens [state.batch] at position state.pos -> logits [batch, tgt_vocab]; advances pos.
  Tensor decode_step(DecoderState& state, std::span<const int32_t> tokens);

  // Attention heatmaps: when on, every attention block keeps its last probabilities.
  // attention_maps() names them "encoder.layers.{i}.self_attn", "decoder.layers.{i}.self_attn",
  // "decoder.layers.{i}.multihead_attn", each [B, H, T, S].
  void keep_attention(bool on);
  NamedTensors attention_maps() const;

  Generator& rng() { return rng_; }  // the dropout stream (a checkpoint may save its state)

 private:
  Tensor embed_positions(const Embedding& emb, std::span<const int32_t> ids, int64_t batch, int64_t len,
                         int64_t offset);

  TransformerConfig cfg_;
  Generator rng_;

 public:
  Embedding src_embed, tgt_embed;
  // "transformer.encoder" / "transformer.decoder"
  struct Encoder : Module {
    std::vector<std::unique_ptr<EncoderLayer>> layers;
    LayerNorm norm;
    Encoder(const TransformerConfig& cfg, Generator& gen);
  } encoder;
  struct Decoder : Module {
    std::vector<std::unique_ptr<DecoderLayer>> layers;
    LayerNorm norm;
    Decoder(const TransformerConfig& cfg, Generator& gen);
  } decoder;
  Linear generator;

 private:
  PositionalEncoding pos_;
  Dropout embed_dropout_;
};

}  // namespace tg::nn
